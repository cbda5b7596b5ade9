package sweep

import (
	"math/rand/v2"
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
