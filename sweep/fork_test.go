package sweep

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/sim"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// The plan's paused runs follow the plan: after a change at a window the
// runs it pauses later are the new plan's, also when the run it goes on
// from was not kept (no room), and a candidate forked from them counts
// what its whole replay counts.
func TestPlanRunsFollowAChange(t *testing.T) {
	defer func(slots int) { maxPausedSlots = slots }(maxPausedSlots)
	slo := event.SLO{TTFT: 10 * event.Second, TPOT: 125 * event.Millisecond}
	cfg, reqs := refWorkload(6, slo, 3, 3, 200, 1)
	starts := windowStarts([]event.Time{0, 200 * event.Second}, 20*event.Second)
	a := []int{3, 3, 3, 2, 2, 4, 4, 4, 3, 3}
	b := []int{3, 3, 3, 5, 5, 1, 1, 4, 2, 2} // the plan from window 3 on
	c := []int{3, 3, 3, 5, 5, 1, 2, 2, 2, 2} // a candidate of b's at window 6

	maxPausedSlots = 0 // nothing kept: the plan's run goes on in place
	runs := newPlanRuns(cfg, reqs, slo, starts, scheduleOf(starts, a))
	if _, err := runs.base(3); err != nil {
		t.Fatal(err)
	}
	maxPausedSlots = 1 << 19
	runs.changed(3, scheduleOf(starts, b))
	base, err := runs.base(6)
	if err != nil {
		t.Fatal(err)
	}
	if base == nil || runs.at[6] != base {
		t.Fatalf("window 6: paused run %p, kept %p: expected one kept there", base, runs.at[6])
	}
	q := &qualifier{}
	want, _, err := q.run(cfg, &core.Scheduled{Arm: "oracle", Steps: scheduleOf(starts, c)}, reqs, slo, nil, -1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := base.fork(scheduleOf(starts, c), -1, len(reqs))
	if err != nil {
		t.Fatalf("fork at window 6: %v", err)
	}
	got, _, err := f.q.finish(f.s, len(reqs), -1)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("candidate forked at window 6 qualified %d, its whole replay %d", got, want)
	}
}

// The descent's screen (screen in bound.go): a candidate that, at the
// start of the window after the one it changes, has more requests failed
// or past qualifying (sim.Sim.Doomed) than the plan's run is dropped
// there, reported at the bar; every other one is replayed to the end and
// its exact count returned when it beats the bar. Played from the plan's
// paused runs and from the start alike.
func TestDescentScreen(t *testing.T) {
	slo := event.SLO{TTFT: 3 * event.Second, TPOT: 60 * event.Millisecond}
	cfg, reqs := refWorkload(6, slo, 5, 4, 200, 2)
	starts := windowStarts([]event.Time{0, 200 * event.Second}, 20*event.Second)
	plan := slices.Repeat([]int{3}, len(starts))
	q := &qualifier{}
	ok, _, err := q.run(cfg, &core.Scheduled{Arm: "oracle", Steps: scheduleOf(starts, plan)}, reqs, slo, nil, -1)
	if err != nil {
		t.Fatal(err)
	}
	runs := newPlanRuns(cfg, reqs, slo, starts, scheduleOf(starts, plan))
	s := newSearcher(context.Background(), cfg, reqs, slo, nil, 1)
	dropped, passed, won := 0, 0, 0
	for j := 0; j+1+screenWindows < len(starts); j++ {
		h := j + 1 + screenWindows
		planFailed, err := runs.failedAt(h)
		if err != nil {
			t.Fatal(err)
		}
		base, err := runs.base(j)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []int{1, 2, 4, 5} {
			c := slices.Clone(plan)
			c[j] = p
			steps := scheduleOf(starts, c)
			whole, _, err := q.run(cfg, &core.Scheduled{Arm: "oracle", Steps: steps}, reqs, slo, nil, -1)
			if err != nil {
				t.Fatal(err)
			}
			candFailed, err := newPlanRuns(cfg, reqs, slo, starts, steps).failedAt(h)
			if err != nil {
				t.Fatal(err)
			}
			for _, from := range []*paused{base, nil} {
				got, err := s.replay(q, steps, ok, from, &screen{at: starts[h], failed: planFailed})
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case candFailed > planFailed:
					if got != ok {
						t.Errorf("window %d split %d: %d failed or doomed at %v against the plan's %d: expected it dropped at the bar %d, got %d", j, p, candFailed, starts[h], planFailed, ok, got)
					}
					dropped++
				case whole > ok:
					if got != whole {
						t.Errorf("window %d split %d: passed the screen (%d against %d) and qualifies %d: got %d", j, p, candFailed, planFailed, whole, got)
					}
					won++
				default:
					if got != ok {
						t.Errorf("window %d split %d: qualifies %d, not above the bar %d: expected the bar, got %d", j, p, whole, ok, got)
					}
					passed++
				}
			}
		}
	}
	if dropped == 0 || passed+won == 0 {
		t.Errorf("dropped %d, passed %d (%d above the plan): expected both", dropped, passed+won, won)
	}
	t.Logf("dropped %d, passed %d, of which %d above the plan", dropped, passed+won, won)
}

// On a fleet larger than ExhaustiveSplits+1 the searches try a grid of
// split counts and refine around the best instead of every count: the
// grid spans 1..n-1 in ExhaustiveSplits steps, the refinement ends with
// the best's neighbours, and on a one-phase workload the per-phase
// oracle's split (128 instances, a grid step of 5) qualifies within 1% of
// the best constant split found by trying every one (issue 12: the bound's search scales to 1,000
// instances).
func TestLargeFleetSplitSearch(t *testing.T) {
	for _, n := range []int{2, 8, 33} {
		if g := splitGrid(n); len(g) != n-1 || g[0] != 1 || g[len(g)-1] != n-1 {
			t.Errorf("n %d: grid %v: expected every split 1..%d", n, g, n-1)
		}
	}
	for _, n := range []int{34, 48, 512, 1024} {
		g := splitGrid(n)
		if len(g) != ExhaustiveSplits || g[0] != 1 || g[len(g)-1] != n-1 {
			t.Errorf("n %d: grid of %d from %d to %d: expected %d from 1 to %d", n, len(g), g[0], g[len(g)-1], ExhaustiveSplits, n-1)
		}
		for i := 1; i < len(g); i++ {
			if d := g[i] - g[i-1]; d < 1 || d > gridSpacing(n) {
				t.Errorf("n %d: grid step %d between %d and %d: expected 1..%d", n, d, g[i-1], g[i], gridSpacing(n))
			}
		}
		// Refining around a split between two grid points reaches its
		// neighbours.
		best := g[len(g)/2] + gridSpacing(n)/2
		tried := map[int]bool{}
		for _, p := range g {
			tried[p] = true
		}
		for sp := gridSpacing(n); ; {
			var more []int
			more, sp = refineSplits(n, best, sp, func(p int) bool { return tried[p] })
			if len(more) == 0 {
				break
			}
			for _, p := range more {
				tried[p] = true
			}
		}
		if !tried[best-1] || !tried[best+1] {
			t.Errorf("n %d: refining around %d never tried its neighbours", n, best)
		}
		if len(tried) > 4*ExhaustiveSplits {
			t.Errorf("n %d: %d splits tried: expected O(ExhaustiveSplits)", n, len(tried))
		}
	}

	const n = 128
	slo := event.SLO{TTFT: 3 * event.Second, TPOT: 60 * event.Millisecond}
	cfg, reqs := refWorkload(n, slo, 9, 75, 60, 2)
	q := &qualifier{}
	count := func(p int) int {
		v, _, err := q.run(cfg, &core.Scheduled{Arm: "oracle", Steps: []core.ScheduleStep{{At: 0, Prefill: p}}}, reqs, slo, nil, -1)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	bestAll := 0
	for p := 1; p < n; p++ {
		bestAll = max(bestAll, count(p))
	}
	targets, err := oracle(context.Background(), cfg, reqs, []event.Time{0, event.Seconds(60)}, slo, wholeReplays{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	got := count(targets[0].Prefill)
	if float64(got) < 0.99*float64(bestAll) {
		t.Errorf("128 instances: the per-phase oracle's split %d qualifies %d, the best constant split %d", targets[0].Prefill, got, bestAll)
	}
	t.Logf("128 instances, %d requests: split %d qualifies %d; the best of every constant split %d", len(reqs), targets[0].Prefill, got, bestAll)
}

// refWorkload is a fleet of n engines of the reference profile under slo,
// and Poisson arrivals at rate req/s for span seconds drawn from
// PCG(seed, seed+1): prompts of 50-4,049 tokens, answers of minOut to
// minOut+299.
func refWorkload(n int, slo event.SLO, seed uint64, rate, span float64, minOut int) (sim.Config, []sim.Request) {
	ps := make([]timing.Profile, n)
	for i := range ps {
		ps[i] = timing.Reference
	}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var reqs []sim.Request
	for at := 0.0; at < span; at += rng.ExpFloat64() / rate {
		reqs = append(reqs, sim.Request{At: event.Seconds(at), InputTokens: 50 + rng.IntN(4000), OutputTokens: minOut + rng.IntN(300)})
	}
	return sim.Config{Profiles: ps, SLO: slo, KV: timing.FlatKV, Batch: sim.DefaultBatch}, reqs
}
