package core

import (
	"errors"
	"fmt"
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// SLO is the pair of latency objectives every placement is judged by.
type SLO struct {
	// TTFT is the time-to-first-token objective, seconds.
	TTFT float64 `yaml:"ttft" json:"ttft"`
	// TPOT is the time-per-output-token objective, seconds.
	TPOT float64 `yaml:"tpot" json:"tpot"`
}

// Validate reports every objective that is not a positive finite number.
func (s SLO) Validate() error {
	var errs []error
	if !(s.TTFT > 0) || math.IsInf(s.TTFT, 0) {
		errs = append(errs, fmt.Errorf("ttft: %v: expected a positive duration", s.TTFT))
	}
	if !(s.TPOT > 0) || math.IsInf(s.TPOT, 0) {
		errs = append(errs, fmt.Errorf("tpot: %v: expected a positive duration", s.TPOT))
	}
	return errors.Join(errs...)
}

// Config is what a Core needs to know about its fleet.
type Config struct {
	// Profiles holds one timing profile per instance, in registration order.
	Profiles []timing.Profile
	// SLO is the objective placements are priced against.
	SLO SLO
	// Pinned marks instances no controller may move (nil: none). Their
	// opening role is still the controller's choice.
	Pinned []bool
	// PrefixAware prices a prompt's prefill on the instance that last
	// prefilled its prefix group as T(n) − T(shared prefix): the engines
	// keep prefix caches (Arrow §5.3's cost with the reference's
	// cooperative reuse).
	PrefixAware bool
}

// Request is what the core is told about a request in a fact. The core keeps
// no per-request table: each fact carries what it needs.
type Request struct {
	ID event.RequestID
	// InputTokens is the prompt length.
	InputTokens int
	// PrefillInst is where its prefill ran (facts after placement).
	PrefillInst event.Instance
	// ContextTokens is the request's resident context (prompt plus output
	// so far) when it leaves an instance.
	ContextTokens int64
	// NoDecode says the answer ended with its first token (PrefillDone):
	// there is no decode leg to place.
	NoDecode bool
	// PrefixGroup names the prompt's shared prefix (0 = none) and
	// PrefixTokens its length (Arrive).
	PrefixGroup  int64
	PrefixTokens int
	// OutputTokens is the output produced when the request ends (Finished).
	OutputTokens int
	// TTFT and TPOT are the request's measured latencies when it ends
	// (Finished), event.Never when undefined.
	TTFT, TPOT event.Time
}

// Observation is what a driver saw an engine do since its previous
// Observation: the decode iterations it ran and how long they took, and the
// decode context it holds now. The simulator reports it before each tick;
// the live router derives it from the token stream.
type Observation struct {
	// DecodeIters is the number of decode iterations (one token per running
	// stream each) since the last observation.
	DecodeIters int64
	// DecodeSeconds is their total duration, so DecodeSeconds/DecodeIters
	// is the mean inter-token gap of the streams there.
	DecodeSeconds float64
	// DecodeTokens is the resident decode context now (prompt plus output
	// so far, over every decode leg placed there).
	DecodeTokens int64
	// DecodeWaiting is the decode legs placed there that are not yet
	// generating (KV in flight or batch full).
	DecodeWaiting int
}

// Instance is the core's view of one engine, fed only by facts.
type Instance struct {
	Role    event.Role
	Profile timing.Profile
	// PrefillCount, PrefillTokens and PrefillWork describe the prompts placed
	// here whose prefill has not finished: how many, their tokens, and the
	// sum of their profiled prefill times T(n) in seconds.
	PrefillCount  int
	PrefillTokens int64
	PrefillWork   float64
	// DecodeCount and DecodeTokens describe the decode legs resident here:
	// how many and their context tokens (last observed, plus placements
	// since, minus what finished since).
	DecodeCount  int
	DecodeTokens int64
	// DecodeWaiting is the decode legs not yet generating, last observed.
	DecodeWaiting int

	// Monitor windows (Arrow §5.5): the interval-average of resident
	// prefill work and the mean decode gap, published at each Roll.
	priceIntegral float64    // ∫ PrefillWork dt since windowStart, s·s
	priceAnchor   event.Time // last time PrefillWork changed
	windowStart   event.Time
	gapSecs       float64
	gapIters      int64
	// MeanPrefillWork is the published interval-average of PrefillWork, s.
	MeanPrefillWork float64
	// MeanInterval is the published mean decode gap, s (0 when none seen;
	// a quiet interval keeps the previous value).
	MeanInterval float64

	// OfflineUntil: the instance takes no new placements before this time
	// (cold-swap emulation); zero when online.
	OfflineUntil event.Time
	// LastMove is when its role last changed (event.Never if never... 0
	// counts as never moved at start).
	LastMove event.Time
	// Moved reports whether it ever changed role.
	Moved bool
	// Pinned instances are never moved by a controller.
	Pinned bool
}

// Online reports whether the instance takes new placements at now.
func (in *Instance) Online(now event.Time) bool { return now >= in.OfflineUntil }

// MaxTokens is MT for the instance at the core's TPOT SLO (Arrow §5.3).
func (c *Core) MaxTokens(i event.Instance) float64 {
	return c.inst[i].Profile.MaxTokens(c.slo.TPOT)
}

func (in *Instance) touchPrice(now event.Time) {
	in.priceIntegral += in.PrefillWork * (now - in.priceAnchor).Seconds()
	in.priceAnchor = now
}

// Roll closes the monitor's update interval (Arrow §5.5): it publishes each
// instance's mean resident prefill work and mean decode gap over the
// interval, and opens the next one. Controllers call it once per pass.
func (c *Core) Roll() {
	now := c.now
	for i := range c.inst {
		in := &c.inst[i]
		in.touchPrice(now)
		if span := (now - in.windowStart).Seconds(); span > 0 {
			in.MeanPrefillWork = in.priceIntegral / span
		}
		in.priceIntegral, in.windowStart = 0, now
		if in.gapIters > 0 {
			in.MeanInterval = in.gapSecs / float64(in.gapIters)
		}
		in.gapSecs, in.gapIters = 0, 0
	}
}

// Observe records what an engine did since its last observation.
func (c *Core) Observe(now event.Time, inst event.Instance, o Observation) {
	c.advance(now)
	in := &c.inst[inst]
	in.gapSecs += o.DecodeSeconds
	in.gapIters += o.DecodeIters
	in.DecodeTokens = o.DecodeTokens
	in.DecodeWaiting = o.DecodeWaiting
}

// DecisionKind says what a Decision asks the driver to do.
type DecisionKind uint8

// Decision kinds.
const (
	// PlacePrefill: run Req's prefill on Inst.
	PlacePrefill DecisionKind = iota + 1
	// PlaceDecode: run Req's decode on Inst.
	PlaceDecode
	// Refuse: refuse Req with Cause (the router answers it at once).
	Refuse
	// Fail: the request fails with Cause (an error response).
	Fail
	// Move: Inst's role changed From -> To; new placements follow it,
	// resident work finishes where it is.
	Move
)

// Decision is one output of the core.
type Decision struct {
	Kind     DecisionKind
	Req      event.RequestID
	Inst     event.Instance
	From, To event.Role
	Cause    event.Cause
}

// Core is the scheduling state machine. Feed it facts with Arrive,
// PrefillDone, Finished and Tick; after each, read Decisions and Records.
// Times passed in must never go back.
type Core struct {
	inst    []Instance
	slo     SLO
	ctrl    Controller
	now     event.Time
	out     []Decision
	scratch []event.Instance
	// affinity remembers, per prefix group, the instance that last took a
	// prompt of it and the prefix length, when PrefixAware; bounded FIFO.
	affinity map[int64]affinity
	affRing  []int64
	affNext  int
	records  []event.Record
}

// New builds a core for cfg driven by ctrl. ctrl sets the opening roles.
func New(cfg Config, ctrl Controller) (*Core, error) {
	if len(cfg.Profiles) == 0 {
		return nil, errors.New("core: no instances: expected at least one profile")
	}
	if err := cfg.SLO.Validate(); err != nil {
		return nil, fmt.Errorf("core: slo: %w", err)
	}
	if cfg.Pinned != nil && len(cfg.Pinned) != len(cfg.Profiles) {
		return nil, fmt.Errorf("core: %d pin flags for %d instances: expected one per instance", len(cfg.Pinned), len(cfg.Profiles))
	}
	c := &Core{slo: cfg.SLO, ctrl: ctrl}
	if cfg.PrefixAware {
		c.affinity = make(map[int64]affinity)
		c.affRing = make([]int64, 0, affinityCap)
	}
	c.inst = make([]Instance, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		c.inst[i] = Instance{Role: event.RoleDecode, Profile: p, Pinned: cfg.Pinned != nil && cfg.Pinned[i]}
	}
	if err := ctrl.Init(c); err != nil {
		return nil, fmt.Errorf("core: %s: %w", ctrl.Name(), err)
	}
	// The opening roles are role-move records from RoleNone, so a journal
	// alone tells the split at every instant.
	for i := range c.inst {
		c.records = append(c.records, event.Record{Kind: event.KindRoleMove, Inst: event.Instance(i),
			Peer: event.NoInstance, From: event.RoleNone, To: c.inst[i].Role, Text: "opening role"})
	}
	return c, nil
}

// Now is the time of the latest fact.
func (c *Core) Now() event.Time { return c.now }

// SLO returns the objectives.
func (c *Core) SLO() SLO { return c.slo }

// Instances returns the fleet view; controllers read it, never write it.
func (c *Core) Instances() []Instance { return c.inst }

// Count returns how many instances hold role r.
func (c *Core) Count(r event.Role) int {
	n := 0
	for i := range c.inst {
		if c.inst[i].Role == r {
			n++
		}
	}
	return n
}

// Controller returns the controller driving the core.
func (c *Core) Controller() Controller { return c.ctrl }

func (c *Core) advance(now event.Time) {
	if now < c.now {
		panic(fmt.Sprintf("core: time went back from %v to %v", c.now, now))
	}
	c.now = now
}

// Decisions returns the decisions made since the last call and forgets them.
// The slice is valid until the next fact.
func (c *Core) Decisions() []Decision {
	d := c.out
	c.out = c.out[:0]
	return d
}

// Records returns the records (decisions, role moves) produced since the last
// call and forgets them. The slice is valid until the next fact.
func (c *Core) Records() []event.Record {
	r := c.records
	c.records = c.records[:0]
	return r
}

// Arrive places a new request's prefill, or refuses it.
func (c *Core) Arrive(now event.Time, r Request) {
	c.advance(now)
	if o, ok := c.ctrl.(arrivalObserver); ok {
		o.Arrived(c, r)
	}
	inst, cause := c.ctrl.PlacePrefill(c, r)
	if inst == event.NoInstance {
		kind := Refuse
		if cause == event.CauseUnavailable {
			kind = Fail
		}
		c.out = append(c.out, Decision{Kind: kind, Req: r.ID, Inst: event.NoInstance, Cause: cause})
		return
	}
	c.remember(r, inst)
	in := &c.inst[inst]
	in.touchPrice(now)
	// Resident work is priced at the full T(n), cache or not (as the
	// reference prices residents): conservative for prompts that hit.
	in.PrefillCount++
	in.PrefillTokens += int64(r.InputTokens)
	in.PrefillWork += in.Profile.Prefill(r.InputTokens)
	c.out = append(c.out, Decision{Kind: PlacePrefill, Req: r.ID, Inst: inst})
}

// PrefillDone records that r's prefill finished on r.PrefillInst (its first
// token exists) and places its decode leg.
func (c *Core) PrefillDone(now event.Time, r Request) {
	c.advance(now)
	in := &c.inst[r.PrefillInst]
	in.touchPrice(now)
	in.PrefillCount--
	in.PrefillTokens -= int64(r.InputTokens)
	in.PrefillWork -= in.Profile.Prefill(r.InputTokens)
	if in.PrefillCount == 0 { // forget float drift
		in.PrefillWork, in.PrefillTokens = 0, 0
	}
	if o, ok := c.ctrl.(finishObserver); ok && r.NoDecode {
		o.Finished(c, r)
	}
	if r.NoDecode {
		return
	}
	d := c.ctrl.PlaceDecode(c, r)
	dst := &c.inst[d]
	dst.DecodeCount++
	dst.DecodeTokens += int64(r.InputTokens) + 1
	cause := event.CauseNone
	if d != r.PrefillInst {
		cause = event.CauseCrossed
	}
	c.out = append(c.out, Decision{Kind: PlaceDecode, Req: r.ID, Inst: d, Cause: cause})
}

// Finished records that r's decode leg on inst ended (finished, failed or
// expired). r.InputTokens must be what Arrive was told.
func (c *Core) Finished(now event.Time, inst event.Instance, r Request) {
	c.advance(now)
	in := &c.inst[inst]
	in.DecodeCount--
	in.DecodeTokens = max(0, in.DecodeTokens-r.ContextTokens)
	if in.DecodeCount == 0 {
		in.DecodeTokens = 0
	}
	if o, ok := c.ctrl.(finishObserver); ok {
		o.Finished(c, r)
	}
}

// arrivalObserver is implemented by controllers that watch every arrival.
type arrivalObserver interface{ Arrived(c *Core, r Request) }

// finishObserver is implemented by controllers that watch every ending.
type finishObserver interface{ Finished(c *Core, r Request) }

// Tick lets the controller act on time passing.
func (c *Core) Tick(now event.Time) {
	c.advance(now)
	c.ctrl.Tick(c)
}

// NextTick is when the controller next wants Tick, or event.Never.
func (c *Core) NextTick() event.Time { return c.ctrl.NextTick() }

// Move relabels inst to role to on behalf of the controller, recording the
// move with its cause and reason. Resident work stays where it is (Arrow
// §5.2: a role is only a label for new placements). A pinned instance is
// never moved.
func (c *Core) Move(inst event.Instance, to event.Role, cause event.Cause, reason string) {
	in := &c.inst[inst]
	from := in.Role
	if from == to || in.Pinned {
		return
	}
	in.Role = to
	in.LastMove, in.Moved = c.now, true
	c.out = append(c.out, Decision{Kind: Move, Inst: inst, From: from, To: to, Cause: cause})
	c.records = append(c.records, event.Record{
		At: c.now, Kind: event.KindRoleMove, Inst: inst, Peer: event.NoInstance,
		From: from, To: to, Cause: cause, Tokens: in.DecodeTokens,
		Ref: event.Seconds(in.PrefillWork), Text: reason,
	})
}

// SetRole sets inst's opening role without recording a move; only
// Controller.Init may call it.
func (c *Core) SetRole(inst event.Instance, r event.Role) { c.inst[inst].Role = r }

// Decide records a controller decision; text is its explanation (JSON).
func (c *Core) Decide(text string) {
	c.records = append(c.records, event.Record{At: c.now, Kind: event.KindDecision,
		Inst: event.NoInstance, Peer: event.NoInstance, Text: text})
}

// affinity is where a prefix group was last prefilled.
type affinity struct {
	inst   event.Instance
	tokens int
}

// affinityCap bounds the groups remembered.
const affinityCap = 1 << 16

// remember records that r's prefix group is now cached on inst.
func (c *Core) remember(r Request, inst event.Instance) {
	if c.affinity == nil || r.PrefixGroup == 0 || r.PrefixTokens <= 0 {
		return
	}
	if _, ok := c.affinity[r.PrefixGroup]; !ok {
		if len(c.affRing) < affinityCap {
			c.affRing = append(c.affRing, r.PrefixGroup)
		} else {
			delete(c.affinity, c.affRing[c.affNext])
			c.affRing[c.affNext] = r.PrefixGroup
			c.affNext = (c.affNext + 1) % affinityCap
		}
	}
	c.affinity[r.PrefixGroup] = affinity{inst: inst, tokens: r.PrefixTokens}
}

// cachedOn returns how many of r's prompt tokens inst likely has cached.
func (c *Core) cachedOn(i event.Instance, r Request) int {
	if c.affinity == nil || r.PrefixGroup == 0 {
		return 0
	}
	if a, ok := c.affinity[r.PrefixGroup]; ok && a.inst == i {
		return min(a.tokens, r.PrefixTokens, r.InputTokens-1)
	}
	return 0
}
