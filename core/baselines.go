package core

import (
	"fmt"
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Models of two production autoscalers, built from their documentation
// (docs/baselines.md cites each parameter). They scale pools by starting
// and stopping workers, not by relabelling: an engine that changes pool
// serves nothing until its new worker has started (StartupDelay). Every
// arm gets the same engine budget, the fleet.

// DefaultStartupDelay is how long a new vLLM worker takes to load its
// weights and come up: an assumption of 120 s (minutes, per the Dynamo
// planner's guidance that scale-up time bounds the adjustment interval).
const DefaultStartupDelay = 120 * event.Second

// DynamoConfig holds the Dynamo Planner model's knobs.
type DynamoConfig struct {
	// Interval is the throughput-based adjustment interval (Dynamo's
	// throughput_adjustment_interval, default 180 s).
	Interval event.Time
	// LoadStep is the load-based adjustment interval (Dynamo's
	// load_adjustment_interval, default 5 s): at most one worker per step.
	LoadStep event.Time
	// DownSensitivity: a pool shrinks only when every engine's estimate is
	// below this share of the SLO (Dynamo's load_scaling_down_sensitivity,
	// default 80%).
	DownSensitivity float64
	// StartupDelay is how long a started worker takes to serve.
	StartupDelay event.Time
	// BusyTTFT: a request is refused (HTTP 529) when even the least loaded
	// prefill worker holds this many TTFT SLOs of queued prefill work
	// (default 2: the request could not meet its SLO).
	BusyTTFT float64
}

// DefaultDynamo is the Dynamo Planner model's configuration.
var DefaultDynamo = DynamoConfig{Interval: 180 * event.Second, LoadStep: 5 * event.Second,
	DownSensitivity: 0.8, StartupDelay: DefaultStartupDelay, BusyTTFT: 2}

// Dynamo models NVIDIA Dynamo Planner driving a disaggregated vLLM fleet:
// throughput mode sizes both pools each Interval from the last interval's
// load (a constant predictor) and the profile's per-engine throughput at the
// SLOs; load mode moves one worker per LoadStep when every engine of a pool
// is estimated past its SLO and the other pool has room. Its KV-aware
// router places like Algorithm 1; requests are refused with HTTP 529 when
// the prefill workers are saturated.
type Dynamo struct {
	Cfg       DynamoConfig
	next      event.Time
	nextPlan  event.Time
	reqs      int
	inTokens  int64
	outTokens int64
}

// Name implements Controller.
func (d *Dynamo) Name() string { return "dynamo" }

// Init implements Controller.
func (d *Dynamo) Init(c *View) error {
	if len(c.inst) < 2 {
		return fmt.Errorf("dynamo: %d instance: expected at least 2", len(c.inst))
	}
	evenSplit(c)
	d.next, d.nextPlan = d.Cfg.LoadStep, d.Cfg.Interval
	return nil
}

// Arrived counts the interval's load.
func (d *Dynamo) Arrived(c *View, r Request) {
	d.reqs++
	d.inTokens += int64(r.InputTokens)
}

// Finished counts output tokens (the planner's OSL).
func (d *Dynamo) Finished(c *View, r Request) { d.outTokens += int64(r.OutputTokens) }

// PlacePrefill implements Controller.
func (d *Dynamo) PlacePrefill(c *View, r Request) (event.Instance, event.Cause) {
	if !c.anyOnline(event.RolePrefill) {
		return event.NoInstance, event.CauseOverload
	}
	i := c.algorithm1(r, false, placeOptions{})
	if d.Cfg.BusyTTFT > 0 && c.inst[i].PrefillWork > d.Cfg.BusyTTFT*c.ttftS {
		return event.NoInstance, event.CauseOverload
	}
	return i, event.CauseNone
}

// PlaceDecode implements Controller.
func (d *Dynamo) PlaceDecode(c *View, r Request) event.Instance {
	return c.algorithm1(r, true, placeOptions{})
}

// NextTick implements Controller.
func (d *Dynamo) NextTick() event.Time { return d.next }

// Tick implements Controller.
func (d *Dynamo) Tick(c *View) bool {
	if c.now < d.next {
		return false
	}
	d.next = c.now + d.Cfg.LoadStep
	d.pass(c)
	return true
}

// pass is one planner pass: a throughput plan when due, else load mode.
func (d *Dynamo) pass(c *View) {
	n := len(c.inst)
	P := c.Count(event.RolePrefill)
	if c.now >= d.nextPlan {
		d.nextPlan = c.now + d.Cfg.Interval
		want, why := d.throughputTarget(c)
		d.reqs, d.inTokens, d.outTokens = 0, 0, 0
		c.Decide(DynamoDecision{Controller: "dynamo", Mode: "throughput", Split: splitName(P, n-P), Want: want, Why: why})
		if want > 0 && want != P {
			c.startWorkers(want, d.Cfg.StartupDelay, why)
			return
		}
	}
	// Load mode: ±1 worker when every engine of a pool is past its SLO and
	// every engine of the other is below DownSensitivity of its own; never
	// while a worker is still starting (Dynamo's pending-desired guard).
	for i := range c.inst {
		if !c.inst[i].Online(c.now) {
			return
		}
	}
	// Each engine's estimate as a share of its SLO: queued prefill work
	// over the TTFT SLO, the decode interval at its context over the TPOT SLO.
	pLo, pHi, pOK := c.ratioRange(event.RolePrefill, func(in *Instance) float64 { return in.PrefillWork / c.ttftS })
	dLo, dHi, dOK := c.ratioRange(event.RoleDecode, func(in *Instance) float64 {
		return in.Profile.Interval(in.DecodeTokens) / c.tpotS
	})
	switch s := d.Cfg.DownSensitivity; {
	case pOK && dOK && pLo >= 1 && dHi < s && n-P > 1:
		c.startWorkers(P+1, d.Cfg.StartupDelay, "load: every prefill worker past the TTFT SLO")
	case pOK && dOK && dLo >= 1 && pHi < s && P > 1:
		c.startWorkers(P-1, d.Cfg.StartupDelay, "load: every decode worker past the ITL SLO")
	}
}

// throughputTarget sizes the prefill pool from the last interval's load:
// prefill engines = requests × ISL / interval / (ISL / T(ISL)); decode
// engines = requests × OSL / interval / (MT / (ISL + OSL/2) / TPOT), scaled
// to the budget.
func (d *Dynamo) throughputTarget(c *View) (int, string) {
	if d.reqs == 0 {
		return 0, "no load observed"
	}
	n := len(c.inst)
	span := d.Cfg.Interval.Seconds()
	isl := float64(d.inTokens) / float64(d.reqs)
	osl := math.Max(1, float64(d.outTokens)/float64(d.reqs))
	prof := c.inst[0].Profile
	prefillTput := isl / math.Max(prof.Prefill(int(isl)), 1e-9)
	ctx := isl + osl/2
	decodeTput := c.MaxTokens(0) / ctx / c.tpotS
	needP := math.Ceil(float64(d.reqs) * isl / span / prefillTput)
	needD := math.Ceil(float64(d.reqs) * osl / span / math.Max(decodeTput, 1e-9))
	needP, needD = math.Max(needP, 1), math.Max(needD, 1)
	p := int(math.Round(float64(n) * needP / (needP + needD)))
	p = min(max(p, 1), n-1)
	return p, fmt.Sprintf("ISL %.0f, OSL %.0f, %d requests: need %.0fP %.0fD", isl, osl, d.reqs, needP, needD)
}

// startWorkers moves engines one at a time toward want prefill engines;
// each moved engine serves again only after delay. As Kubernetes removes
// pods on a scale-down, a worker still starting goes first (it serves
// nothing yet); a serving worker is removed only when another worker of its
// role serves, so a pool never loses its last serving worker while the
// others are still starting.
func (c *View) startWorkers(want int, delay event.Time, why string) {
	for {
		P := c.Count(event.RolePrefill)
		if P == want {
			return
		}
		to, from := event.RolePrefill, event.RoleDecode
		if P > want {
			to, from = event.RoleDecode, event.RolePrefill
		}
		if c.Count(from) <= 1 {
			return
		}
		m := event.NoInstance
		for i := range c.inst {
			if in := &c.inst[i]; in.Role == from && !in.Online(c.now) && !in.Pinned {
				m = event.Instance(i)
				break
			}
		}
		if m == event.NoInstance {
			if c.onlineCount(from) <= 1 {
				return
			}
			if m = pickMover(c, to); m == event.NoInstance {
				return
			}
		}
		c.Move(m, to, c.now+delay, event.CauseController, why)
	}
}

// onlineCount is how many instances of role r serve now.
func (c *View) onlineCount(r event.Role) int {
	n := 0
	for i := range c.inst {
		if c.inst[i].Role == r && c.inst[i].Online(c.now) {
			n++
		}
	}
	return n
}

// ratioRange returns the smallest and largest ratio over the online
// instances of role r, and whether there is any.
func (c *View) ratioRange(r event.Role, ratio func(*Instance) float64) (lo, hi float64, ok bool) {
	for i := range c.inst {
		in := &c.inst[i]
		if in.Role != r || !in.Online(c.now) {
			continue
		}
		v := ratio(in)
		if !ok || v < lo {
			lo = v
		}
		if !ok || v > hi {
			hi = v
		}
		ok = true
	}
	return lo, hi, ok
}

// anyOnline reports whether some instance of role r serves now.
func (c *View) anyOnline(r event.Role) bool {
	for i := range c.inst {
		if c.inst[i].Role == r && c.inst[i].Online(c.now) {
			return true
		}
	}
	return false
}

// RayConfig holds the Ray Serve LLM model's knobs (Ray Serve's
// AutoscalingConfig defaults).
type RayConfig struct {
	// TargetOngoing is target_ongoing_requests per replica (default 2).
	TargetOngoing float64
	// UpscaleDelay and DownscaleDelay: how long a higher (lower) desire must
	// hold before replicas are added (removed) (defaults 30 s and 600 s).
	UpscaleDelay, DownscaleDelay event.Time
	// LookBack is the window ongoing requests are averaged over (30 s),
	// sampled every Metrics (10 s).
	LookBack, Metrics event.Time
	// MinReplicas per deployment (default 1).
	MinReplicas int
	// MaxOngoing is max_ongoing_requests per replica: beyond it a request
	// finds no replica and fails with HTTP 503. 0, the default, is no cap:
	// Ray Serve LLM's builder sets it to 1e9
	// (RAY_SERVE_LLM_DEFAULT_MAX_ONGOING_REQUESTS).
	MaxOngoing int
	// StartupDelay is how long a new replica takes to serve.
	StartupDelay event.Time
}

// DefaultRay is the Ray Serve LLM model's configuration.
var DefaultRay = RayConfig{TargetOngoing: 2, UpscaleDelay: 30 * event.Second, DownscaleDelay: 600 * event.Second,
	LookBack: 30 * event.Second, Metrics: 10 * event.Second, MinReplicas: 1, MaxOngoing: 0,
	StartupDelay: DefaultStartupDelay}

// Ray models Ray Serve LLM's prefill/decode deployment: the prefill and
// decode deployments autoscale independently on ongoing requests per
// replica (desired = ceil(ongoing / target)), adding replicas after the
// desire has held UpscaleDelay and removing them after DownscaleDelay, each
// new replica serving after StartupDelay; GPUs no replica holds stay idle.
// Requests go to the replica with the fewest ongoing requests; when every
// replica holds MaxOngoing, the request fails with HTTP 503.
type Ray struct {
	Cfg     RayConfig
	next    event.Time
	samples [2]window[float64] // ongoing requests per deployment
	upSince [2]event.Time      // since when desire > current (-1: not)
	dnSince [2]event.Time
}

var rayRoles = [2]event.Role{event.RolePrefill, event.RoleDecode}

// Name implements Controller.
func (r *Ray) Name() string { return "ray" }

// Init implements Controller: one replica per deployment to start (Ray's
// min_replicas), the other GPUs idle.
func (r *Ray) Init(c *View) error {
	if len(c.inst) < 2 {
		return fmt.Errorf("ray: %d instance: expected at least 2", len(c.inst))
	}
	for i := range c.inst {
		c.SetRole(event.Instance(i), event.RoleNone)
	}
	m := max(r.Cfg.MinReplicas, 1)
	for k := 0; k < m && 2*k+1 < len(c.inst); k++ {
		c.SetRole(event.Instance(2*k), event.RolePrefill)
		c.SetRole(event.Instance(2*k+1), event.RoleDecode)
	}
	r.next = r.Cfg.Metrics
	for k := range r.upSince {
		r.upSince[k], r.dnSince[k] = -1, -1
	}
	return nil
}

// least returns the online replica of role with the fewest ongoing
// requests below MaxOngoing, or NoInstance.
func (r *Ray) least(c *View, role event.Role) event.Instance {
	best, bestN := event.NoInstance, 0
	for i := range c.inst {
		in := &c.inst[i]
		if in.Role != role || !in.Online(c.now) {
			continue
		}
		n := in.PrefillCount
		if role == event.RoleDecode {
			n = in.DecodeCount
		}
		if r.Cfg.MaxOngoing > 0 && n >= r.Cfg.MaxOngoing {
			continue
		}
		if best == event.NoInstance || n < bestN {
			best, bestN = event.Instance(i), n
		}
	}
	return best
}

// PlacePrefill implements Controller.
func (r *Ray) PlacePrefill(c *View, q Request) (event.Instance, event.Cause) {
	if i := r.least(c, event.RolePrefill); i != event.NoInstance {
		return i, event.CauseNone
	}
	return event.NoInstance, event.CauseUnavailable
}

// PlaceDecode implements Controller: the least busy decode replica; when
// all are full the leg still goes to the least busy one (its prefill is
// done and the router does not drop it).
func (r *Ray) PlaceDecode(c *View, q Request) event.Instance {
	if i := r.least(c, event.RoleDecode); i != event.NoInstance {
		return i
	}
	return c.algorithm1(q, true, placeOptions{})
}

// NextTick implements Controller.
func (r *Ray) NextTick() event.Time { return r.next }

// Tick implements Controller: sample ongoing requests, then autoscale each
// deployment.
func (r *Ray) Tick(c *View) bool {
	if c.now < r.next {
		return false
	}
	r.next = c.now + r.Cfg.Metrics
	for k, role := range rayRoles {
		ongoing := 0
		for i := range c.inst {
			in := &c.inst[i]
			if role == event.RolePrefill {
				ongoing += in.PrefillCount
			} else {
				ongoing += in.DecodeCount
			}
		}
		w := &r.samples[k]
		w.add(c.now, float64(ongoing))
		w.prune(c.now - r.Cfg.LookBack)
		var avg float64
		w.each(func(_ event.Time, v float64) { avg += v })
		avg /= float64(max(w.len(), 1))
		cur := c.Count(role)
		desired := max(r.Cfg.MinReplicas, int(math.Ceil(avg/r.Cfg.TargetOngoing)))
		switch {
		case desired > cur:
			r.dnSince[k] = -1
			if r.upSince[k] < 0 {
				r.upSince[k] = c.now
			}
			if c.now-r.upSince[k] >= r.Cfg.UpscaleDelay {
				for add := desired - cur; add > 0; add-- {
					i := c.firstRole(event.RoleNone)
					if i == event.NoInstance {
						break
					}
					c.Move(i, role, c.now+r.Cfg.StartupDelay, event.CauseController,
						fmt.Sprintf("ray: %s ongoing %.1f per replica over target %g: %d replicas wanted", role, avg/float64(cur), r.Cfg.TargetOngoing, desired))
				}
				r.upSince[k] = c.now
			}
		case desired < cur:
			r.upSince[k] = -1
			if r.dnSince[k] < 0 {
				r.dnSince[k] = c.now
			}
			if c.now-r.dnSince[k] >= r.Cfg.DownscaleDelay {
				for drop := cur - desired; drop > 0; drop-- {
					i := pickIdlest(c, role)
					if i == event.NoInstance {
						break
					}
					c.Move(i, event.RoleNone, c.now, event.CauseController, fmt.Sprintf("ray: %s ongoing %.1f, %d replicas wanted", role, avg, desired))
				}
				r.dnSince[k] = c.now
			}
		default:
			r.upSince[k], r.dnSince[k] = -1, -1
		}
		c.Decide(RayDecision{Controller: "ray", Deployment: role.String(), Replicas: cur, OngoingAvg: Ratio(avg), Desired: desired})
	}
	return true
}

// firstRole returns the first instance holding role r.
func (c *View) firstRole(r event.Role) event.Instance {
	for i := range c.inst {
		if c.inst[i].Role == r {
			return event.Instance(i)
		}
	}
	return event.NoInstance
}

// pickIdlest returns the online replica of role r with the least resident
// work, or NoInstance when it is the last one.
func pickIdlest(c *View, r event.Role) event.Instance {
	if c.Count(r) <= 1 {
		return event.NoInstance
	}
	best, bestN := event.NoInstance, 0
	for i := range c.inst {
		in := &c.inst[i]
		if in.Role != r || in.Pinned {
			continue
		}
		if n := in.PrefillCount + in.DecodeCount; best == event.NoInstance || n < bestN {
			best, bestN = event.Instance(i), n
		}
	}
	return best
}
