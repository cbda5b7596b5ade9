package core

import (
	"fmt"
	"math"
	"slices"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// PlannerConfig holds the target-state planner's knobs (the Narwhal
// reference's defaults, narwhal-core §4.2).
type PlannerConfig struct {
	// Interval is the planning period (default 60 s).
	Interval event.Time
	// Window is the demand window (default 120 s).
	Window event.Time
	// Confirmations a rebalance needs (default 2).
	Confirmations int
	// Utilization is the target busy share per engine (default 0.8).
	Utilization float64
	// MinArrivals is the warm-up hold (default 10).
	MinArrivals int
	// DemandFloor: below this much demand (engines) no plan (default 0.5).
	DemandFloor float64
	// Deadband: a pool is starving when demand exceeds it by this many
	// engines (default 0.5).
	Deadband float64
	// FastStep is the least time between fast-loop steps (default 5 s).
	FastStep event.Time
	// AttainmentFloor: below this share of SLO-meeting outcomes the closed
	// loop escalates (default 0.9; 0 disables the loop).
	AttainmentFloor float64
	// Pass is the monitoring cadence (default 1 s).
	Pass event.Time
	// OfflineFor is how long a moved engine takes no placements: 0 for hot
	// swap; the cold-swap arm uses 300 s to model drain and reprovision.
	OfflineFor event.Time
	// MinPrefill is the prefill floor (default 1).
	MinPrefill int
}

// DefaultPlanner is the reference planner's configuration.
var DefaultPlanner = PlannerConfig{Interval: 60 * event.Second, Window: 120 * event.Second, Confirmations: 2,
	Utilization: 0.8, MinArrivals: 10, DemandFloor: 0.5, Deadband: 0.5, FastStep: 5 * event.Second,
	AttainmentFloor: 0.9, Pass: event.Second, MinPrefill: 1}

// ColdSwapOffline is how long a cold-swapped engine is out of service: the
// reference evaluation's 300 s floor for drain and reprovision.
const ColdSwapOffline = 300 * event.Second

// Planner is the Narwhal reference's target-state planner (narwhal-core
// §4.2), borrowing Dynamo's sizing law need = ceil(demand/utilization):
// prefill demand from a window of arrivals, decode demand from sampled
// resident decode context over MT; a plan each Interval (starving pools act
// at once, rebalances wait for confirmations), a grow-only fast loop between
// plans, and a closed loop that escalates on SLO misses. Placement is
// Algorithm 1 with the controller owning every flip.
type Planner struct {
	owned
	Cfg  PlannerConfig
	arm  string
	dem  Demand
	res  window[float64] // resident decode demand, engines
	next event.Time      // next monitoring pass
	plan event.Time      // next plan
	fast event.Time      // last fast-loop step
	// rebalance confirmation
	pending, confirms int
	// closed-loop hold
	holdUntil  event.Time
	pMin, dMin int
}

// NewPlanner returns the planner arm (hot swap).
func NewPlanner() *Planner { return &Planner{Cfg: DefaultPlanner, arm: "planner"} }

// NewColdSwap returns the cold-swap arm: the planner whose moves take the
// engine out of service for ColdSwapOffline.
func NewColdSwap() *Planner {
	p := &Planner{Cfg: DefaultPlanner, arm: "coldswap"}
	p.Cfg.OfflineFor = ColdSwapOffline
	return p
}

// Name implements Controller.
func (p *Planner) Name() string { return p.arm }

// Init implements Controller.
func (p *Planner) Init(c *View) error {
	if len(c.inst) < 2 {
		return fmt.Errorf("%s: %d instance: expected at least 2", p.arm, len(c.inst))
	}
	evenSplit(c)
	p.dem.Span = p.Cfg.Window
	p.dem.meanT, p.dem.same = nil, 0 // this fleet's profiles
	p.next, p.plan, p.fast = p.Cfg.Pass, p.Cfg.Interval, 0
	return nil
}

// Arrived implements the arrival observer (saw_arrival).
func (p *Planner) Arrived(c *View, r Request) { p.dem.arrived(c, r) }

// Finished implements the finish observer (closed-loop outcomes).
func (p *Planner) Finished(c *View, r Request) { p.dem.finished(c, r) }

// NextTick implements Controller.
func (p *Planner) NextTick() event.Time { return p.next }

// demand returns (prefill, decode) demand in engines: offered prefill
// seconds per second over the window, and the mean sampled resident decode
// context over MT.
func (p *Planner) demand(c *View) (float64, float64, int) {
	e := p.dem.estimate(c.now, 0)
	p.res.prune(c.now - p.Cfg.Window)
	var d float64
	if n := p.res.len(); n > 0 {
		p.res.each(func(_ event.Time, v float64) { d += v })
		d /= float64(n)
	}
	return e.PrefillLoad, d, e.Arrivals
}

// Tick implements Controller: sample, fast loop, plan when due, roll.
func (p *Planner) Tick(c *View) bool {
	if c.now < p.next {
		return false
	}
	p.next = c.now + p.Cfg.Pass
	// sample(): resident decode context in engines-worth of MT.
	var mt float64
	var resident int64
	for i := range c.inst {
		mt += c.MaxTokens(event.Instance(i))
		resident += c.inst[i].DecodeTokens
	}
	mt /= float64(len(c.inst))
	if mt > 0 && !math.IsInf(mt, 0) {
		p.res.add(c.now, float64(resident)/mt)
	}
	p.fastStep(c)
	if c.now >= p.plan {
		p.plan = c.now + p.Cfg.Interval
		if want, why := p.target(c); want > 0 {
			p.moveTo(c, want, why)
		}
	}
	return true
}

func (p *Planner) fastStep(c *View) {
	if c.now-p.fast < p.Cfg.FastStep {
		return
	}
	pre, dec, arrivals := p.demand(c)
	if arrivals < p.Cfg.MinArrivals {
		return
	}
	n := len(c.inst)
	u := p.Cfg.Utilization
	needP, needD := int(math.Ceil(pre/u)), int(math.Ceil(dec/u))
	P := c.Count(event.RolePrefill)
	moved := 0
	switch {
	case P < min(needP, n-1) && n-P > max(needD, 1):
		moved = p.moveTo(c, P+1, fmt.Sprintf("fast loop: prefill short (need %d, have %d)", needP, P))
	case n-P < min(needD, n-1) && P > max(needP, 1):
		moved = p.moveTo(c, P-1, fmt.Sprintf("fast loop: decode short (need %d, have %d)", needD, n-P))
	}
	if moved > 0 {
		p.fast = c.now
	}
}

// target is the plan: the prefill pool size wanted now, or 0 for none.
func (p *Planner) target(c *View) (int, string) {
	pre, dec, arrivals := p.demand(c)
	n := len(c.inst)
	P := c.Count(event.RolePrefill)
	record := func(want int, why string) (int, string) {
		c.Decide(PlannerDecision{Controller: p.arm, Split: splitName(P, n-P), PrefillDemand: Ratio(pre),
			DecodeDemand: Ratio(dec), Want: want, Why: why})
		return want, why
	}
	if arrivals < p.Cfg.MinArrivals || pre+dec < p.Cfg.DemandFloor {
		p.pending, p.confirms = 0, 0
		return record(0, "warm-up hold")
	}
	if p.Cfg.AttainmentFloor > 0 {
		e := p.dem.estimate(c.now, 0)
		if e.Finishes >= p.Cfg.MinArrivals {
			hold := c.now + 5*p.Cfg.Interval
			if e.TTFTOK < p.Cfg.AttainmentFloor && e.TTFTOK <= e.TPOTOK && P < n-1 {
				p.holdUntil, p.pMin, p.dMin, p.pending, p.confirms = hold, P+1, 0, 0, 0
				return record(P+1, fmt.Sprintf("closed loop: %.0f%% meet TTFT", 100*e.TTFTOK))
			}
			if e.TPOTOK < p.Cfg.AttainmentFloor && e.TPOTOK < e.TTFTOK && n-P < n-1 {
				p.holdUntil, p.dMin, p.pMin, p.pending, p.confirms = hold, n-P+1, 0, 0, 0
				return record(P-1, fmt.Sprintf("closed loop: %.0f%% meet TPOT", 100*e.TPOTOK))
			}
		}
	}
	u := p.Cfg.Utilization
	needP, needD := int(math.Ceil(pre/u)), int(math.Ceil(dec/u))
	if needP+needD > n {
		needP = max(1, int(math.RoundToEven(float64(needP*n)/float64(needP+needD))))
	}
	want := min(max(needP, 1), n-1)
	if c.now < p.holdUntil {
		if p.pMin > 0 {
			want = max(want, p.pMin)
		}
		if p.dMin > 0 {
			want = min(want, n-p.dMin)
		}
	}
	if want == P {
		p.pending, p.confirms = 0, 0
		return record(0, "on target")
	}
	starvingP := pre/u > float64(P)+p.Cfg.Deadband && want > P
	starvingD := dec/u > float64(n-P)+p.Cfg.Deadband && want < P
	if starvingP || starvingD {
		p.pending, p.confirms = 0, 0
		return record(want, "starving pool")
	}
	if want != p.pending {
		p.pending, p.confirms = want, 1
	} else {
		p.confirms++
	}
	if p.confirms >= p.Cfg.Confirmations {
		p.pending, p.confirms = 0, 0
		return record(want, "rebalance confirmed")
	}
	return record(0, fmt.Sprintf("rebalance to %d proposed (%d of %d)", want, p.confirms, p.Cfg.Confirmations))
}

// moveTo moves engines until the prefill pool has want members, emptiest
// first, and returns how many moved.
func (p *Planner) moveTo(c *View, want int, why string) int {
	want = max(want, p.Cfg.MinPrefill)
	moved := 0
	for {
		P := c.Count(event.RolePrefill)
		if P == want {
			break
		}
		to, from := event.RolePrefill, event.RoleDecode
		if P > want {
			to, from = event.RoleDecode, event.RolePrefill
		}
		live := 0
		mover := event.NoInstance
		best := 0
		for i := range c.inst {
			in := &c.inst[i]
			if in.Role != from || !in.Online(c.now) {
				continue
			}
			live++
			if in.Pinned {
				continue
			}
			if k := in.PrefillCount + in.DecodeCount; mover == event.NoInstance || k < best {
				mover, best = event.Instance(i), k
			}
		}
		if live <= 1 || mover == event.NoInstance {
			break
		}
		c.Move(mover, to, c.now+p.Cfg.OfflineFor, event.CauseController, why)
		moved++
	}
	return moved
}

// Scheduled follows a split schedule fixed in advance: at each step's time
// it moves engines until the prefill pool has the step's size. The oracle
// arm is a Scheduled controller whose schedule was chosen in hindsight.
// Placement is Algorithm 1 without inline flips with burst spill, as the
// adaptive arm's, so the two differ only in when they move.
type Scheduled struct {
	owned
	Arm   string
	Steps []ScheduleStep
	// NoSpill turns burst spill off (DefaultSpill otherwise).
	NoSpill bool
	next    int
}

// ScheduleStep asks for Prefill prefill engines from time At.
type ScheduleStep struct {
	At      event.Time
	Prefill int
}

// Name implements Controller.
func (s *Scheduled) Name() string { return s.Arm }

// PlacePrefill implements Controller: as the adaptive arm places.
func (s *Scheduled) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	if s.NoSpill {
		return c.placeSpilling(SpillConfig{}, r)
	}
	return c.placeSpilling(DefaultSpill, r)
}

// Init implements Controller.
func (s *Scheduled) Init(c *View) error {
	n := len(c.inst)
	for i, st := range s.Steps {
		if st.Prefill < 1 || st.Prefill >= n {
			return fmt.Errorf("schedule step %d: %d prefill of %d: expected 1..%d", i, st.Prefill, n, n-1)
		}
		if i > 0 && st.At < s.Steps[i-1].At {
			return fmt.Errorf("schedule step %d at %v before step %d: expected time order", i, st.At, i-1)
		}
	}
	p := n / 2
	if len(s.Steps) > 0 && s.Steps[0].At <= 0 {
		p = s.Steps[0].Prefill
	}
	for i := range c.inst {
		r := event.RoleDecode
		if i < p {
			r = event.RolePrefill
		}
		c.SetRole(event.Instance(i), r)
	}
	return nil
}

// NextTick implements Controller.
func (s *Scheduled) NextTick() event.Time {
	if s.next < len(s.Steps) {
		return s.Steps[s.next].At
	}
	return event.Never
}

// Tick implements Controller.
func (s *Scheduled) Tick(c *View) bool {
	for s.next < len(s.Steps) && s.Steps[s.next].At <= c.now {
		want := s.Steps[s.next].Prefill
		s.next++
		n := len(c.inst)
		c.Decide(ScheduleDecision{Controller: s.Arm, Split: splitName(c.Count(event.RolePrefill), n-c.Count(event.RolePrefill)),
			Want: splitName(want, n-want), Why: "schedule"})
		for c.Count(event.RolePrefill) != want {
			to := event.RolePrefill
			if c.Count(event.RolePrefill) > want {
				to = event.RoleDecode
			}
			m := pickMover(c, to)
			if m == event.NoInstance || !c.Move(m, to, c.now, event.CauseController, fmt.Sprintf("schedule: %dP from %v", want, c.now)) {
				break // nothing can move (a refused move would be picked again)
			}
		}
	}
	return false
}

// Follow returns a schedule of steps that takes over from s: it has made
// every step s made (steps must begin with them) and goes on with the
// rest. With sim.Sim.Fork, a hindsight search replays a schedule from the
// first step where it differs from one already played.
func (s *Scheduled) Follow(steps []ScheduleStep) (*Scheduled, error) {
	if len(steps) < s.next || !slices.Equal(steps[:s.next], s.Steps[:s.next]) {
		return nil, fmt.Errorf("schedule: the first %d steps differ from those made: expected them kept", s.next)
	}
	for i := max(s.next, 1); i < len(steps); i++ {
		if steps[i].At < steps[i-1].At {
			return nil, fmt.Errorf("schedule step %d at %v before step %d: expected time order", i, steps[i].At, i-1)
		}
	}
	return &Scheduled{Arm: s.Arm, Steps: steps, NoSpill: s.NoSpill, next: s.next}, nil
}
