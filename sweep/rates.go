package sweep

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseRates reads a rate list: comma-separated items, each a rate in req/s
// ("2.4"), a multiple of the trace's base rate ("1.5x"), or a range
// "FROM..TO/STEP" of either kind ("0.5x..2x/0.05x", "1..6/0.5"), both ends
// included. base is the trace's mean rate.
func ParseRates(s string, base float64) ([]float64, error) {
	var out []float64
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if from, rest, ok := strings.Cut(item, ".."); ok {
			to, step, ok := strings.Cut(rest, "/")
			if !ok {
				return nil, fmt.Errorf("rate range %q: expected FROM..TO/STEP, e.g. 0.5x..2x/0.05x", item)
			}
			// The range is stepped on the rates as given, each then made
			// canonical: stepping canonical ends (6 digits) lost a range's
			// top rate to rounding (0.5x..1.6x/0.05x on chatdoc ended at
			// 1.55x).
			a, err1 := rawRate(from, base)
			b, err2 := rawRate(to, base)
			d, err3 := rawRate(step, base)
			if err := firstErr(err1, err2, err3); err != nil {
				return nil, fmt.Errorf("rate range %q: %w", item, err)
			}
			if b < a {
				return nil, fmt.Errorf("rate range %q: %v > %v: expected FROM <= TO", item, round9(a), round9(b))
			}
			q := (b - a) / d
			steps := math.Floor(q + 1e-9*max(1, q))
			if steps+1 > MaxRates-float64(len(out)) {
				return nil, fmt.Errorf("rate range %q: %.4g rates: expected at most %d in all", item, steps+1, MaxRates)
			}
			n := int(steps)
			for k := 0; k <= n; k++ {
				out = append(out, round9(a+float64(k)*d))
			}
			continue
		}
		r, err := oneRate(item, base)
		if err != nil {
			return nil, err
		}
		if len(out) >= MaxRates {
			return nil, fmt.Errorf("rates: more than %d: expected at most %d in all", MaxRates, MaxRates)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rates %q: expected at least one rate", s)
	}
	return out, nil
}

func oneRate(s string, base float64) (float64, error) {
	v, err := rawRate(s, base)
	return round9(v), err
}

// rawRate is a rate as given (req/s, or a multiple of base), checked, not
// yet canonical.
func rawRate(s string, base float64) (float64, error) {
	s = strings.TrimSpace(s)
	given := s
	mult := 1.0
	if strings.HasSuffix(s, "x") {
		s, mult = strings.TrimSuffix(s, "x"), base
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("rate %q: expected a positive number of req/s, or a multiple of the base rate such as 1.5x", given)
	}
	if v*mult > MaxRate {
		return 0, fmt.Errorf("rate %q: %.4g req/s: expected at most %g req/s", s, v*mult, MaxRate)
	}
	return v * mult, nil
}

// MaxRate bounds a rate, req/s; the trace's own limit on the requests it
// generates (traces.MaxRequests) usually binds first.
const MaxRate = 1e7

// MaxRates bounds the rates of one list, ranges expanded.
const MaxRates = 10000

// RateDigits is how many significant decimal digits a rate keeps.
const RateDigits = 6

// CanonRate is a rate's canonical value: rounded to RateDigits significant
// decimal digits. Every rate a sweep runs is canonical, so --speedup 0.3
// and --rates 0.3x (0.72 and 0.7199999999999999 req/s on demo) are the
// same run, and a change of a rate below the sixth digit (1e-9 req/s,
// float noise) changes nothing: the generated trace depends on the rate
// only through its canonical value.
func CanonRate(x float64) float64 {
	if !(x > 0) || math.IsInf(x, 0) {
		return x
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', RateDigits, 64), 64)
	return v
}

func round9(x float64) float64 { return CanonRate(x) }

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
