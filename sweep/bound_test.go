package sweep

import (
	"reflect"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// The oracle is a bound: on the test traces, at every rate and seed, no
// arm qualifies more requests than it (issue 10, deliverable 4).
func TestOracleBoundsEveryArm(t *testing.T) {
	cases := []struct {
		trace string
		rates []float64
		seeds []uint64
	}{
		{"demo", []float64{1.6, 3.2, 4.4, 6.4}, []uint64{1, 2, 3}},
		{"steady", []float64{6, 9}, []uint64{1}},
	}
	for _, c := range cases {
		tr, fl := load(t, c.trace)
		arms := append(BoundRivals(fl.Size()), "static:4P4D/alg1", "phase-oracle", "oracle")
		for _, seed := range c.seeds {
			res, err := Execute(Config{Trace: tr, Fleet: fl, Arms: arms, Rates: c.rates, Seed: seed, Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			oi := len(arms) - 1
			for ri, rate := range res.Rates {
				o := res.Runs[oi*len(res.Rates)+ri]
				for ai, a := range arms[:oi] {
					if r := res.Runs[ai*len(res.Rates)+ri]; r.SLOOK > o.SLOOK {
						t.Errorf("%s seed %d at %v req/s: %s qualified %d, the oracle %d (%s)", c.trace, seed, rate, a, r.SLOOK, o.SLOOK, res.Oracle[ri].Source)
					}
				}
			}
		}
	}
}

// The hindsight searches run their candidates in parallel; what they find
// must not depend on how many workers they have (determinism: the same
// experiment, trace and seed give the same result).
func TestOracleSearchIndependentOfWorkers(t *testing.T) {
	tr, fl := load(t, "demo")
	var first *Result
	for _, w := range []int{1, 2, 5} {
		res, err := Execute(Config{Trace: tr, Fleet: fl, Arms: []string{"phase-oracle", "oracle"}, Rates: []float64{4.4}, Seed: 2, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = res
			continue
		}
		if !reflect.DeepEqual(res.Oracle, first.Oracle) || !reflect.DeepEqual(res.Runs, first.Runs) {
			t.Errorf("workers %d: oracle %+v, runs %+v; workers 1: %+v, %+v", w, res.Oracle, res.Runs, first.Oracle, first.Runs)
		}
	}
}

// The descent replays a candidate from the plan's run paused at the
// window it changes (planRuns): the search finds exactly what it finds
// replaying every candidate from the start, with room for every paused
// run and with room for almost none (candidates then fork from earlier
// windows, or replay from the start).
func TestOracleForkedReplays(t *testing.T) {
	cases := []struct {
		trace string
		rates []float64
		seed  uint64
	}{
		{"demo", []float64{2.4, 4.4}, 1},
		{"demo", []float64{3.6}, 4},
		{"steady", []float64{7, 10}, 2},
		{"chatdoc", []float64{4.75}, 1},
	}
	defer func(on bool, slots int) { forkReplays, maxPausedSlots = on, slots }(forkReplays, maxPausedSlots)
	for _, c := range cases {
		tr, fl := load(t, c.trace)
		cfg := Config{Trace: tr, Fleet: fl, Arms: []string{"oracle"}, Rates: c.rates, Seed: c.seed, Workers: 2}
		forkReplays = false
		want, err := Execute(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, slots := range []int{1 << 19, 300} {
			forkReplays, maxPausedSlots = true, slots
			got, err := Execute(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Oracle, want.Oracle) || !reflect.DeepEqual(got.Runs, want.Runs) {
				t.Errorf("%s seed %d, paused runs up to %d slots: oracle %+v, runs %+v; replayed from the start: %+v, %+v", c.trace, c.seed, slots, got.Oracle, got.Runs, want.Oracle, want.Runs)
			}
		}
	}
}

// Where the oracle plays a rival that moves roles, it reuses the run the
// bound's search played of that rival (or the sweep's own run of that
// arm) instead of playing it again, unless the run is journaled: the run
// reported must be the one a replay gives, record for record the same
// scores, whichever way it was had.
func TestOracleReusesTheRivalsRun(t *testing.T) {
	tr, fl := load(t, "mixed")
	replay := func(string, event.RunMeta) (Sink, error) { return nil, nil } // journaled: the oracle replays
	for _, arms := range [][]string{{"oracle"}, {"arrow", "oracle"}} {
		cfg := Config{Trace: tr, Fleet: fl, Arms: arms, Rates: []float64{5.6}, Seed: 2, Workers: 2}
		got, err := Execute(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if src := got.Oracle[0].Source; src != "arm arrow" {
			t.Fatalf("arms %v: the oracle's source is %q: this test needs a case where it plays a rival that moves roles", arms, src)
		}
		cfg.Journal = replay
		want, err := Execute(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Runs, want.Runs) || !reflect.DeepEqual(got.Oracle, want.Oracle) {
			t.Errorf("arms %v: reused %+v; replayed %+v", arms, got.Runs, want.Runs)
		}
		o := got.Runs[len(arms)-1]
		if o.Arm != "oracle" || o.SLOOK == 0 {
			t.Errorf("arms %v: the oracle's run %+v", arms, o)
		}
		if len(arms) == 2 {
			a := got.Runs[0]
			a.Arm = "oracle"
			if a != o {
				t.Errorf("the oracle's run %+v is not arrow's %+v", o, got.Runs[0])
			}
		}
	}
}
