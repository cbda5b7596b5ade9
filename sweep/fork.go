package sweep

import (
	"fmt"
	"slices"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/sim"
)

// paused is a run of the plan stopped at a window start (sim.Sim.Advance),
// with its qualifier and its controller; the descent's candidates fork
// from it (sim.Sim.Fork) and replay from there, not from the start.
type paused struct {
	s    *sim.Sim
	q    *qualifier
	ctrl *core.Scheduled
}

// planRuns keeps the plan's run paused at its window starts. A candidate
// that changes window k (and possibly later ones) shares the plan's run
// up to window k's start, so it forks from the run paused there: the
// result is the whole replay's exactly (TestForkReplaysAsFromTheStart in
// package sim, TestOracleForkedReplays here), at the cost of the windows
// from k on. Paused runs are made as the descent reaches their windows,
// each from the one before, and dropped from the window where the plan
// changes.
//
// A paused run holds the requests in flight; past maxPausedSlots in all
// (an overloaded run holds many), further windows keep no paused run and
// their candidates fork from the latest one kept before them.
type planRuns struct {
	cfg    sim.Config
	reqs   []sim.Request
	slo    event.SLO
	starts []event.Time
	steps  []core.ScheduleStep // the plan's schedule
	at     []*paused           // at[k]: the plan's run paused at starts[k]; nil: none (at[0] is always nil: a fresh run)
	made   int                 // the plan's run has been paused at every window up to made
	cur    *paused             // the plan's run paused at starts[made] (nil: made is 0 or the run ended); at[made] when kept
	slots  int                 // request slots the paused runs hold
	off    bool                // forking is not possible for this configuration
	// failed[k]: the requests the plan's run had failed (ended without
	// qualifying) by starts[k], or could no longer qualify then
	// (sim.Sim.Doomed); known for k <= made.
	failed []int
}

// maxPausedSlots caps the request slots of the paused runs kept per rate
// (each slot a request state and a folded row, about 170 bytes).
var maxPausedSlots = 1 << 19

// forkReplays turns replays from paused runs on (tests compare the
// searches with it off).
var forkReplays = true

func newPlanRuns(cfg sim.Config, reqs []sim.Request, slo event.SLO, starts []event.Time, steps []core.ScheduleStep) *planRuns {
	return &planRuns{cfg: cfg, reqs: reqs, slo: slo, starts: starts, steps: steps, at: make([]*paused, len(starts)),
		off: !forkReplays || cfg.Admission.Mode != core.AdmitOpen, failed: make([]int, len(starts))}
}

// changed makes steps the plan, which shares the old plan's schedule
// before window k: the runs paused after window k are dropped.
func (p *planRuns) changed(k int, steps []core.ScheduleStep) {
	p.steps = steps
	for j := k + 1; j < len(p.at); j++ {
		if r := p.at[j]; r != nil {
			p.slots -= r.s.Slots()
			p.at[j] = nil
		}
	}
	if p.made > k {
		p.made, p.cur = 0, nil
		for j := k; j > 0; j-- {
			if p.at[j] != nil {
				p.made, p.cur = j, p.at[j]
				break
			}
		}
	}
	if p.off && p.cur != nil {
		// The run cannot be copied under the new plan: it starts again
		// from the first request (the counts before window k stay).
		p.made, p.cur = 0, nil
	}
}

// base returns the latest paused run at or before window k, making the
// plan's paused runs up to window k first (nil: replay from the start).
func (p *planRuns) base(k int) (*paused, error) {
	if p.off {
		return nil, nil
	}
	if err := p.playTo(k); err != nil {
		return nil, err
	}
	return p.latest(k), nil
}

// failedAt returns the requests the plan's run had failed by window k's
// start, playing it there first.
func (p *planRuns) failedAt(k int) (int, error) {
	if err := p.playTo(k); err != nil {
		return 0, err
	}
	return p.failed[k], nil
}

// playTo plays the plan's run up to window k's start, pausing it at each
// window on the way (kept, room allowing, unless forking is off) and
// counting its failures there.
func (p *planRuns) playTo(k int) error {
	for p.made < k {
		j := p.made + 1
		next := p.cur
		switch {
		case next == nil:
			var err error
			if next, err = newPaused(p.cfg, p.reqs, p.slo, p.steps); err != nil {
				return err
			}
		case p.at[p.made] == next || !slices.Equal(next.ctrl.Steps, p.steps):
			// Kept (forks must find it as it is), or made under the plan
			// before a change after its window: go on from a copy under
			// the plan's schedule.
			var err error
			if next, err = next.fork(p.steps, -1, len(p.reqs)); err != nil {
				return err
			}
		}
		more, err := next.s.Advance(p.starts[j])
		if err != nil {
			return err
		}
		if !more {
			// Every request ended before window j: nothing to fork from
			// here on, and later windows fork from an earlier run; the
			// failures are final.
			for i := j; i < len(p.starts); i++ {
				p.failed[i] = next.q.failed
			}
			p.made, p.cur = len(p.starts)-1, nil
			break
		}
		p.made, p.cur = j, next
		p.failed[j] = next.q.failed + next.s.Doomed(p.starts[j], p.slo)
		if !p.off && p.slots+next.s.Slots() <= maxPausedSlots {
			p.at[j] = next
			p.slots += next.s.Slots()
		}
	}
	return nil
}

// newPaused starts a replay of reqs under steps, to be advanced (its
// qualifier never stops it).
func newPaused(cfg sim.Config, reqs []sim.Request, slo event.SLO, steps []core.ScheduleStep) (*paused, error) {
	q := &qualifier{}
	q.reset(slo, nil, len(reqs)+1)
	ctrl := &core.Scheduled{Arm: "oracle", Steps: steps}
	s, err := sim.New(cfg, ctrl, reqs, q)
	if err != nil {
		return nil, err
	}
	return &paused{s: s, q: q, ctrl: ctrl}, nil
}

// latest is the paused run at or before window k (nil: none).
func (p *planRuns) latest(k int) *paused {
	for ; k > 0; k-- {
		if p.at[k] != nil {
			return p.at[k]
		}
	}
	return nil
}

// fork copies the paused run, driven on by steps (which share its
// schedule's past), its qualifier stopping the copy once at most bar
// requests can qualify (bar < 0: never).
func (r *paused) fork(steps []core.ScheduleStep, bar, total int) (*paused, error) {
	ctrl, err := r.ctrl.Follow(steps)
	if err != nil {
		return nil, fmt.Errorf("oracle: fork: %w", err)
	}
	q := r.q.fork()
	q.stopAt = total + 1
	if bar >= 0 {
		q.stopAt = total - bar
	}
	s, err := r.s.Fork(q, ctrl)
	if err != nil {
		return nil, err
	}
	return &paused{s: s, q: q, ctrl: ctrl}, nil
}
