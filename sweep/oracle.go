package sweep

import (
	"context"
	"math"
	"slices"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/score"
	"github.com/narwhal-bench/narwhal-bench/sim"
)

// MoveLog keeps a run's role-move records, opening roles included (an
// event.Recorder; the live driver scores with it as the simulator does).
type MoveLog struct{ moves []event.Record }

// Record implements event.Recorder.
func (m *MoveLog) Record(r *event.Record) {
	if r.Kind == event.KindRoleMove {
		m.moves = append(m.moves, *r)
	}
}

// Moves is the records kept.
func (m *MoveLog) Moves() []event.Record { return m.moves }

// Count is the number of role moves, opening roles not included.
func (m *MoveLog) Count() int {
	n := 0
	for i := range m.moves {
		if !m.moves[i].Opening() {
			n++
		}
	}
	return n
}

// oracle chooses, in hindsight, one split per phase of a workload, by
// replaying the workload in the simulator:
//
//  1. greedily in phase order: for phase k it replays every request that
//     arrives before the phase ends, with the splits already chosen for
//     earlier phases and each candidate p = 1..n-1 for phase k, and keeps
//     the p that qualifies the most of those requests (ties: the lower mean
//     worst SLO ratio of phase k's own requests, the split with the most
//     slack, then the split nearest the previous phase's);
//  2. it replays the whole workload under that schedule and under every
//     constant split, and keeps the best (so the oracle is never below the
//     best static split);
//  3. one pass of coordinate descent over the whole workload: for each
//     phase in turn, every other split for that phase with the rest fixed,
//     keeping any that qualifies more requests.
//
// On a fleet of more than ExhaustiveSplits+1 instances "every split" is
// the grid of splitGrid (and, in step 1, the previous phase's split, then
// rounds of refineSplits around the best so far; in step 3, the phase's
// split's neighbours too): O(1) replays per phase, not O(instances).
//
// Moves happen exactly at phase starts and cost nothing. It bounds what one
// split per phase can do (as well as this search finds); it is the yardstick
// of the controllers' regret.
func oracle(ctx context.Context, cfg sim.Config, reqs []sim.Request, bounds []event.Time, slo event.SLO, memo wholeReplays, workers int) ([]score.PhaseTarget, error) {
	n := len(cfg.Profiles)
	phases := len(bounds) - 1
	s := newSearcher(ctx, cfg, reqs, slo, memo, workers)
	stepsOf := func(sched []int) []core.ScheduleStep {
		steps := make([]core.ScheduleStep, len(sched))
		for k, p := range sched {
			steps[k] = core.ScheduleStep{At: bounds[k], Prefill: p}
		}
		return steps
	}
	// ends[k] is the index of the first request at or after phase k's end.
	ends := make([]int, phases)
	for k := range ends {
		i := 0
		if k > 0 {
			i = ends[k-1]
		}
		for i < len(reqs) && reqs[i].At < bounds[k+1] {
			i++
		}
		ends[k] = i
	}
	// 1. Greedy in phase order; a phase's candidates are replayed in
	// parallel.
	sched := make([]int, 0, phases)
	prev := n / 2
	oks := make([]int, n)
	ratios := make([]float64, n)
	for k := 0; k < phases; k++ {
		lo := 0
		if k > 0 {
			lo = ends[k-1]
		}
		best := prev
		if ends[k] > lo {
			// Every candidate is first played to a sixteenth of the phase
			// (a probe), then the candidates go on in the order of their
			// failures so far, a batch per round of the workers; a batch's
			// replays stop once they cannot qualify as many requests as the
			// best count of the batches before it. A stopped candidate
			// qualifies fewer than the best split, so it could not have been
			// chosen, and every candidate that ties the best runs whole: the
			// choice (ties included) is the one-at-a-time search's, whatever
			// the order and the workers; only the work done differs.
			//
			// The candidates share the schedule so far up to the phase's
			// start, so each replays from a run of it paused there.
			var base *paused
			if k > 0 {
				var err error
				if base, err = newPlanRuns(cfg, reqs[:ends[k]], slo, []event.Time{bounds[0], bounds[k]}, stepsOf(sched)).base(1); err != nil {
					return nil, err
				}
			}
			total := ends[k]
			for p := range oks {
				oks[p] = -1 // not tried, or stopped: never chosen
			}
			// search plays the candidates in order, exact being the best
			// count of the rounds before (-1: none).
			search := func(order []int, exact int) error {
				runs := make([]*paused, n)
				probe := bounds[k] + (bounds[k+1]-bounds[k])/16
				err := s.each(len(order), func(i int, _ *qualifier) error {
					p := order[i]
					steps := stepsOf(append(slices.Clip(sched), p))
					var r *paused
					var err error
					if base == nil {
						r, err = newPaused(cfg, reqs[:total], slo, steps)
					} else {
						r, err = base.fork(steps, -1, total)
					}
					if err != nil {
						return err
					}
					// The phase's requests arrive after the phase starts: every
					// one of them ends in the run.
					r.q.lo, r.q.hi, r.q.ratios = lo, total, make([]float64, total-lo)
					runs[p] = r
					_, err = r.s.Advance(probe)
					return err
				})
				if err == nil {
					err = context.Cause(ctx)
				}
				if err != nil {
					return err
				}
				slices.SortStableFunc(order, func(a, b int) int { return runs[a].q.failed - runs[b].q.failed })
				for b := 0; b < len(order); b += s.n {
					batch := order[b:min(b+s.n, len(order))]
					bar := exact - 1
					err := s.each(len(batch), func(i int, _ *qualifier) error {
						p := batch[i]
						r := runs[p]
						runs[p] = nil
						r.q.stopAt = total + 1
						if bar >= 0 {
							r.q.stopAt = total - bar
						}
						if r.q.failed >= r.q.stopAt {
							oks[p] = -1 // stopped already: fewer than the best, never chosen
							return nil
						}
						v, stopped, err := r.q.finish(r.s, total, bar)
						if err != nil {
							return err
						}
						if stopped {
							oks[p] = -1
							return nil
						}
						oks[p] = v
						if total == len(reqs) && memo != nil { // a whole replay
							s.mu.Lock()
							memo[stepsKey(r.ctrl.Steps)] = v
							s.mu.Unlock()
						}
						sum := 0.0 // in request order, as the tie-break always summed
						for _, w := range r.q.ratios {
							sum += w
						}
						ratios[p] = sum / float64(len(r.q.ratios))
						return nil
					})
					if err == nil {
						err = context.Cause(ctx)
					}
					if err != nil {
						return err
					}
					for _, p := range batch {
						exact = max(exact, oks[p])
					}
				}
				return nil
			}
			order := candidateOrder(n, prev)
			if err := search(order, -1); err != nil {
				return nil, err
			}
			// On a large fleet the grid's best is refined (refineSplits).
			for spacing := gridSpacing(n); ; {
				at := bestSplit(oks, ratios, prev)
				if at < 0 {
					break
				}
				var more []int
				more, spacing = refineSplits(n, at, spacing, func(p int) bool { return slices.Contains(order, p) })
				if len(more) == 0 {
					break
				}
				order = append(order, more...)
				if err := search(more, oks[at]); err != nil {
					return nil, err
				}
			}
			if at := bestSplit(oks, ratios, prev); at >= 0 {
				best = at
			}
		}
		sched = append(sched, best)
		prev = best
	}
	// whole replays the whole workload under each schedule, in parallel;
	// past bar (>= 0) a replay stops once its schedule cannot qualify more
	// than bar requests, and returns bar: it is only compared with bar,
	// which only grows (pick).
	whole := func(scheds [][]int, bar int) ([]int, error) {
		steps := make([][]core.ScheduleStep, len(scheds))
		for i, sc := range scheds {
			steps[i] = stepsOf(sc)
		}
		return s.replayAll(steps, bar, nil, nil)
	}
	// 2. Never below the best constant split.
	v, err := whole([][]int{sched}, -1)
	if err != nil {
		return nil, err
	}
	bestOK := v[0]
	var consts [][]int
	for _, p := range splitGrid(n) {
		consts = append(consts, slices.Repeat([]int{p}, phases))
	}
	vals, err := whole(consts, bestOK)
	if err != nil {
		return nil, err
	}
	if at, ok := pick(vals, bestOK); at >= 0 {
		sched, bestOK = consts[at], ok
	}
	// 3. One pass of coordinate descent on the whole workload: a phase's
	// alternatives are one batch, each replayed from the schedule's run
	// paused at the phase's start (planRuns).
	if phases > 1 {
		runs := newPlanRuns(cfg, reqs, slo, bounds[:phases], stepsOf(sched))
		for k := 0; k < phases; k++ {
			var batch [][]int
			var steps [][]core.ScheduleStep
			var from []*paused
			base, err := runs.base(k)
			if err != nil {
				return nil, err
			}
			for _, p := range descentSplits(n, sched[k]) {
				if p != sched[k] {
					sc := slices.Clone(sched)
					sc[k] = p
					batch = append(batch, sc)
					steps = append(steps, stepsOf(sc))
					from = append(from, base)
				}
			}
			vals, err := s.replayAll(steps, bestOK, from, nil)
			if err != nil {
				return nil, err
			}
			if at, ok := pick(vals, bestOK); at >= 0 {
				sched, bestOK = batch[at], ok
				runs.changed(k, stepsOf(sched))
			}
		}
	}
	out := make([]score.PhaseTarget, phases)
	for k, p := range sched {
		out[k] = score.PhaseTarget{Start: bounds[k], End: bounds[k+1], Prefill: p}
	}
	return out, nil
}

// candidateOrder lists the splits of splitGrid(n), and prev, nearest prev
// first (prev, then prev-1, prev+1, prev-2, ...).
func candidateOrder(n, prev int) []int {
	in := make([]bool, n)
	for _, p := range splitGrid(n) {
		in[p] = true
	}
	if prev >= 1 && prev < n {
		in[prev] = true
	}
	var out []int
	for d := 0; d < n; d++ {
		for _, p := range []int{prev - d, prev + d} {
			if p >= 1 && p < n && in[p] {
				in[p] = false
				out = append(out, p)
			}
		}
	}
	return out
}

// bestSplit is the split the greedy step keeps among those with a count
// (oks[p] >= 0): the most requests qualified, then the lower mean worst
// SLO ratio, then the nearest prev, then the lower; -1 when none has one.
func bestSplit(oks []int, ratios []float64, prev int) int {
	best, bestOK, bestDist, bestRatio := -1, -1, 0, math.Inf(1)
	for p := 1; p < len(oks); p++ {
		ok, ratio, dist := oks[p], ratios[p], abs(p-prev)
		if ok < 0 {
			continue
		}
		if ok > bestOK || (ok == bestOK && (ratio < bestRatio || (ratio == bestRatio && dist < bestDist))) {
			best, bestOK, bestDist, bestRatio = p, ok, dist, ratio
		}
	}
	return best
}

// descentSplits is the splits the per-phase descent tries for a phase
// whose split is cur, in increasing order: splitGrid(n) and cur's
// neighbours (every split on a fleet of up to ExhaustiveSplits+1).
func descentSplits(n, cur int) []int {
	out := splitGrid(n)
	for _, p := range []int{cur - 1, cur + 1} {
		if p >= 1 && p < n && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// worstRatio is max(TTFT/SLO, TPOT/SLO) of a request, 10 for one that
// never finished; the per-phase oracle breaks ties on its mean over a
// phase's requests.
func worstRatio(r *event.Row, slo event.SLO) float64 {
	if r.Terminal != event.KindFinish {
		return 10
	}
	w := float64(r.TTFT()) / float64(slo.TTFT)
	if tp := r.TPOT(); tp != event.Never {
		w = math.Max(w, float64(tp)/float64(slo.TPOT))
	}
	return w
}
