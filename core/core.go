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
	// how many and their context tokens at placement.
	DecodeCount  int
	DecodeTokens int64
}

// DecisionKind says what a Decision asks the driver to do.
type DecisionKind uint8

// Decision kinds.
const (
	// PlacePrefill: run Req's prefill on Inst.
	PlacePrefill DecisionKind = iota + 1
	// PlaceDecode: run Req's decode on Inst.
	PlaceDecode
	// Refuse: refuse Req with Cause.
	Refuse
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
	records []event.Record
}

// New builds a core for cfg driven by ctrl. ctrl sets the opening roles.
func New(cfg Config, ctrl Controller) (*Core, error) {
	if len(cfg.Profiles) == 0 {
		return nil, errors.New("core: no instances: expected at least one profile")
	}
	if err := cfg.SLO.Validate(); err != nil {
		return nil, fmt.Errorf("core: slo: %w", err)
	}
	c := &Core{slo: cfg.SLO, ctrl: ctrl}
	c.inst = make([]Instance, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		c.inst[i] = Instance{Role: event.RoleDecode, Profile: p}
	}
	if err := ctrl.Init(c); err != nil {
		return nil, fmt.Errorf("core: %s: %w", ctrl.Name(), err)
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
	inst, cause := c.ctrl.PlacePrefill(c, r)
	if inst == event.NoInstance {
		c.out = append(c.out, Decision{Kind: Refuse, Req: r.ID, Inst: event.NoInstance, Cause: cause})
		return
	}
	in := &c.inst[inst]
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
	in.PrefillCount--
	in.PrefillTokens -= int64(r.InputTokens)
	in.PrefillWork -= in.Profile.Prefill(r.InputTokens)
	if in.PrefillCount == 0 { // forget float drift
		in.PrefillWork, in.PrefillTokens = 0, 0
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
	in.DecodeTokens -= int64(r.InputTokens) + 1
	if in.DecodeCount == 0 {
		in.DecodeTokens = 0
	}
}

// Tick lets the controller act on time passing.
func (c *Core) Tick(now event.Time) {
	c.advance(now)
	c.ctrl.Tick(c)
}

// NextTick is when the controller next wants Tick, or event.Never.
func (c *Core) NextTick() event.Time { return c.ctrl.NextTick() }

// Move relabels inst to role to on behalf of the controller, recording the
// move with its cause and reason. Resident work stays where it is (Arrow
// §5.2: a role is only a label for new placements).
func (c *Core) Move(inst event.Instance, to event.Role, cause event.Cause, reason string) {
	in := &c.inst[inst]
	from := in.Role
	if from == to {
		return
	}
	in.Role = to
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
