package core

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

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

var (
	staticRE = regexp.MustCompile(`^static:(\d+)P(\d+)D(/alg1)?$`)
	hybridRE = regexp.MustCompile(`^hybrid:(\d+)P(\d+)M$`)
)

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
	if m := hybridRE.FindStringSubmatch(arm); m != nil {
		p, _ := strconv.Atoi(m[1])
		k, _ := strconv.Atoi(m[2])
		if p < 1 || k < 1 || p+k != n {
			return nil, fmt.Errorf("arm %q: %dP%dM on %d instances: expected k>=1 prefill and m>=1 mixed with k+m = %d", arm, p, k, n, n)
		}
		return &Hybrid{Prefill: p}, nil
	}
	switch name, _, _ := strings.Cut(arm, ":"); name {
	case "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray":
		if n < 2 {
			// Said here, when the arm is read, not when its run starts.
			return nil, fmt.Errorf("arm %q: %d instance: expected at least 2 (it moves engines between prefill and decode; on one engine run aggregated)", arm, n)
		}
	}
	if name, params, ok := strings.Cut(arm, ":"); ok && (name == "dynamo" || name == "ray") {
		return baselineWith(arm, name, params)
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
	return nil, fmt.Errorf("arm %q: expected one of %s (e.g. static:3P5D; hybrid:1P7M: 1 prefill engine, 7 taking both phases), or dynamo:KEY=V/... and ray:KEY=V/... (baselines with a parameter changed)", arm, strings.Join(armKinds, ", "))
}

// armKinds are the kinds of arm there are, the split counts as k and m
// (the parameterised baselines, dynamo:KEY=V/... and ray:KEY=V/..., are
// ArmKinds' last two).
var armKinds = []string{"adaptive", "arrow", "planner", "coldswap", "dynamo", "ray", "oracle", "phase-oracle",
	"aggregated", "static:kPmD/alg1", "static:kPmD", "hybrid:kPmM"}

// ArmKinds lists every kind of arm (static:kPmD for the static splits,
// dynamo:KEY=V for the parameterised Dynamo model, and so on): the one
// list NewController's error, --help's coverage test and the invariant
// tests read, so a new kind is covered everywhere or fails a test.
func ArmKinds() []string { return append(slices.Clone(armKinds), "dynamo:KEY=V", "ray:KEY=V") }

// baselineWith builds dynamo or ray with parameters changed from their
// defaults, for sensitivity sweeps: "dynamo:start=30s",
// "ray:start=0s/target=8". Keys: start (worker start-up, a duration) for
// both; dynamo: busy (refusal threshold in TTFT SLOs of queued prefill
// work, 0 = never refuse), interval (throughput adjustment interval);
// ray: target (target_ongoing_requests), maxongoing (max_ongoing_requests,
// 0 = no cap), upscale (upscale delay).
func baselineWith(arm, name, params string) (Controller, error) {
	d, r := DefaultDynamo, DefaultRay
	for _, kv := range strings.Split(params, "/") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("arm %q: %q: expected KEY=VALUE, e.g. %s:start=30s", arm, kv, name)
		}
		dur := func() (event.Time, error) {
			t, err := event.ParseDuration(v)
			if err == nil && t < 0 {
				err = fmt.Errorf("%q: expected a duration of 0 or more", v)
			}
			return t, err
		}
		num := func() (float64, error) {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
				return 0, fmt.Errorf("%q: expected a number of 0 or more", v)
			}
			return x, nil
		}
		var err error
		var x float64
		switch {
		case k == "start":
			var t event.Time
			if t, err = dur(); err == nil {
				d.StartupDelay, r.StartupDelay = t, t
			}
		case name == "dynamo" && k == "busy":
			if x, err = num(); err == nil {
				d.BusyTTFT = x
			}
		case name == "dynamo" && k == "interval":
			var t event.Time
			if t, err = dur(); err == nil && t <= 0 {
				err = fmt.Errorf("%q: expected a duration > 0", v)
			}
			if err == nil {
				d.Interval = t
			}
		case name == "ray" && k == "target":
			if x, err = num(); err == nil && x < 0.001 {
				// Lower, ongoing/target overflows int: scaling would go wrong.
				err = fmt.Errorf("%q: expected a number of at least 0.001", v)
			}
			if err == nil {
				r.TargetOngoing = x
			}
		case name == "ray" && k == "maxongoing":
			if x, err = num(); err == nil && (x != math.Trunc(x) || x > 1e9) {
				// Ray Serve LLM's own "no cap" is 1e9, its builder's default.
				err = fmt.Errorf("%q: expected a whole number from 0 (no cap) to 1e9", v)
			}
			if err == nil {
				r.MaxOngoing = int(x)
			}
		case name == "ray" && k == "upscale":
			var t event.Time
			if t, err = dur(); err == nil {
				r.UpscaleDelay = t
			}
		default:
			keys := "start, busy, interval"
			if name == "ray" {
				keys = "start, target, maxongoing, upscale"
			}
			return nil, fmt.Errorf("arm %q: unknown key %q: expected one of %s", arm, k, keys)
		}
		if err != nil {
			return nil, fmt.Errorf("arm %q: %s: %w", arm, k, err)
		}
	}
	if name == "dynamo" {
		return &Dynamo{Cfg: d}, nil
	}
	return &Ray{Cfg: r}, nil
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
// legs are placed by Algorithm 1 without inline flips instead, with burst
// spill, as the adaptive arm and the oracle place them: the same split
// with the controllers' placement, so routing and role control can be
// told apart.
type Static struct {
	Prefill int
	Alg1    bool
}

// Name implements Controller.
func (s *Static) Name() string { return "static" }

// Init implements Controller.
func (s *Static) Init(c *View) error {
	return openFixed(c, "static split", s.Prefill, event.RoleDecode)
}

// openFixed opens a fixed fleet: the first prefill instances take
// prefill and the others take role rest; what names the fleet in the
// error.
func openFixed(c *View, what string, prefill int, rest event.Role) error {
	n := c.N()
	if prefill < 1 || prefill >= n {
		return fmt.Errorf("%s: %d prefill of %d instances: expected 1..%d", what, prefill, n, n-1)
	}
	for i := range n {
		r := rest
		if i < prefill {
			r = event.RolePrefill
		}
		c.SetRole(event.Instance(i), r)
	}
	return nil
}

// PlacePrefill implements Controller.
func (s *Static) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	if s.Alg1 {
		return c.placeSpilling(DefaultSpill, r)
	}
	return leastLoaded(c, argPrefillTokens), event.CauseNone
}

// PlaceDecode implements Controller.
func (s *Static) PlaceDecode(c *View, r Request) event.Instance {
	if s.Alg1 {
		return owned{}.PlaceDecode(c, r)
	}
	return leastLoaded(c, argDecodeTokens)
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
	for i := range c.N() {
		c.SetRole(event.Instance(i), event.RoleMixed)
	}
	return nil
}

// PlacePrefill implements Controller.
func (Aggregated) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	return leastLoaded(c, argMixedTokens), event.CauseNone
}

// PlaceDecode implements Controller.
func (Aggregated) PlaceDecode(c *View, r Request) event.Instance { return r.PrefillInst }

// Tick implements Controller.
func (Aggregated) Tick(*View) bool { return false }

// NextTick implements Controller.
func (Aggregated) NextTick() event.Time { return event.Never }

// Hybrid is partly aggregated serving: the first Prefill instances take
// prefill only, the rest both phases (event.RoleMixed). A prompt goes to
// the engine with the least prompt work waiting, a mixed engine's resident
// decode context counting HybridDecodeWeight tokens per token (its streams
// slow the prompt's chunks, and the prompt stalls them): the prefill
// engines take the prompts while they keep up, and the mixed engines the
// overflow. A prompt that ran on a mixed engine decodes there (no KV
// moves); one from a prefill engine goes to the mixed engine holding the
// fewest context tokens. It behaves as a split with a fractional prefill
// pool: on steady, 1P7M sustains more than 1P7D and 2P6D (issue 10,
// twenty-ninth round).
type Hybrid struct {
	Prefill int
}

// HybridDecodeWeight is what a mixed engine's resident decode token
// weighs against a waiting prompt token when a hybrid fleet places a
// prompt (0.2-0.5 sustained the same on steady's development seeds).
const HybridDecodeWeight = 0.3

// Name implements Controller.
func (h *Hybrid) Name() string { return "hybrid" }

// Init implements Controller.
func (h *Hybrid) Init(c *View) error {
	return openFixed(c, "hybrid fleet", h.Prefill, event.RoleMixed)
}

// PlacePrefill implements Controller.
func (h *Hybrid) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	return placeHybridPrefill(c), event.CauseNone
}

// PlaceDecode implements Controller.
func (h *Hybrid) PlaceDecode(c *View, r Request) event.Instance { return placeHybridDecode(c, r) }

// Tick implements Controller.
func (h *Hybrid) Tick(*View) bool { return false }

// NextTick implements Controller.
func (h *Hybrid) NextTick() event.Time { return event.Never }

// placeHybridPrefill is a hybrid fleet's prompt placement (Hybrid): the
// online prefill or mixed engine with the least prompt work waiting, a
// mixed engine's decode context weighed HybridDecodeWeight, lowest index
// on ties; with none online, argmin's fallbacks.
func placeHybridPrefill(c *View) event.Instance {
	best, bestK := event.NoInstance, 0.0
	for i := range c.inst {
		in := &c.inst[i]
		if !in.Online(c.now) || (in.Role != event.RolePrefill && in.Role != event.RoleMixed) {
			continue
		}
		k := float64(in.PrefillTokens)
		if in.Role == event.RoleMixed {
			k += HybridDecodeWeight * float64(in.DecodeTokens)
		}
		if best == event.NoInstance || k < bestK {
			best, bestK = event.Instance(i), k
		}
	}
	if best == event.NoInstance {
		return argmin(c, event.RolePrefill, func(in *Instance) int64 { return in.PrefillTokens })
	}
	return best
}

// placeHybridDecode is a hybrid fleet's decode placement (Hybrid): where
// the prompt ran when that is a mixed engine, else the online mixed (or
// decode) engine holding the fewest context tokens.
func placeHybridDecode(c *View, r Request) event.Instance {
	if r.PrefillInst >= 0 && c.inst[r.PrefillInst].Role == event.RoleMixed {
		return r.PrefillInst
	}
	best, bestK := event.NoInstance, int64(0)
	for i := range c.inst {
		in := &c.inst[i]
		if !in.Online(c.now) || (in.Role != event.RoleDecode && in.Role != event.RoleMixed) {
			continue
		}
		if k := in.DecodeTokens; best == event.NoInstance || k < bestK {
			best, bestK = event.Instance(i), k
		}
	}
	if best == event.NoInstance {
		return argmin(c, event.RoleMixed, func(in *Instance) int64 { return in.DecodeTokens })
	}
	return best
}

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
