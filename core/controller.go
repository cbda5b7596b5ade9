package core

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Controller decides where each request runs and which role each instance
// holds. Implementations read the core's View and act only through its Move
// and Decide (and SetRole, in Init); they keep their own state and read no
// clock.
type Controller interface {
	// Name is the arm's name as the CLI spells it.
	Name() string
	// Init sets the opening roles (Core.SetRole) and validates the fleet size.
	Init(c *View) error
	// PlacePrefill returns the instance for r's prefill, or NoInstance and
	// the cause: the request is refused, or fails when the cause is
	// event.CauseUnavailable.
	PlacePrefill(c *View, r Request) (event.Instance, event.Cause)
	// PlaceDecode returns the instance for r's decode leg; r.PrefillInst is
	// where its KV is.
	PlaceDecode(c *View, r Request) event.Instance
	// Tick runs the controller's periodic work at c.Now() and reports
	// whether it ran a monitoring pass (the core then closes the monitor's
	// interval, Arrow §5.5).
	Tick(c *View) bool
	// NextTick is when the controller next wants Tick, or event.Never.
	NextTick() event.Time
}

var staticRE = regexp.MustCompile(`^static:(\d+)P(\d+)D(/alg1)?$`)

// NewController builds the controller an arm name asks for, for a fleet of n
// instances. Known arms: "static:kPmD" (k+m must equal n) and "aggregated".
func NewController(arm string, n int) (Controller, error) {
	if m := staticRE.FindStringSubmatch(arm); m != nil {
		p, _ := strconv.Atoi(m[1])
		d, _ := strconv.Atoi(m[2])
		if p < 1 || d < 1 || p+d != n {
			return nil, fmt.Errorf("arm %q: %dP%dD on %d instances: expected k>=1 prefill and m>=1 decode with k+m = %d", arm, p, d, n, n)
		}
		return &Static{Prefill: p, Alg1: m[3] != ""}, nil
	}
	switch arm {
	case "aggregated":
		return &Aggregated{}, nil
	case "adaptive":
		return &Adaptive{Cfg: DefaultAdaptive}, nil
	case "arrow":
		return &Arrow{Cfg: DefaultArrow}, nil
	case "planner":
		return NewPlanner(), nil
	case "coldswap":
		return NewColdSwap(), nil
	case "dynamo":
		return &Dynamo{Cfg: DefaultDynamo}, nil
	case "ray":
		return &Ray{Cfg: DefaultRay}, nil
	case "oracle", "phase-oracle":
		return nil, fmt.Errorf("arm %q: the oracle needs a schedule chosen in hindsight; the sweep builds it (core.Scheduled)", arm)
	}
	return nil, fmt.Errorf("arm %q: expected one of adaptive, arrow, planner, coldswap, dynamo, ray, oracle, phase-oracle, aggregated, static:kPmD/alg1, static:kPmD (e.g. static:3P5D)", arm)
}

// StaticArms lists static:1P(n-1)D through static:(n-1)P1D.
func StaticArms(n int) []string {
	var out []string
	for p := 1; p < n; p++ {
		out = append(out, fmt.Sprintf("static:%dP%dD", p, n-p))
	}
	return out
}

// Static is a fixed split: the first Prefill instances take prefill, the
// rest decode, forever. Prefill goes to the prefill instance with the fewest
// resident prompt tokens, decode to the decode instance with the fewest
// resident context tokens (ties to the lowest index), as the Narwhal
// reference's static arms do. With Alg1 (the arm static:kPmD/alg1) both
// legs are placed by Algorithm 1 without inline flips instead, as the
// adaptive arm and the oracle place them: the same split with the
// controllers' placement, so routing and role control can be told apart.
type Static struct {
	Prefill int
	Alg1    bool
}

// Name implements Controller.
func (s *Static) Name() string { return "static" }

// Init implements Controller.
func (s *Static) Init(c *View) error {
	n := len(c.Instances())
	if s.Prefill < 1 || s.Prefill >= n {
		return fmt.Errorf("static split: %d prefill of %d instances: expected 1..%d", s.Prefill, n, n-1)
	}
	for i := range c.Instances() {
		r := event.RoleDecode
		if i < s.Prefill {
			r = event.RolePrefill
		}
		c.SetRole(event.Instance(i), r)
	}
	return nil
}

// PlacePrefill implements Controller.
func (s *Static) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	if s.Alg1 {
		return owned{}.PlacePrefill(c, r)
	}
	return argmin(c, event.RolePrefill, func(in *Instance) int64 { return in.PrefillTokens }), event.CauseNone
}

// PlaceDecode implements Controller.
func (s *Static) PlaceDecode(c *View, r Request) event.Instance {
	if s.Alg1 {
		return owned{}.PlaceDecode(c, r)
	}
	return argmin(c, event.RoleDecode, func(in *Instance) int64 { return in.DecodeTokens })
}

// Tick implements Controller.
func (s *Static) Tick(*View) bool { return false }

// NextTick implements Controller.
func (s *Static) NextTick() event.Time { return event.Never }

// Aggregated runs both phases on every instance: prefill goes to the
// instance with the fewest resident tokens of either phase, and decode stays
// where its prefill ran, so KV never moves.
type Aggregated struct{}

// Name implements Controller.
func (Aggregated) Name() string { return "aggregated" }

// Init implements Controller.
func (Aggregated) Init(c *View) error {
	for i := range c.Instances() {
		c.SetRole(event.Instance(i), event.RoleMixed)
	}
	return nil
}

// PlacePrefill implements Controller.
func (Aggregated) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	return argmin(c, event.RoleMixed, func(in *Instance) int64 { return in.PrefillTokens + in.DecodeTokens }), event.CauseNone
}

// PlaceDecode implements Controller.
func (Aggregated) PlaceDecode(c *View, r Request) event.Instance { return r.PrefillInst }

// Tick implements Controller.
func (Aggregated) Tick(*View) bool { return false }

// NextTick implements Controller.
func (Aggregated) NextTick() event.Time { return event.Never }

// argmin returns the online instance of role with the smallest key (lowest
// index on ties); with none online in that role it searches every online
// instance, then the whole fleet.
func argmin(c *View, role event.Role, key func(*Instance) int64) event.Instance {
	best, bestKey := event.NoInstance, int64(0)
	for pass := 0; pass < 3 && best == event.NoInstance; pass++ {
		for i := range c.inst {
			in := &c.inst[i]
			if (pass == 0 && in.Role != role) || (pass < 2 && !in.Online(c.now)) {
				continue
			}
			if k := key(in); best == event.NoInstance || k < bestKey {
				best, bestKey = event.Instance(i), k
			}
		}
	}
	return best
}
