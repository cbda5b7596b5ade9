package report

import (
	"strings"
	"unicode"
)

// NormalizeAnswer prepares an answer for token F1, the way SQuAD's
// evaluation does: lower case, punctuation and symbols removed (not
// replaced by spaces, so "don't" becomes "dont"), the articles a, an and
// the dropped as whole words, and the rest split on white space.
func NormalizeAnswer(s string) []string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range strings.ToLower(s) {
		if unicode.IsPunct(r) || unicode.IsSymbol(r) {
			continue
		}
		b.WriteRune(r)
	}
	fields := strings.Fields(b.String())
	out := fields[:0]
	for _, f := range fields {
		if f == "a" || f == "an" || f == "the" {
			continue
		}
		out = append(out, f)
	}
	return out
}

// F1 is the token-overlap F1 of a response against a reference answer
// (SQuAD): with both normalised by NormalizeAnswer, the tokens they share
// counted as a multiset, precision = shared / response tokens, recall =
// shared / reference tokens, and F1 their harmonic mean. When either side
// has no tokens left, F1 is 1 if both are empty and 0 otherwise.
func F1(response, reference string) float64 {
	pred, gold := NormalizeAnswer(response), NormalizeAnswer(reference)
	if len(pred) == 0 || len(gold) == 0 {
		if len(pred) == len(gold) {
			return 1
		}
		return 0
	}
	counts := make(map[string]int, len(gold))
	for _, t := range gold {
		counts[t]++
	}
	same := 0
	for _, t := range pred {
		if counts[t] > 0 {
			counts[t]--
			same++
		}
	}
	if same == 0 {
		return 0
	}
	p := float64(same) / float64(len(pred))
	r := float64(same) / float64(len(gold))
	return 2 * p * r / (p + r)
}
