package live

import (
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// Resume is what a router taking over from another starts from (serve
// --ha): the split and the engines' process generations the previous
// leader published. Requests in flight, the admission queue and the
// controllers' windows are not handed over: they start empty.
type Resume struct {
	// Roles is one role per instance (core.Config.Opening).
	Roles []event.Role
	// Generations is each engine's process generation (0: unknown); an
	// engine with one opens at it, journaled as a health record at time 0,
	// so a restart seen later still takes a higher generation.
	Generations []uint64
	// Moves continues the role-move count GET /state reports.
	Moves int
}

// ResumeFrom reads a Resume from a State published by another router of
// the same fleet: the engines must be the same, by name, in order.
func ResumeFrom(s State, names []string) (*Resume, error) {
	if len(s.Engines) != len(names) {
		return nil, fmt.Errorf("live: resume: %d engines published for a fleet of %d", len(s.Engines), len(names))
	}
	rs := &Resume{Roles: make([]event.Role, len(names)), Generations: make([]uint64, len(names)), Moves: s.Moves}
	for i, e := range s.Engines {
		if e.Name != names[i] {
			return nil, fmt.Errorf("live: resume: engine %d is %q in the published state, %q in this fleet", i, e.Name, names[i])
		}
		r, err := event.ParseRole(e.Role)
		if err != nil {
			return nil, fmt.Errorf("live: resume: engine %s: %w", e.Name, err)
		}
		rs.Roles[i], rs.Generations[i] = r, e.Generation
	}
	return rs, nil
}

// resume applies cfg.Resume's generations and move count to a new core.
func (r *Router) resume(c *core.Core) error {
	rs := r.cfg.Resume
	if rs == nil {
		return nil
	}
	if rs.Generations != nil && len(rs.Generations) != len(r.engines) {
		return fmt.Errorf("live: resume: %d generations for %d engines", len(rs.Generations), len(r.engines))
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
	r.o.moves = rs.Moves
	return nil
}

// fenced reports whether admissions are closed: the router no longer
// holds its high-availability lease.
func (o *owner) fenced() bool { return o.r.cfg.Fence != nil && !o.r.cfg.Fence() }
