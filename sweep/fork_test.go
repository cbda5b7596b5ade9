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
	ps := make([]timing.Profile, 6)
	for i := range ps {
		ps[i] = timing.Reference
	}
	slo := event.SLO{TTFT: 10 * event.Second, TPOT: 125 * event.Millisecond}
	cfg := sim.Config{Profiles: ps, SLO: slo, KV: timing.FlatKV, Batch: sim.DefaultBatch}
	rng := rand.New(rand.NewPCG(3, 4))
	var reqs []sim.Request
	for at := 0.0; at < 200; at += rng.ExpFloat64() / 3 {
		reqs = append(reqs, sim.Request{At: event.Seconds(at), InputTokens: 50 + rng.IntN(4000), OutputTokens: 1 + rng.IntN(300)})
	}
	w := 20 * event.Second
	starts := make([]event.Time, 10)
	for k := range starts {
		starts[k] = event.Time(k) * w
	}
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
	ps := make([]timing.Profile, 6)
	for i := range ps {
		ps[i] = timing.Reference
	}
	slo := event.SLO{TTFT: 3 * event.Second, TPOT: 60 * event.Millisecond}
	cfg := sim.Config{Profiles: ps, SLO: slo, KV: timing.FlatKV, Batch: sim.DefaultBatch}
	rng := rand.New(rand.NewPCG(5, 6))
	var reqs []sim.Request
	for at := 0.0; at < 200; at += rng.ExpFloat64() / 4 {
		reqs = append(reqs, sim.Request{At: event.Seconds(at), InputTokens: 50 + rng.IntN(4000), OutputTokens: 2 + rng.IntN(300)})
	}
	w := 20 * event.Second
	starts := make([]event.Time, 10)
	for k := range starts {
		starts[k] = event.Time(k) * w
	}
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
