package sweep

import (
	"math"
	"testing"
)

// The command line's rate, seed and duration parsers: no input panics or
// hangs; what they accept is in range, and what they refuse says why.
func FuzzParseRates(f *testing.F) {
	for _, s := range []string{"2.4", "1.5x", "0.5x..2x/0.05x", "1..6/0.5", "1,2,3", "", ",", "1..", "1e-300..1e7/1e-300",
		"0", "-1", "NaN", "Inf", "1x..2/0.1", "0.1..0.3/0.1"} {
		f.Add(s, 2.4)
	}
	f.Fuzz(func(t *testing.T, s string, base float64) {
		if !(base > 0) || math.IsInf(base, 0) {
			return
		}
		rates, err := ParseRates(s, base)
		if err != nil {
			if rates != nil || err.Error() == "" {
				t.Fatalf("%q: rates %v with error %v", s, rates, err)
			}
			return
		}
		if len(rates) == 0 || len(rates) > MaxRates {
			t.Fatalf("%q: %d rates: expected 1 to %d", s, len(rates), MaxRates)
		}
		for _, r := range rates {
			if !(r > 0) || r > MaxRate {
				t.Fatalf("%q: rate %v out of (0, %g]", s, r, MaxRate)
			}
		}
	})
}

func FuzzParseSeeds(f *testing.F) {
	for _, s := range []string{"5", "1,2,3", "1..5", "18446744073709551615..18446744073709551615", "0..999", "1,1", "", "x"} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, s string, first uint64) {
		seeds, err := ParseSeeds(s, first)
		if err != nil {
			if seeds != nil || err.Error() == "" {
				t.Fatalf("%q: seeds %v with error %v", s, seeds, err)
			}
			return
		}
		if len(seeds) == 0 || len(seeds) > 1000 {
			t.Fatalf("%q: %d seeds: expected 1 to 1000", s, len(seeds))
		}
		seen := map[uint64]bool{}
		for _, x := range seeds {
			if seen[x] {
				t.Fatalf("%q: seed %d twice", s, x)
			}
			seen[x] = true
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"2.1s", "45ms", "1h", "0s", "-1s", "5", "", "1e300h", "9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: empty error", s)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q: %v < 0", s, d)
		}
	})
}
