package sweep

import (
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/score"
)

// Refine bisects the grid step above each arm's sustained rate: Refine
// runs per refined arm, each at the middle of what is left of its bracket,
// each the run a sweep at that rate gives; the grid's runs are untouched;
// the sustained rate is the highest refined rate that passes (else the
// grid's), and the crossing lies in the bracket left (issue 10,
// deliverable 3: sustained, defined the standard way, to a finer step).
func TestRefineBisectsTheSustainedStep(t *testing.T) {
	tr, fl := load(t, "demo")
	arms := []string{"static:4P4D", "static:2P6D", "aggregated", "adaptive"}
	cfg := Config{Trace: tr, Fleet: fl, Arms: arms, Rates: []float64{1.2, 2.4, 3.6, 4.8, 6}, Seed: 3, Workers: 2}
	grid, err := Execute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Refine = 3
	res, err := Execute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Runs, grid.Runs) {
		t.Fatal("refining changed the grid's runs")
	}
	if res.Refine != 3 {
		t.Errorf("Refine %d, want 3", res.Refine)
	}
	refined := 0
	for _, arm := range arms {
		g := grid.Sustained[arm]
		var runs []Run
		for _, r := range res.Refined {
			if r.Arm == arm {
				runs = append(runs, r)
			}
		}
		if g == nil || grid.SustainedGridTop[arm] {
			if len(runs) > 0 || !reflect.DeepEqual(res.Sustained[arm], g) {
				t.Errorf("%s: not bracketed on the grid (sustained %v, top %v), yet %d refined runs, sustained %v", arm, g, grid.SustainedGridTop[arm], len(runs), res.Sustained[arm])
			}
			continue
		}
		refined++
		lo, hi := *g, res.Rates[slices.Index(res.Rates, *g)+1]
		if len(runs) != 3 {
			t.Fatalf("%s: %d refined runs, want 3", arm, len(runs))
		}
		for _, r := range runs {
			if mid := CanonRate((lo + hi) / 2); r.Rate != mid {
				t.Fatalf("%s: refined at %v, want the middle of [%v, %v], %v", arm, r.Rate, lo, hi, mid)
			}
			// The refined run is the run a sweep at that rate gives.
			one, err := Execute(Config{Trace: tr, Fleet: fl, Arms: []string{arm}, Rates: []float64{r.Rate}, Seed: 3, Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(one.Runs[0], r) {
				t.Errorf("%s at %v: refined run %+v, a sweep at that rate %+v", arm, r.Rate, r, one.Runs[0])
			}
			if r.Attainment >= score.AttainmentTarget {
				lo = r.Rate
			} else {
				hi = r.Rate
			}
		}
		if s := res.Sustained[arm]; s == nil || *s != lo {
			t.Errorf("%s: sustained %v, want the bracket's passing end %v", arm, s, lo)
		}
		if c := res.SustainedCrossing[arm]; c == nil || *c < lo || *c > hi || math.IsNaN(*c) {
			t.Errorf("%s: crossing %v, want within [%v, %v]", arm, c, lo, hi)
		}
	}
	if refined == 0 {
		t.Fatal("no arm was bracketed on the grid: the test refines nothing")
	}
}

// Refined, the bound still bounds: at every refined rate where the oracle
// ran beside an arm it qualifies at least as many requests, and no arm's
// refined sustained rate is above the oracle's (issue 10, deliverable 4).
func TestRefinedOracleStillBounds(t *testing.T) {
	tr, fl := load(t, "demo")
	arms := []string{"static:4P4D", "aggregated", "adaptive", "oracle"}
	res, err := Execute(Config{Trace: tr, Fleet: fl, Arms: arms, Rates: []float64{2.4, 3.6, 4.8}, Seed: 2, Workers: 2, Refine: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refined) == 0 {
		t.Fatal("nothing refined: the test checks nothing")
	}
	oracleAt := map[float64]Run{}
	for _, r := range res.Refined {
		if r.Arm == "oracle" {
			oracleAt[r.Rate] = r
		}
	}
	for _, r := range res.Refined {
		if o, ok := oracleAt[r.Rate]; ok && r.SLOOK > o.SLOOK {
			t.Errorf("%s at %v req/s: qualified %d, the oracle %d", r.Arm, r.Rate, r.SLOOK, o.SLOOK)
		}
	}
	o := res.Sustained["oracle"]
	for _, a := range arms[:3] {
		if s := res.Sustained[a]; s != nil && (o == nil || *s > *o) {
			t.Errorf("%s sustains %v, above the oracle's %v", a, *s, o)
		}
	}
}

func TestRefineOutOfRange(t *testing.T) {
	tr, fl := load(t, "demo")
	for _, n := range []int{-1, MaxRefine + 1} {
		if _, err := Execute(Config{Trace: tr, Fleet: fl, Arms: []string{"static:4P4D"}, Refine: n}); err == nil {
			t.Errorf("refine %d: no error", n)
		}
	}
}

// A grid given in any order brackets each arm between its sustained rate
// and the next higher grid rate: the same refined sweep as in order.
func TestRefineUnorderedGrid(t *testing.T) {
	tr, fl := load(t, "demo")
	arms := []string{"static:4P4D", "adaptive"}
	cfg := Config{Trace: tr, Fleet: fl, Arms: arms, Rates: []float64{1.2, 2.4, 3.6, 4.8, 6}, Seed: 3, Workers: 2, Refine: 2}
	in, err := Execute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Rates = []float64{6, 2.4, 4.8, 1.2, 3.6}
	out, err := Execute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in.Sustained, out.Sustained) || !reflect.DeepEqual(in.Refined, out.Refined) {
		t.Errorf("grid in order: sustained %v, refined %+v; out of order: %v, %+v", in.Sustained, in.Refined, out.Sustained, out.Refined)
	}
	if len(in.Refined) == 0 {
		t.Fatal("nothing refined: the test checks nothing")
	}
}
