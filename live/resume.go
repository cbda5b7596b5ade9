package live

import (
	"fmt"
	"math"
	"slices"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// Resume is what a router taking over from another starts from (serve
// --ha): the split, the engines' process generations and health the
// previous leader published. Requests in flight, the admission queue and
// the controllers' windows are not handed over: they start empty.
type Resume struct {
	// Roles is one role per instance (core.Config.Opening).
	Roles []event.Role
	// Generations is each engine's process generation (0: unknown); an
	// engine with one opens at it, journaled as a health record at time 0,
	// so a restart seen later still takes a higher generation.
	Generations []uint64
	// Down marks the engines the previous leader had ejected: they open
	// down (a health record at time 0) and are readmitted as any ejected
	// engine is (a new process, or the same after a hold). Nil: none.
	Down []bool
	// Cordoned marks the engines an operator had cordoned: they open
	// cordoned (a health record at time 0, cause operator) until
	// uncordoned here. Nil: none.
	Cordoned []bool
	// Starts is each engine's process start time as last probed (0:
	// unknown): the process a readmission, or a restart seen by the
	// liveness sweep, must differ from.
	Starts []float64
	// Covers is, per engine, the index of the down or cordoned engine
	// whose role it holds as a cover (-1: none), so that it goes back when
	// that engine returns. Nil: none.
	Covers []int
	// Moves continues the role-move count GET /state reports.
	Moves int
}

// ResumeFrom reads a Resume from a State published by another router of
// the same fleet: the engines must be the same, by name, in order.
func ResumeFrom(s State, names []string) (*Resume, error) {
	if len(s.Engines) != len(names) {
		return nil, fmt.Errorf("live: resume: %d engines published for a fleet of %d", len(s.Engines), len(names))
	}
	if s.Moves < 0 {
		return nil, fmt.Errorf("live: resume: moves %d: expected a count of 0 or more", s.Moves)
	}
	rs := &Resume{Roles: make([]event.Role, len(names)), Generations: make([]uint64, len(names)),
		Down: make([]bool, len(names)), Cordoned: make([]bool, len(names)), Starts: make([]float64, len(names)), Covers: make([]int, len(names)), Moves: s.Moves}
	for i, e := range s.Engines {
		if e.Name != names[i] {
			return nil, fmt.Errorf("live: resume: engine %d is %q in the published state, %q in this fleet", i, e.Name, names[i])
		}
		r, err := event.ParseRole(e.Role)
		if err != nil {
			return nil, fmt.Errorf("live: resume: engine %s: %w", e.Name, err)
		}
		if !(e.ProcessStart >= 0) || math.IsInf(e.ProcessStart, 1) {
			// (0 is unknown; startTime reads no other.)
			return nil, fmt.Errorf("live: resume: engine %s: process_start_s %v: expected a time after the epoch, or 0", e.Name, e.ProcessStart)
		}
		rs.Roles[i], rs.Generations[i], rs.Down[i], rs.Cordoned[i], rs.Starts[i] = r, e.Generation, e.Down, e.Cordoned, e.ProcessStart
		rs.Covers[i] = -1
		if e.Covers != "" {
			if rs.Covers[i] = slices.Index(names, e.Covers); rs.Covers[i] < 0 {
				return nil, fmt.Errorf("live: resume: engine %s: covers %q: expected an engine of this fleet", e.Name, e.Covers)
			}
		}
	}
	return rs, nil
}

// resume applies cfg.Resume's generations and move count to a new core.
func (r *Router) resume(c *core.Core) error {
	rs := r.cfg.Resume
	if rs == nil {
		return nil
	}
	for _, l := range []int{len(rs.Generations), len(rs.Down), len(rs.Cordoned), len(rs.Starts), len(rs.Covers)} {
		if l != 0 && l != len(r.engines) {
			return fmt.Errorf("live: resume: %d entries for %d engines", l, len(r.engines))
		}
	}
	for i, start := range rs.Starts {
		if start != 0 {
			e := r.engines[i]
			e.br.mu.Lock()
			e.br.startSeen = start
			e.br.mu.Unlock()
		}
	}
	for i, g := range rs.Generations {
		if g == 0 {
			continue
		}
		e := r.engines[i]
		e.br.mu.Lock()
		e.br.gen = g // readmissions continue from the published generation
		e.br.mu.Unlock()
		if err := c.EngineUp(0, event.Instance(i), g); err != nil {
			return fmt.Errorf("live: resume: %w", err)
		}
	}
	for i, down := range rs.Down {
		if !down {
			continue
		}
		// Still down, as far as anyone knows: no placements until its
		// readmission probes admit it (Run starts them).
		e := r.engines[i]
		e.br.mu.Lock()
		e.br.open, e.br.fails = true, r.cfg.FailuresToEject
		e.br.mu.Unlock()
		if err := c.EngineDown(0, event.Instance(i), event.CauseEngineDown); err != nil {
			return fmt.Errorf("live: resume: %w", err)
		}
		r.resumedDown = append(r.resumedDown, e)
	}
	for i, cordoned := range rs.Cordoned {
		if !cordoned {
			continue
		}
		r.engines[i].cordoned.Store(true)
		if err := c.EngineDown(0, event.Instance(i), event.CauseOperator); err != nil {
			return fmt.Errorf("live: resume: %w", err)
		}
	}
	for donor, inst := range rs.Covers {
		if inst < 0 {
			continue
		}
		// Only while the covered engine is still out; a cover whose
		// engine came back before the takeover was undone then.
		if !c.View().Instance(event.Instance(inst)).Down {
			continue
		}
		if err := c.SetCover(event.Instance(inst), event.Instance(donor)); err != nil {
			// A pairing the published roles no longer bear out (an
			// older leader's /state, say): the takeover goes on
			// without it, as the roles stand.
			r.logf("narwhal-bench: resume: %v: the cover is not kept", err)
		}
	}
	r.o.moves = rs.Moves
	return nil
}

// fenced reports whether admissions are closed: the router no longer
// holds its high-availability lease.
func (o *owner) fenced() bool { return o.r.cfg.Fence != nil && !o.r.cfg.Fence() }
