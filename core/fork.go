package core

import (
	"maps"
	"slices"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Fork copies the core, sharing no state with it, with ctrl in place of
// its controller (the controller's own state is ctrl's: a driver forking
// a run passes a controller that carries on from the old one's, such as
// Scheduled.Follow's). The drivers' fork is sim.Sim.Fork.
func (c *Core) Fork(ctrl Controller) *Core {
	n := &Core{v: c.v, adm: c.adm, ctrl: ctrl, avoid: maps.Clone(c.avoid)}
	n.arrivals, _ = ctrl.(arrivalObserver)
	n.finishes, _ = ctrl.(finishObserver)
	n.adm.queue = slices.Clone(c.adm.queue)
	v := &n.v
	v.inst = slices.Clone(c.v.inst)
	v.out = slices.Clone(c.v.out)
	v.records = slices.Clone(c.v.records)
	v.scratch = nil
	if c.v.idx != nil {
		x := *c.v.idx
		for t := range x.trees {
			x.trees[t].node = slices.Clone(x.trees[t].node)
		}
		v.idx = &x
	}
	if c.v.aidx != nil {
		x := *c.v.aidx
		for k, tr := range x.trees {
			if tr != nil {
				t := *tr
				t.node = slices.Clone(tr.node)
				x.trees[k] = &t
			}
		}
		v.aidx = &x
	}
	v.offline = slices.Clone(c.v.offline)
	v.affinity = maps.Clone(c.v.affinity)
	v.affRing = slices.Clone(c.v.affRing)
	v.fleet.of = slices.Clone(c.v.fleet.of)
	v.fleet.dirty = slices.Clone(c.v.fleet.dirty)
	return n
}

// NextTick is when the core next wants a tick (Ready's NextTick), without
// taking its decisions.
func (c *Core) NextTick() event.Time {
	return min(c.ctrl.NextTick(), c.adm.nextDeadline())
}
