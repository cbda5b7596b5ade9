package sweep

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

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
//     constant split (on a fleet of more than ExhaustiveSplits+1 instances,
//     those of splitGrid) and the realised split of every rival arm (its prefill
//     pool at each window start), then improved by coordinate descent over
//     windows (each window's split +-1, or its neighbour's) until a pass
//     finds nothing better or the budget of replays is spent (a candidate
//     is first played to the end of the window after the one it changes,
//     and dropped there when more of its requests have failed or can no
//     longer qualify than the plan's: a screen, which can drop a candidate
//     that would have won later); and
//   - every online arm (the rivals: every arm the project ships with its
//     default settings, the static splits and hybrid fleets among them
//     those of splitGrid on a fleet of more than ExhaustiveSplits+1
//     instances, and every arm of the sweep), played as it is.
//
// Because the rivals are in the class, the oracle's attainment is at least
// every rival's at every rate and seed, by construction; the search decides
// by how much. Where a rival wins, the oracle plays that arm and says so
// (OracleSplits.Source): the schedule search did not find a schedule that
// beats it, so there the oracle is a bound over the project's arms, not a
// bound over every possible controller (docs/controllers-figures.md).

// BoundRivals are the arms, besides the sweep's own, that the oracle must
// be at least: every shipped arm with its defaults, for a fleet of n (on
// a fleet of more than ExhaustiveSplits+1 instances, the static splits and
// hybrid fleets of splitGrid only).
func BoundRivals(n int) []string {
	var out []string
	for _, p := range splitGrid(n) {
		out = append(out, fmt.Sprintf("static:%dP%dD", p, n-p), fmt.Sprintf("hybrid:%dP%dM", p, n-p))
	}
	return append(out, "aggregated", "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray")
}

// ExhaustiveSplits is the most split counts the hindsight searches try
// one by one: a fleet of up to ExhaustiveSplits+1 instances has every
// split 1..n-1 tried (and every static split among the bound's rivals); a
// larger one a grid of this many splits (splitGrid), refined around the
// best (refineSplits). Without it the searches cost O(instances) replays
// per phase and rate: on fleet512 a single rate of steady took 160 s and
// 4.3 GB.
const ExhaustiveSplits = 32

// splitGrid is the prefill counts the searches try first on a fleet of n:
// every one of 1..n-1 up to ExhaustiveSplits of them, else
// ExhaustiveSplits spread evenly from 1 to n-1.
func splitGrid(n int) []int {
	var out []int
	if n-1 <= ExhaustiveSplits {
		for p := 1; p < n; p++ {
			out = append(out, p)
		}
		return out
	}
	for i := range ExhaustiveSplits {
		p := 1 + int(math.Round(float64(i)*float64(n-2)/float64(ExhaustiveSplits-1)))
		if len(out) == 0 || p != out[len(out)-1] {
			out = append(out, p)
		}
	}
	return out
}

// refineSplits returns the splits around best, at spacings shrinking by
// four from the grid's down to 1 (best +-1..3 spacings at each), that
// tried does not hold: the rounds after the grid on a fleet larger than
// ExhaustiveSplits+1 (none on a smaller one). Each round is searched
// before the next is asked for, around the best found so far.
func refineSplits(n, best, spacing int, tried func(p int) bool) (next []int, nextSpacing int) {
	for spacing > 1 && len(next) == 0 {
		spacing = max(1, (spacing+3)/4)
		for k := 1; k <= 3; k++ {
			for _, p := range []int{best - k*spacing, best + k*spacing} {
				if p >= 1 && p < n && !tried(p) && !slices.Contains(next, p) {
					next = append(next, p)
				}
			}
		}
	}
	return next, spacing
}

// DefaultStaticArms are the static splits a sweep runs when no arms are
// named: every split of a fleet of up to ExhaustiveSplits+1 instances, the
// searches' grid of ExhaustiveSplits splits on a larger one (fleet1024
// would otherwise run 1,023 static arms).
func DefaultStaticArms(n int) []string {
	var out []string
	for _, p := range splitGrid(n) {
		out = append(out, fmt.Sprintf("static:%dP%dD", p, n-p))
	}
	return out
}

// gridSpacing is splitGrid(n)'s step (1 when it tries every split).
func gridSpacing(n int) int {
	if n-1 <= ExhaustiveSplits {
		return 1
	}
	return (n - 2 + ExhaustiveSplits - 2) / (ExhaustiveSplits - 1)
}

// neverMoves reports whether a controller sets its roles at the start and
// never moves them.
func neverMoves(c core.Controller) bool {
	switch c.(type) {
	case *core.Static, *core.Aggregated:
		return true
	}
	return false
}

// playedRun is a rival's run: the requests it qualified and its role
// moves.
type playedRun struct {
	ok    int
	moves []event.Record
	run   *Run // the run as the sweep scores it; nil: not kept
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

// screenWindows is how many windows past the one a descent candidate
// changes its screen looks (see screen).
const screenWindows = 1

// boundPlan is the oracle arm's policy at one rate.
type boundPlan struct {
	starts []event.Time // window starts
	splits []int        // prefill engines per window (a schedule)
	arm    string       // when set, the rival arm the oracle plays instead
	run    *Run         // with arm: that arm's run, when kept (the oracle's own is the same run)
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
// they end (event.StreamFold: it holds the requests in flight only), so
// that a replay that can no longer qualify more than a bar stops there
// (the search's pruning: exact, since it only skips replays whose result
// could not change a decision).
type qualifier struct {
	fold   event.StreamFold
	slo    event.SLO
	log    *MoveLog
	failed int // ended without qualifying
	stopAt int // stop when failed reaches it (no stop: above any count)
	// Requests lo <= i < hi (0-based) leave their worst SLO ratio in
	// ratios[i-lo] (the per-phase oracle's tie-break).
	lo, hi int
	ratios []float64
}

// stopReplay is the panic that ends a replay early; run recovers it.
type stopReplay struct{}

func (q *qualifier) Record(r *event.Record) {
	q.fold.Record(r)
	if q.log != nil {
		q.log.Record(r)
	}
}

// end scores one request as it ends.
func (q *qualifier) end(r *event.Row) {
	if i := int(r.Req - 1); i >= q.lo && i < q.hi {
		q.ratios[i-q.lo] = worstRatio(r, q.slo)
	}
	if event.Qualify(r, q.slo) != event.CheckOK {
		q.failed++
		if q.failed >= q.stopAt {
			panic(stopReplay{})
		}
	}
}

// run replays reqs under ctrl and returns the requests that qualified;
// with bar >= 0 it stops as soon as at most bar can, and returns bar with
// stopped set.
func (q *qualifier) run(cfg sim.Config, ctrl core.Controller, reqs []sim.Request, slo event.SLO, log *MoveLog, bar int) (v int, stopped bool, err error) {
	q.reset(slo, log, len(reqs)+1)
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
	return q.finish(s, len(reqs), bar)
}

// reset readies q for a replay from the start that stops when stopAt
// requests have failed.
func (q *qualifier) reset(slo event.SLO, log *MoveLog, stopAt int) {
	q.fold.Reset()
	q.fold.End = q.end
	q.slo, q.log, q.failed, q.stopAt = slo, log, 0, stopAt
}

// fork copies q, as it is, for a forked run (sim.Sim.Fork).
func (q *qualifier) fork() *qualifier {
	c := &qualifier{slo: q.slo, failed: q.failed, stopAt: q.stopAt}
	c.fold = *q.fold.Clone()
	c.fold.End = c.end
	return c
}

// advance runs s, q's run, up to t (sim.Sim.Advance), or until q stops
// it (stopped).
func (q *qualifier) advance(s *sim.Sim, t event.Time) (stopped bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopReplay); !ok {
				panic(r)
			}
			stopped = true
		}
	}()
	_, err = s.Advance(t)
	return false, err
}

// finish runs s, q's run of total requests, to its end, or until q stops
// it: it returns the requests that qualified, or bar with stopped set.
func (q *qualifier) finish(s *sim.Sim, total, bar int) (v int, stopped bool, err error) {
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
	return total - q.failed, false, nil
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

// searcher replays candidate policies for the hindsight searches of one
// rate, on up to workers goroutines at once. Its results never depend on
// workers: a batch of candidates is evaluated against the same bar, and
// the caller folds the results in the candidates' order, which picks what
// the one-at-a-time search picks (a candidate that beats every earlier one
// beats the batch's bar too, so its count is exact; see pick).
type searcher struct {
	ctx  context.Context
	cfg  sim.Config
	reqs []sim.Request
	slo  event.SLO
	mu   sync.Mutex   // guards memo
	memo wholeReplays // nil: no memo
	qs   chan *qualifier
	n    int // workers
}

func newSearcher(ctx context.Context, cfg sim.Config, reqs []sim.Request, slo event.SLO, memo wholeReplays, workers int) *searcher {
	workers = max(workers, 1)
	s := &searcher{ctx: ctx, cfg: cfg, reqs: reqs, slo: slo, memo: memo, qs: make(chan *qualifier, workers), n: workers}
	for range workers {
		s.qs <- &qualifier{}
	}
	return s
}

// each runs f(0..n-1) on the searcher's workers, each call with a
// qualifier of its own.
func (s *searcher) each(n int, f func(i int, q *qualifier) error) error {
	return parallel(s.ctx, n, s.n, func(i int) error {
		q := <-s.qs
		defer func() { s.qs <- q }()
		return f(i, q)
	})
}

// screen is the descent's first look at a candidate that changes window
// j: it is played to the start of window j+1+screenWindows (at), and
// played on only when by then no more of its requests have failed or can
// no longer qualify (sim.Sim.Doomed) than the plan's run had (failed).
// Most candidates lose at once and stop within two windows instead of
// late in the trace (a candidate replayed against the bar stops only once
// its failures pass the plan's total); a candidate that passes is played
// to the end against the bar, so every count the search keeps is exact.
// The price: a change whose gain shows only later (a backlog that pays
// off windows after, or a run that drifts apart from the plan's by
// chance) is dropped (docs/decisions/0011-screened-descent.md).
type screen struct {
	at     event.Time
	failed int
}

// replay returns the requests qualified under the schedule steps, at most
// bar when it cannot beat bar (>= 0), from memo when it was replayed
// whole before. With scr, a replay that by scr.at has failed, or can no
// longer qualify, more than scr.failed requests stops there and returns
// bar: not better.
func (s *searcher) replay(q *qualifier, steps []core.ScheduleStep, bar int, from *paused, scr *screen) (int, error) {
	key := stepsKey(steps)
	s.mu.Lock()
	v, ok := s.memo[key]
	s.mu.Unlock()
	if ok {
		return v, nil
	}
	var stopped bool
	var err error
	switch {
	case bar >= len(s.reqs):
		v, stopped = bar, true // nothing can qualify more
	case from == nil && scr == nil:
		v, stopped, err = q.run(s.cfg, &core.Scheduled{Arm: "oracle", Steps: steps}, s.reqs, s.slo, nil, bar)
	default:
		f := &paused{q: q}
		if from == nil {
			q.reset(s.slo, nil, len(s.reqs)+1)
			if bar >= 0 {
				q.stopAt = len(s.reqs) - bar
			}
			f.s, err = sim.New(s.cfg, &core.Scheduled{Arm: "oracle", Steps: steps}, s.reqs, q)
		} else {
			f, err = from.fork(steps, bar, len(s.reqs))
		}
		if err == nil && scr != nil {
			stopped, err = f.q.advance(f.s, scr.at)
			if err == nil && !stopped && f.q.failed+f.s.Doomed(scr.at, s.slo) > scr.failed {
				stopped = true
			}
			if stopped {
				v = bar
			}
		}
		if err == nil && !stopped {
			v, stopped, err = f.q.finish(f.s, len(s.reqs), bar)
		}
	}
	if err == nil && !stopped && s.memo != nil {
		s.mu.Lock()
		s.memo[key] = v
		s.mu.Unlock()
	}
	return v, err
}

// replayAll replays each schedule against the same bar, in parallel;
// schedule i from the paused run from[i] when from is given and that is
// not nil (it shares from[i]'s schedule up to the pause), else from the
// start.
func (s *searcher) replayAll(scheds [][]core.ScheduleStep, bar int, from []*paused, scr []*screen) ([]int, error) {
	out := make([]int, len(scheds))
	err := s.each(len(scheds), func(i int, q *qualifier) (err error) {
		var f *paused
		if from != nil {
			f = from[i]
		}
		var sc *screen
		if scr != nil {
			sc = scr[i]
		}
		out[i], err = s.replay(q, scheds[i], bar, f, sc)
		return err
	})
	if err == nil {
		err = context.Cause(s.ctx)
	}
	return out, err
}

// pick folds a batch's counts, evaluated against the bar best, in order:
// it returns the index of the first count above every earlier one and
// best, and that count (-1 and best when none beats best). A count at or
// under its bar may be an upper bound rather than exact; it never wins.
func pick(vals []int, best int) (int, int) {
	at := -1
	for i, v := range vals {
		if v > best {
			at, best = i, v
		}
	}
	return at, best
}

// bound searches the oracle's plan at one rate, on up to workers
// goroutines (the plan does not depend on workers).
//
// play, when not nil, plays a rival that moves roles as the sweep plays an
// arm, scoring the whole run (the oracle then reuses the best rival's run
// rather than playing it again); nil: with a qualifier.
func bound(ctx context.Context, cfg sim.Config, reqs []sim.Request, bounds []event.Time, slo event.SLO, phase []score.PhaseTarget, rivals []string, known map[string]playedRun, memo wholeReplays, workers int, play func(arm string, log *MoveLog) (Run, error)) (*boundPlan, error) {
	n := len(cfg.Profiles)
	starts := windowStarts(bounds, BoundWindow(bounds[len(bounds)-1]))
	plan := &boundPlan{starts: starts, ok: -1}
	s := newSearcher(ctx, cfg, reqs, slo, memo, workers)
	seen := map[string]int{}
	// try evaluates the schedules not seen before in parallel, each
	// against the best so far (its replay stops once it cannot beat it,
	// and its count is then an upper bound, at most plan.ok, which only
	// grows), and keeps the first that beats every earlier one.
	try := func(scheds ...[]int) error {
		var fresh [][]int
		var steps [][]core.ScheduleStep
		for _, sc := range scheds {
			key := fmt.Sprint(sc)
			if _, ok := seen[key]; ok {
				continue
			}
			seen[key] = -1 // a duplicate in this batch is evaluated once
			fresh = append(fresh, sc)
			steps = append(steps, scheduleOf(starts, sc))
		}
		plan.evals += len(fresh)
		vals, err := s.replayAll(steps, plan.ok, nil, nil)
		if err != nil {
			return err
		}
		for i, sc := range fresh {
			seen[fmt.Sprint(sc)] = vals[i]
		}
		if at, ok := pick(vals, plan.ok); at >= 0 {
			plan.ok, plan.splits = ok, slices.Clone(fresh[at])
		}
		return nil
	}
	// Warm starts: the per-phase oracle, every constant split.
	var warm [][]int
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
		warm = append(warm, sc)
	}
	for _, p := range splitGrid(n) {
		warm = append(warm, slices.Repeat([]int{p}, len(starts)))
	}
	// The per-phase oracle's schedule first, on its own: the constant
	// splits then replay against its count, and stop once they cannot
	// beat it (it was replayed whole; the per-phase oracle stopped most
	// constant splits early). The first best of the whole list wins, as
	// in one batch.
	if len(phase) > 0 {
		if err := try(warm[0]); err != nil {
			return nil, err
		}
		warm = warm[1:]
	}
	if err := try(warm...); err != nil {
		return nil, err
	}
	// The rivals: each played as it is, and its realised split as a warm
	// start. A rival that moves roles is played whole (its moves are the
	// warm start); a static split or the aggregated arm sets its roles at
	// the start and never moves them, so its replay stops, as the
	// search's do, once it cannot qualify more than the warm starts' best:
	// its count is then at most that, and the oracle never plays it (it
	// plays a rival only above the search's best, which only grows).
	played := make([]int, len(rivals))
	rivalRuns := make([]*Run, len(rivals))
	realised := make([][]int, len(rivals))
	staticBar := plan.ok
	err := s.each(len(rivals), func(i int, q *qualifier) error {
		run, ok := known[rivals[i]]
		if !ok {
			ctrl, err := newController(rivals[i], s.cfg)
			if err != nil {
				return err
			}
			bar := -1
			if neverMoves(ctrl) {
				bar = staticBar
			}
			log := &MoveLog{}
			if play != nil && bar < 0 {
				r, err := play(rivals[i], log)
				if err != nil {
					return fmt.Errorf("rival %s: %w", rivals[i], err)
				}
				run = playedRun{ok: r.SLOOK, moves: log.moves, run: &r}
			} else {
				v, _, err := q.run(cfg, ctrl, reqs, slo, log, bar)
				if err != nil {
					return fmt.Errorf("rival %s: %w", rivals[i], err)
				}
				run = playedRun{ok: v, moves: log.moves}
			}
		}
		played[i], rivalRuns[i] = run.ok, run.run
		splits := score.Splits(run.moves)
		sc := make([]int, len(starts))
		for k, t := range starts {
			sc[k] = min(max(score.SplitAt(splits, t), 1), n-1)
		}
		realised[i] = sc
		return nil
	})
	if err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := try(realised...); err != nil {
		return nil, err
	}
	bestRival, bestRivalOK, bestRun := "", -1, (*Run)(nil)
	for i, v := range played {
		if v > bestRivalOK {
			bestRival, bestRivalOK, bestRun = rivals[i], v, rivalRuns[i]
		}
	}
	// Coordinate descent over windows: each window's candidates (its split
	// +-1, or a neighbour's) are one batch, replayed against the best count
	// so far. window returns window k's candidates under splits that are
	// not known yet, in order and within the budget (evals replays made).
	window := func(k int, splits []int, evals int, known func(key string) bool) [][]int {
		cur := splits[k]
		cands := []int{cur - 1, cur + 1}
		if k > 0 {
			cands = append(cands, splits[k-1])
		}
		if k+1 < len(starts) {
			cands = append(cands, splits[k+1])
		}
		var fresh [][]int
		for _, p := range cands {
			if p < 1 || p >= n || p == cur || evals+len(fresh) >= BoundBudget {
				continue
			}
			sc := slices.Clone(splits)
			sc[k] = p
			if !known(fmt.Sprint(sc)) && !slices.ContainsFunc(fresh, func(b []int) bool { return slices.Equal(b, sc) }) {
				fresh = append(fresh, sc)
			}
		}
		return fresh
	}
	// Most windows change nothing, and a window's batch is small (two to
	// four replays, some stopped early), so on several workers the batches
	// of the next windows are replayed with it, built as the search would
	// build them if none of those windows changes the plan, until they hold
	// twice as many replays as there are workers. They are folded in window
	// order; at the first window that changes the plan the later batches,
	// built on the old plan, are dropped unseen and built again. A kept
	// batch was replayed against the same bar, under the same plan, as the
	// one-window-at-a-time search replays it, so the plan does not depend
	// on the workers (TestOracleSearchIndependentOfWorkers).
	//
	// A candidate of window j shares the plan's run up to window j's
	// start, so it is replayed from the plan's run paused there (runs),
	// not from the start: the same count, at the cost of the windows from
	// j on. It is screened first (screen), against the plan's run's count
	// at the start of window j+1+screenWindows, which the plan's run
	// reaches before the batch replays.
	target := 1
	if s.n > 1 {
		target = 2 * s.n
	}
	var runs *planRuns
	if plan.splits != nil {
		runs = newPlanRuns(cfg, reqs, slo, starts, plan.steps())
	}
	for pass := 0; pass < 3 && plan.evals < BoundBudget && runs != nil; pass++ {
		before := plan.ok
		for k := 0; k < len(starts); {
			var batches [][][]int
			var steps [][]core.ScheduleStep
			var from []*paused
			var scrs []*screen
			pending := map[string]bool{}
			known := func(key string) bool {
				_, ok := seen[key]
				return ok || pending[key]
			}
			evals, count := plan.evals, 0
			for j := k; j < len(starts) && (j == k || count < target); j++ {
				fresh := window(j, plan.splits, evals, known)
				base, err := runs.base(j)
				if err != nil {
					return nil, err
				}
				var scr *screen
				if h := j + 1 + screenWindows; h < len(starts) {
					f, err := runs.failedAt(h)
					if err != nil {
						return nil, err
					}
					scr = &screen{at: starts[h], failed: f}
				}
				for _, sc := range fresh {
					pending[fmt.Sprint(sc)] = true
					steps = append(steps, scheduleOf(starts, sc))
					from = append(from, base)
					scrs = append(scrs, scr)
				}
				evals += len(fresh)
				count += len(fresh)
				batches = append(batches, fresh)
			}
			// While the batch replays, the plan's run goes on through the
			// next batch's windows and their screens, if it is as long as
			// this one (dropped if this batch changes the plan).
			ahead := make(chan error, 1)
			go func(j int) {
				err := runs.playTo(j)
				ahead <- err
			}(min(k+2*len(batches)+1+screenWindows, len(starts)-1))
			vals, err := s.replayAll(steps, plan.ok, from, scrs)
			if aerr := <-ahead; err == nil {
				err = aerr
			}
			if err != nil {
				return nil, err
			}
			for _, fresh := range batches {
				v := vals[:len(fresh)]
				vals = vals[len(fresh):]
				plan.evals += len(fresh)
				for i, sc := range fresh {
					seen[fmt.Sprint(sc)] = v[i]
				}
				k++
				if at, ok := pick(v, plan.ok); at >= 0 {
					plan.ok, plan.splits = ok, slices.Clone(fresh[at])
					runs.changed(k-1, plan.steps())
					break
				}
			}
		}
		if plan.ok == before {
			break
		}
	}
	if bestRivalOK > plan.ok {
		plan.arm, plan.ok, plan.run = bestRival, bestRivalOK, bestRun
	}
	return plan, nil
}
