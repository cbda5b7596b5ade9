package core

import (
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// ArrowConfig holds the reactive Arrow controller's knobs (Algorithms 1-3).
type ArrowConfig struct {
	// Expand is the decode load at which decode grows (default 1.0).
	Expand float64
	// Shrink is the low-load threshold, below Expand (default 0.5).
	Shrink float64
	// Cooldown is the least time between P→D flips (default 2 s, the
	// reference demo's; its server default is 10 s).
	Cooldown event.Time
	// Sustained is how many consecutive triggered passes Algorithm 2 needs
	// (default 3).
	Sustained int
	// Interval is the monitoring pass period (default 1 s).
	Interval event.Time
	// MinPrefill is the prefill floor (default 1).
	MinPrefill int
}

// DefaultArrow is the reference demo's arrow arm.
var DefaultArrow = ArrowConfig{Expand: 1.0, Shrink: 0.5, Cooldown: 2 * event.Second, Sustained: 3,
	Interval: event.Second, MinPrefill: 1}

// Arrow is the reactive controller of the Arrow paper: Algorithm 1 places
// every leg and flips inline when nothing meets the SLO; Algorithm 2 runs a
// monitoring pass each interval and lends prefill instances to decode;
// Algorithm 3 picks which instance flips. It opens at an even split.
type Arrow struct {
	Cfg       ArrowConfig
	next      event.Time
	sustained int
	lastP2D   event.Time
}

// Name implements Controller.
func (a *Arrow) Name() string { return "arrow" }

// Init implements Controller.
func (a *Arrow) Init(c *View) error {
	n := len(c.inst)
	if n < 2 {
		return fmt.Errorf("arrow: %d instance: expected at least 2", n)
	}
	evenSplit(c)
	a.next = a.Cfg.Interval
	a.lastP2D = 0 // the cooldown also gates the first P→D (reference §5.5)
	return nil
}

// evenSplit opens at n/2 prefill, the rest decode.
func evenSplit(c *View) {
	n := len(c.inst)
	for i := range c.inst {
		r := event.RoleDecode
		if i < n/2 {
			r = event.RolePrefill
		}
		c.SetRole(event.Instance(i), r)
	}
}

func (a *Arrow) opts() placeOptions {
	return placeOptions{flip: true, shrink: a.Cfg.Shrink, flipper: a.flip}
}

// PlacePrefill implements Controller (Algorithm 1).
func (a *Arrow) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	return c.algorithm1(r, false, a.opts()), event.CauseNone
}

// PlaceDecode implements Controller (Algorithm 1).
func (a *Arrow) PlaceDecode(c *View, r Request) event.Instance {
	return c.algorithm1(r, true, a.opts())
}

// NextTick implements Controller.
func (a *Arrow) NextTick() event.Time { return a.next }

// Tick implements Controller: Algorithm 2's monitoring pass.
func (a *Arrow) Tick(c *View) bool {
	if c.now < a.next {
		return false
	}
	a.next = c.now + a.Cfg.Interval
	lp, ld := c.PoolLoad(event.RolePrefill), c.PoolLoad(event.RoleDecode)
	// Arrow Algorithm 2: expand decode when it is overloaded, or lend an
	// idle prefill instance when decode is busy enough.
	triggered := ld >= a.Cfg.Expand || (lp <= a.Cfg.Shrink && a.Cfg.Shrink <= ld)
	if triggered {
		a.sustained++
	} else {
		a.sustained = 0
	}
	choice := "stay"
	if a.sustained >= a.Cfg.Sustained {
		why := fmt.Sprintf("decode load %.3f, prefill load %.3f over %d passes", ld, lp, a.sustained)
		if f := a.flip(c, event.RoleDecode, event.CauseController, why); f != event.NoInstance {
			a.sustained = 0
			choice = fmt.Sprintf("flip %d to decode", f)
		} else {
			choice = "flip refused"
		}
	}
	c.Decide(ArrowDecision{Controller: "arrow", PrefillLoad: Ratio(lp), DecodeLoad: Ratio(ld), Sustained: a.sustained,
		Split: splitName(c.Count(event.RolePrefill), c.Count(event.RoleDecode)), Choice: choice})
	return true
}

// flip is Algorithm 3: move one instance to role to, or return NoInstance
// when a guard refuses: the P→D cooldown, never emptying a pool (|S| > 1),
// the prefill floor.
func (a *Arrow) flip(c *View, to event.Role, cause event.Cause, why string) event.Instance {
	from := event.RolePrefill
	if to == event.RolePrefill {
		from = event.RoleDecode
	}
	if to == event.RoleDecode && c.now-a.lastP2D < a.Cfg.Cooldown {
		return event.NoInstance
	}
	live := 0
	for i := range c.inst {
		if in := &c.inst[i]; in.Role == from && in.Online(c.now) {
			live++
		}
	}
	if live <= 1 || (from == event.RolePrefill && live-1 < a.Cfg.MinPrefill) {
		return event.NoInstance
	}
	best := pickMover(c, to)
	if best == event.NoInstance { // every candidate is pinned
		return event.NoInstance
	}
	if to == event.RoleDecode {
		a.lastP2D = c.now
	}
	c.Move(best, to, c.now, cause, why)
	return best
}
