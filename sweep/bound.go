package sweep

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/score"
	"github.com/narwhal-bench/narwhal-bench/sim"
)

// The oracle arm is a hindsight bound: at each rate it plays the best
// policy it finds, in hindsight, in a class that holds
//
//   - every split schedule that changes the split only at window starts
//     (windows of BoundWindow(span), cut at the trace's phase bounds too),
//     moves free and instant, placement Algorithm 1, searched with the
//     simulator: warm-started by the per-phase oracle (phase-oracle), every
//     constant split and the realised split of every rival arm (its prefill
//     pool at each window start), then improved by coordinate descent over
//     windows (each window's split +-1, or its neighbour's) until a pass
//     finds nothing better or the budget of replays is spent; and
//   - every online arm (the rivals: every arm the project ships with its
//     default settings, and every arm of the sweep), played as it is.
//
// Because the rivals are in the class, the oracle's attainment is at least
// every rival's at every rate and seed, by construction; the search decides
// by how much. Where a rival wins, the oracle plays that arm and says so
// (OracleSplits.Source): the schedule search did not find a schedule that
// beats it, so there the oracle is a bound over the project's arms, not a
// bound over every possible controller (docs/controllers-figures.md).

// BoundRivals are the arms, besides the sweep's own, that the oracle must
// be at least: every shipped arm with its defaults, for a fleet of n.
func BoundRivals(n int) []string {
	out := core.StaticArms(n)
	return append(out, "aggregated", "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray")
}

// BoundWindow is the oracle's window for a trace spanning span: span/30,
// rounded up to a multiple of 10 s, at least 10 s.
func BoundWindow(span event.Time) event.Time {
	w := span / 30
	step := 10 * event.Second
	w = (w + step - 1) / step * step
	return max(w, step)
}

// BoundBudget caps the replays of the oracle's descent per rate.
const BoundBudget = 240

// boundPlan is the oracle arm's policy at one rate.
type boundPlan struct {
	starts []event.Time // window starts
	splits []int        // prefill engines per window (a schedule)
	arm    string       // when set, the rival arm the oracle plays instead
	ok     int          // requests qualified
	evals  int          // replays the search made
}

// steps returns the plan's schedule.
func (b *boundPlan) steps() []core.ScheduleStep { return scheduleOf(b.starts, b.splits) }

// scheduleOf is the schedule of splits per window: a step at the first
// window and wherever the split changes (a step that keeps the split
// would add a controller tick and could reorder same-instant events).
func scheduleOf(starts []event.Time, splits []int) []core.ScheduleStep {
	var out []core.ScheduleStep
	for k, p := range splits {
		if k == 0 || p != splits[k-1] {
			out = append(out, core.ScheduleStep{At: starts[k], Prefill: p})
		}
	}
	return out
}

// windowStarts cuts [0, end) at every phase bound and every multiple of w.
func windowStarts(bounds []event.Time, w event.Time) []event.Time {
	end := bounds[len(bounds)-1]
	var out []event.Time
	for t := event.Time(0); t < end; t += w {
		out = append(out, t)
	}
	for _, b := range bounds[:len(bounds)-1] {
		out = append(out, b)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// qualifier replays a workload and counts the requests that qualify as
// they end, so that a replay that can no longer qualify more than a bar
// stops there (the search's pruning: exact, since it only skips replays
// whose result could not change a decision).
type qualifier struct {
	fold   event.Fold
	slo    event.SLO
	row    event.Row
	log    *moveLog
	failed int // ended without qualifying
	stopAt int // stop when failed reaches it (no stop: above any count)
}

// stopReplay is the panic that ends a replay early; run recovers it.
type stopReplay struct{}

func (q *qualifier) Record(r *event.Record) {
	q.fold.Record(r)
	if q.log != nil {
		q.log.Record(r)
	}
	switch r.Kind {
	case event.KindFinish, event.KindExpire, event.KindFail, event.KindRefuse:
	default:
		return
	}
	q.fold.RowAt(int(r.Req-1), &q.row)
	if event.Qualify(&q.row, q.slo) != event.CheckOK {
		q.failed++
		if q.failed >= q.stopAt {
			panic(stopReplay{})
		}
	}
}

// run replays reqs under ctrl and returns the requests that qualified;
// with bar >= 0 it stops as soon as at most bar can, and returns bar with
// stopped set.
func (q *qualifier) run(cfg sim.Config, ctrl core.Controller, reqs []sim.Request, slo event.SLO, log *moveLog, bar int) (v int, stopped bool, err error) {
	q.fold.Reset()
	q.slo, q.log, q.failed, q.stopAt = slo, log, 0, len(reqs)+1
	if bar >= 0 {
		if bar >= len(reqs) {
			return bar, true, nil // nothing can qualify more
		}
		q.stopAt = len(reqs) - bar
	}
	s, err := sim.New(cfg, ctrl, reqs, q)
	if err != nil {
		return 0, false, err
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(stopReplay); !ok {
					panic(r)
				}
				stopped = true
			}
		}()
		_, err = s.Run()
	}()
	if stopped {
		return bar, true, nil
	}
	if err != nil {
		return 0, false, err
	}
	if err := q.fold.Err(); err != nil {
		return 0, false, err
	}
	// Every row has ended (Err): those that qualified are the rest.
	return q.fold.Len() - q.failed, false, nil
}

// wholeReplays remembers the exact qualified counts of schedules replayed
// over a rate's whole workload. The per-phase oracle and the bound's
// search share one per rate: both replay constant splits, and the bound
// starts from the per-phase oracle's schedule.
type wholeReplays map[string]int

// stepsKey names a schedule exactly.
func stepsKey(steps []core.ScheduleStep) string {
	b := make([]byte, 0, 16*len(steps))
	for _, st := range steps {
		b = strconv.AppendInt(b, int64(st.At), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(st.Prefill), 10)
		b = append(b, ',')
	}
	return string(b)
}

// replay returns the requests qualified under the schedule steps, at most
// bar when it cannot beat bar (>= 0), from memo when it was replayed
// whole before.
func (q *qualifier) replay(cfg sim.Config, reqs []sim.Request, slo event.SLO, steps []core.ScheduleStep, memo wholeReplays, bar int) (int, error) {
	key := stepsKey(steps)
	if v, ok := memo[key]; ok {
		return v, nil
	}
	v, stopped, err := q.run(cfg, &core.Scheduled{Arm: "oracle", Steps: steps}, reqs, slo, nil, bar)
	if err == nil && !stopped && memo != nil {
		memo[key] = v
	}
	return v, err
}

// bound searches the oracle's plan at one rate.
func bound(cfg sim.Config, reqs []sim.Request, bounds []event.Time, slo event.SLO, phase []score.PhaseTarget, rivals []string, memo wholeReplays) (*boundPlan, error) {
	n := len(cfg.Profiles)
	starts := windowStarts(bounds, BoundWindow(bounds[len(bounds)-1]))
	plan := &boundPlan{starts: starts, ok: -1}
	var q qualifier
	seen := map[string]int{}
	eval := func(sc []int) (int, error) {
		key := fmt.Sprint(sc)
		if v, ok := seen[key]; ok {
			return v, nil
		}
		plan.evals++
		// A schedule matters only if it beats the best so far: its replay
		// stops once it cannot, and v is then an upper bound (at most
		// plan.ok, which only grows), which decides try the same way.
		v, err := q.replay(cfg, reqs, slo, scheduleOf(starts, sc), memo, plan.ok)
		seen[key] = v
		return v, err
	}
	try := func(sc []int) error {
		v, err := eval(sc)
		if err == nil && v > plan.ok {
			plan.ok, plan.splits = v, slices.Clone(sc)
		}
		return err
	}
	// Warm starts: the per-phase oracle, every constant split.
	if len(phase) > 0 {
		sc := make([]int, len(starts))
		for k, t := range starts {
			for _, ph := range phase {
				if t >= ph.Start && t < ph.End {
					sc[k] = ph.Prefill
				}
			}
			if sc[k] == 0 {
				sc[k] = phase[len(phase)-1].Prefill
			}
		}
		if err := try(sc); err != nil {
			return nil, err
		}
	}
	for p := 1; p < n; p++ {
		if err := try(slices.Repeat([]int{p}, len(starts))); err != nil {
			return nil, err
		}
	}
	// The rivals: each played as it is, and its realised split as a warm
	// start.
	bestRival, bestRivalOK := "", -1
	for _, arm := range rivals {
		ctrl, err := core.NewController(arm, n)
		if err != nil {
			return nil, err
		}
		log := &moveLog{}
		v, _, err := q.run(cfg, ctrl, reqs, slo, log, -1) // played whole: its splits are a warm start
		if err != nil {
			return nil, fmt.Errorf("rival %s: %w", arm, err)
		}
		if v > bestRivalOK {
			bestRival, bestRivalOK = arm, v
		}
		splits := score.Splits(log.moves)
		sc := make([]int, len(starts))
		for k, t := range starts {
			sc[k] = min(max(score.SplitAt(splits, t), 1), n-1)
		}
		if err := try(sc); err != nil {
			return nil, err
		}
	}
	// Coordinate descent over windows.
	for pass := 0; pass < 3 && plan.evals < BoundBudget; pass++ {
		improved := false
		for k := range starts {
			cur := plan.splits[k]
			cands := []int{cur - 1, cur + 1}
			if k > 0 {
				cands = append(cands, plan.splits[k-1])
			}
			if k+1 < len(starts) {
				cands = append(cands, plan.splits[k+1])
			}
			for _, p := range cands {
				if p < 1 || p >= n || p == plan.splits[k] || plan.evals >= BoundBudget {
					continue
				}
				before := plan.ok
				sc := slices.Clone(plan.splits)
				sc[k] = p
				if err := try(sc); err != nil {
					return nil, err
				}
				improved = improved || plan.ok > before
			}
		}
		if !improved {
			break
		}
	}
	if bestRivalOK > plan.ok {
		plan.arm, plan.ok = bestRival, bestRivalOK
	}
	return plan, nil
}
