package stub

import (
	"hash/fnv"
	"math/rand/v2"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// vocab is the stub's whole vocabulary: every answer token is one word.
var vocab = [...]string{
	"the", "engine", "prefill", "decode", "token", "batch", "cache", "router",
	"stream", "chunk", "budget", "latency", "queue", "block", "lease", "model",
	"answer", "prompt", "fleet", "split", "moves", "serves", "waits", "runs",
	"fast", "slow", "and", "of", "to", "a", "in", "on",
}

// answer is a request's whole answer, decided when it arrives.
type answer struct {
	// words holds each token as an index into spacedVocab (a byte a
	// token, so a 20,000-token answer costs 20 KB); tokens, when set,
	// holds the texts instead (an answer cut at a stop string).
	words  []uint8
	tokens []string
	finish string // api.FinishLength or api.FinishStop
	stop   string // the stop string that ended it ("" for none)
	// echo is the text shown before the answer (a request's echo:
	// echoText); with echoOnly the answer's tokens are run, counted and
	// not shown (vLLM's echo with max_tokens 0).
	echo     string
	echoOnly bool
}

// n is the answer's length in tokens.
func (a *answer) n() int {
	if a.tokens != nil {
		return len(a.tokens)
	}
	return len(a.words)
}

// token is the text of the answer's token i (0-based).
func (a *answer) token(i int) string {
	if a.tokens != nil {
		return a.tokens[i]
	}
	return spacedVocab[a.words[i]]
}

// shown is the text written for token i (0-based): the first carries the
// echo before it, and with echoOnly the echo alone.
func (a *answer) shown(i int) string {
	t := ""
	if !a.echoOnly {
		t = a.token(i)
	}
	if i == 0 {
		return a.echo + t
	}
	return t
}

// text is the whole answer as written, the echo first.
func (a *answer) text() string {
	var b strings.Builder
	for i := range a.n() {
		b.WriteString(a.shown(i))
	}
	return b.String()
}

// echoText is what vLLM shows before an answer that asks for echo: on
// completions the prompt's text (token ids as wordsOf reads them); on chat the last message's content when that
// message has the answer's role (assistant, or with add_generation_prompt
// false the last message's own), so that an answer continues it.
func echoText(r *api.Request) string {
	if !r.Echo() {
		return ""
	}
	if !r.Chat {
		if r.PromptIDs != nil {
			return wordsOf(r.PromptIDs)
		}
		return r.Prompt
	}
	if len(r.Messages) == 0 {
		return ""
	}
	last := r.Messages[len(r.Messages)-1]
	if last.Role != answerRole(r) {
		return ""
	}
	return last.Content
}

// answerRole is a chat answer's role, as vLLM decides it: assistant, or
// with add_generation_prompt false the last message's own (the answer
// continues that message).
func answerRole(r *api.Request) string {
	if v, ok := r.Raw["add_generation_prompt"]; ok && len(r.Messages) > 0 {
		if b, ok := api.LaxBool(v); ok && !b {
			return r.Messages[len(r.Messages)-1].Role
		}
	}
	return "assistant"
}

// promptHash keys an answer to its prompt, so the same prompt always gets
// the same answer (on either leg of a handoff too).
func promptHash(r *api.Request) uint64 {
	h := fnv.New64a()
	if r.PromptIDs != nil {
		var b [4]byte
		for _, id := range r.PromptIDs {
			b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
			h.Write(b[:])
		}
	} else {
		h.Write([]byte(r.Text()))
	}
	return h.Sum64()
}

// makeAnswer draws the answer from a PCG seeded with the stub's seed and
// the prompt: words from vocab, one per token, up to the output limit. A
// stop string ends it at the token that completes it (text cut before the
// stop string, finish "stop"); with meanOutput > 0 an end-of-sequence
// comes after a drawn natural length (1 to 2·meanOutput tokens) unless
// ignore_eos. Neither can end it before min_tokens (as vLLM).
// answer.words indexes spacedVocab with a byte: the vocabulary must stay
// within 256 words (this fails to compile otherwise).
var _ [256 - len(vocab)]struct{}

// spacedVocab is vocab with each word's leading space: the tokens of an
// answer share these strings.
var spacedVocab = func() []string {
	out := make([]string, len(vocab))
	for i, w := range vocab {
		out[i] = " " + w
	}
	return out
}()

func makeAnswer(r *api.Request, limit int, seed uint64, meanOutput int) answer {
	h := promptHash(r)
	rng := rand.New(rand.NewPCG(seed, h))
	natural := 0
	if meanOutput > 0 && !r.IgnoreEOS {
		natural = 1 + rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, h)).IntN(2*meanOutput)
	}
	a := answer{finish: api.FinishLength}
	var text strings.Builder
	longest := 0
	for _, s := range r.Stop {
		longest = max(longest, len(s))
	}
	if len(r.Stop) == 0 {
		// No stop strings: the answer is word indices.
		a.words = make([]uint8, 0, min(limit, 1<<16))
		for k := 1; k <= limit; k++ {
			a.words = append(a.words, uint8(rng.IntN(len(spacedVocab))))
			if k == natural && k < limit && k >= r.MinTokens {
				a.finish = api.FinishStop
				return a
			}
		}
		return a
	}
	a.tokens = make([]string, 0, min(limit, 1<<16))
	for k := 1; k <= limit; k++ {
		w := spacedVocab[rng.IntN(len(spacedVocab))]
		a.tokens = append(a.tokens, w)
		start := text.Len()
		text.WriteString(w)
		if k < r.MinTokens {
			continue
		}
		if cut, stop, ok := findStop(text.String(), start, longest, r.Stop); ok {
			// Keep the text before the stop string; earlier tokens are whole.
			full := text.String()[:cut]
			a.tokens[k-1] = full[min(start, len(full)):]
			if cut < start { // the stop string began in an earlier token
				a.tokens = trimTo(a.tokens, cut)
			}
			a.finish, a.stop = api.FinishStop, stop
			return a
		}
		if k == natural && k < limit {
			a.finish = api.FinishStop
			return a
		}
	}
	return a
}

// findStop looks for a stop string that ends inside the newest token
// (which starts at byte start) and returns where it begins, and which.
func findStop(text string, start, longest int, stops []string) (int, string, bool) {
	if len(stops) == 0 {
		return 0, "", false
	}
	from := max(0, start-longest+1)
	best, which := -1, ""
	for _, s := range stops {
		if i := strings.Index(text[from:], s); i >= 0 && (best < 0 || from+i < best) {
			best, which = from+i, s
		}
	}
	return best, which, best >= 0
}

// trimTo cuts the tokens' joined text at byte n: tokens after it become
// empty strings (their token was still generated, as in vLLM where the
// stop string completes on the last token).
func trimTo(tokens []string, n int) []string {
	pos := 0
	for i, t := range tokens {
		switch {
		case pos >= n:
			tokens[i] = ""
		case pos+len(t) > n:
			tokens[i] = t[:n-pos]
		}
		pos += len(t)
	}
	return tokens
}

// wordsOf is the stub's text of token ids, as /detokenize gives it: each
// id one of the answer words (id modulo their number). The stub's ids
// from text are hashes (tokenIDs), so this is not the text they came
// from; the same ids always give the same text.
func wordsOf(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(spacedVocab[id%len(spacedVocab)])
	}
	return b.String()
}

// vocabSize is the number of token ids /tokenize gives and /detokenize
// takes.
const vocabSize = 50000

// tokenIDs is /tokenize's token list: the prompt's ids when it was ids,
// else n synthetic ids, one per slice of the text.
func tokenIDs(r *api.Request, n int) []int {
	if r.PromptIDs != nil {
		return r.PromptIDs
	}
	ids := make([]int, n)
	for i, piece := range textSlices(r.Text(), n) {
		h := fnv.New32a()
		h.Write([]byte(piece))
		ids[i] = int(h.Sum32() % vocabSize)
	}
	return ids
}

// textSlices cuts text in n slices of about equal length: the stub's
// tokens of a text prompt (/tokenize hashes them, logprobs show them).
func textSlices(text string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = text[i*len(text)/n : (i+1)*len(text)/n]
	}
	return out
}
