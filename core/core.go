package core

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// ValidateSLO reports every objective of s that is not a positive duration.
func ValidateSLO(s event.SLO) error {
	var errs []error
	if s.TTFT <= 0 || s.TTFT == event.Never {
		errs = append(errs, fmt.Errorf("ttft: %v: expected a positive duration", s.TTFT))
	}
	if s.TPOT <= 0 || s.TPOT == event.Never {
		errs = append(errs, fmt.Errorf("tpot: %v: expected a positive duration", s.TPOT))
	}
	return errors.Join(errs...)
}

// Config is what a Core needs to know about its fleet.
type Config struct {
	// Profiles holds one timing profile per instance, in registration order.
	Profiles []timing.Profile
	// SLO is the objective placements are priced against.
	SLO event.SLO
	// Pinned marks instances no controller may move (nil: none). Their
	// opening role is still the controller's choice.
	Pinned []bool
	// PrefixAware prices a prompt's prefill on the instance that last
	// prefilled its prefix group as T(n) − T(shared prefix): the engines
	// keep prefix caches (Arrow §5.3's cost with the reference's
	// cooperative reuse).
	PrefixAware bool
	// Admission gates arrivals on their priced TTFT (default: open).
	Admission Admission
	// Opening, when set (one role per instance), replaces the roles the
	// controller opens with: a standby router taking over resumes the
	// split its leader published. The controller's Init still runs (its
	// own state opens as usual); nil leaves the controller's choice, so
	// simulations are unchanged.
	Opening []event.Role
}

// Request is what the core is told about a request in a fact. The core keeps
// no per-request table: each fact carries what it needs.
type Request struct {
	ID event.RequestID
	// InputTokens is the prompt length.
	InputTokens int
	// PrefillInst is where its prefill ran (facts after placement).
	PrefillInst event.Instance
	// DecodeInst is where its decode leg was placed (Cancel at StageDecode).
	DecodeInst event.Instance
	// ContextTokens is the request's resident context (prompt plus output
	// so far) when it leaves an instance.
	ContextTokens int64
	// NoDecode says the answer ended with its first token (PrefillDone):
	// there is no decode leg to place.
	NoDecode bool
	// Local says the engine that ran the prefill runs the decode too, as
	// one ordinary request (PrefillDone): the live router's aggregated
	// engines and a decode engine absorbing a spilled prompt.
	Local bool
	// Whole is Local for a request that must not be split whatever the
	// engine's role: it asks for its prompt's logprobs, which only the
	// engine that computed the prompt has (a decode engine fed the KV
	// computes none). Its decode is placed with cause whole.
	Whole bool
	// PrefixGroup names the prompt's shared prefix (0 = none) and
	// PrefixTokens its length (Arrive).
	PrefixGroup  int64
	PrefixTokens int
	// CacheGroup and CacheTokens, when CacheGroup is not 0, are a group
	// and length the prompt leaves cached where it is prefilled besides its
	// prefix group (an imported Mooncake prompt's whole path of full
	// blocks, the prefix of its next turn): remembered as its prefix group
	// is (Arrive).
	CacheGroup  int64
	CacheTokens int
	// CachedOn and CachedTokens, when CachedTokens > 0, say where the
	// driver knows the prompt's longest cached prefix to be and how long
	// it is (the live router's block index, read from the prompts'
	// text): placement then prices that instance's prefill with it and
	// every other's in full, instead of asking the group's remembered
	// instance. The simulator leaves them zero.
	CachedOn     event.Instance
	CachedTokens int
	// OutputTokens is the output produced when the request ends (Finished).
	OutputTokens int
	// TTFT and TPOT are the request's measured latencies when it ends
	// (Finished), event.Never when undefined.
	TTFT, TPOT event.Time
}

// Stage says how far a request had got when it was cancelled or expired:
// which resident work the core must release.
type Stage uint8

// Stages of a request's life, for Cancel.
const (
	// StageQueued: not placed yet; nothing is resident.
	StageQueued Stage = iota
	// StagePrefill: its prefill was placed on PrefillInst and has not
	// finished.
	StagePrefill
	// StageDecode: its decode leg was placed on DecodeInst.
	StageDecode
)

// DefaultObserveEvery is how stale the drivers let the core's view of the
// engines (Observation) get before they feed it a request to place: the
// simulator and the live router observe every engine at the controller's
// ticks and, before an arrival or a finished prefill, when the last
// observation is this old. Between observations the core's decode context
// counts placements and endings only, not the tokens generated, so it
// falls behind the engines' with every answer; placed only at ticks, a
// controller that never ticks (a static split) placed decode legs on a
// view that had drifted for the whole run (issue 10, twenty-seventh round).
const DefaultObserveEvery = event.Second

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
	// prefill work and the mean decode gap, published at each roll.
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
	// (a role move that takes time, such as a cold swap or a worker
	// start); zero when online.
	OfflineUntil event.Time
	// offListed says the instance is in View.offline (index.go).
	offListed bool
	// Down: the driver reported the engine down (EngineDown); it takes no
	// placements until EngineUp.
	Down bool
	// Generation is the engine process's generation, from EngineUp (0
	// until the driver reports one).
	Generation uint64
	// LastMove is when its role last changed.
	LastMove event.Time
	// Moved reports whether it ever changed role.
	Moved bool
	// Pinned instances are never moved by a controller.
	Pinned bool
	// cover is the move coverRole made when this engine went down, undone
	// when it comes back (Core.uncover).
	cover coverMove

	mt float64 // Profile.MaxTokens at the TPOT SLO (both fixed at New)
}

// Online reports whether the instance takes new placements at now.
func (in *Instance) Online(now event.Time) bool { return now >= in.OfflineUntil && !in.Down }

func (in *Instance) touchPrice(now event.Time) {
	in.priceIntegral += in.PrefillWork * (now - in.priceAnchor).Seconds()
	in.priceAnchor = now
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
	// Move: Inst's role changed From -> To; new placements follow it from
	// ReadyAt, resident work finishes where it is.
	Move
	// Queue: Req waits in the admission queue (Depth requests long,
	// itself included); a later PlacePrefill or Expire ends the wait.
	Queue
	// Expire: Req left the admission queue unplaced with Cause (its
	// deadline passed).
	Expire
)

// Decision is one output of the core.
type Decision struct {
	Kind     DecisionKind
	Req      event.RequestID
	Inst     event.Instance
	From, To event.Role
	Cause    event.Cause
	// ReadyAt is when a moved engine serves its new role (Move): the
	// move's time for a relabel, later for a cold swap or a worker start.
	ReadyAt event.Time
	// Depth is the admission queue's length (Queue).
	Depth int
}

// Ready is what the core produced since the driver last asked: decisions
// to carry out, records to journal, and when it next wants a Tick. The
// slices are valid until the next fact.
type Ready struct {
	Decisions []Decision
	Records   []event.Record
	// NextTick is when the controller next wants Tick, or event.Never.
	NextTick event.Time
}

// ErrClockBack is returned (wrapped) by a fact stamped before the previous
// one: the core's clock never goes back.
var ErrClockBack = errors.New("time went back")

// View is what a controller sees of the core: the fleet, the clock and the
// SLO, read-only, plus the two ways a controller acts: Move and Decide,
// which the core turns into decisions and records. Controllers are handed
// a *View and never the *Core, so they cannot feed facts or change state
// any other way.
type View struct {
	inst    []Instance
	slo     event.SLO
	ttftS   float64 // slo.TTFT in seconds
	tpotS   float64 // slo.TPOT in seconds
	now     event.Time
	out     []Decision
	records []event.Record
	scratch []event.Instance
	// idx is the placement index (index.go), nil when the fleet does not
	// qualify; idxTried says it was built or refused. downs counts down
	// instances: the indexes apply only while it is 0.
	idx      *placeIndex
	idxTried bool
	// aidx is the least-loaded index (argindex.go), built per key on its
	// first use.
	aidx  *argIndex
	downs int
	// offline lists the instances whose index leaves were written while
	// they were offline (a move's ReadyAt ahead): settleOffline writes
	// them again once the clock reaches it.
	offline []event.Instance
	offNext event.Time // the earliest OfflineUntil among them
	// affinity remembers, per prefix group, the instance that last took a
	// prompt of it and the prefix length, when PrefixAware; bounded FIFO.
	affinity map[int64]affinity
	affRing  []int64
	affNext  int
	// opening is true while Controller.Init runs: SetRole is allowed.
	opening bool
	// resumed: the opening roles are Config.Opening's (a standby router
	// resuming its leader's split), not the controller's own choice.
	resumed bool
	// fleet holds the fleet's resident totals (sums.go), kept by touch.
	fleet fleetTotals
}

// Core is the scheduling state machine a driver owns. Feed it facts
// (Arrive, PrefillDone, Finished, Cancel, EngineDown, EngineUp, Observe,
// Tick), each stamped with a time that never goes back; after each, read
// Ready. A fact that cannot be applied returns an error and changes
// nothing.
type Core struct {
	v        View
	adm      admission
	ctrl     Controller
	arrivals arrivalObserver // ctrl, when it watches arrivals
	finishes finishObserver  // ctrl, when it watches endings
	// avoid is, per re-placed request, the engine its failed leg ran on
	// (Replace); its next legs go elsewhere.
	avoid map[event.RequestID]event.Instance
}

// New builds a core for cfg driven by ctrl. ctrl sets the opening roles.
func New(cfg Config, ctrl Controller) (*Core, error) {
	if len(cfg.Profiles) == 0 {
		return nil, errors.New("core: no instances: expected at least one profile")
	}
	if err := ValidateSLO(cfg.SLO); err != nil {
		return nil, fmt.Errorf("core: slo: %w", err)
	}
	if cfg.Pinned != nil && len(cfg.Pinned) != len(cfg.Profiles) {
		return nil, fmt.Errorf("core: %d pin flags for %d instances: expected one per instance", len(cfg.Pinned), len(cfg.Profiles))
	}
	if a := cfg.Admission; a.Mode > AdmitQueue || a.Margin < 0 || a.Deadline < 0 || a.Depth < 0 {
		return nil, fmt.Errorf("core: admission %+v: expected mode open or queue, margin, deadline and depth >= 0", a)
	}
	c := &Core{ctrl: ctrl}
	c.adm.cfg = cfg.Admission
	if c.adm.cfg.Deadline == 0 {
		c.adm.cfg.Deadline = cfg.SLO.TTFT
	}
	c.adm.budget = cfg.SLO.TTFT.Seconds() * (1 + cfg.Admission.Margin)
	c.arrivals, _ = ctrl.(arrivalObserver)
	c.finishes, _ = ctrl.(finishObserver)
	v := &c.v
	v.slo, v.ttftS, v.tpotS = cfg.SLO, cfg.SLO.TTFT.Seconds(), cfg.SLO.TPOT.Seconds()
	if cfg.PrefixAware {
		v.affinity = make(map[int64]affinity)
		v.affRing = make([]int64, 0, affinityCap)
	}
	v.inst = make([]Instance, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		v.inst[i] = Instance{Role: event.RoleDecode, Profile: p, Pinned: cfg.Pinned != nil && cfg.Pinned[i], mt: p.MaxTokens(v.tpotS)}
	}
	if cfg.Opening != nil {
		if len(cfg.Opening) != len(cfg.Profiles) {
			return nil, fmt.Errorf("core: %d opening roles for %d instances: expected one per instance", len(cfg.Opening), len(cfg.Profiles))
		}
		for i, r := range cfg.Opening {
			if r > event.RoleMixed {
				return nil, fmt.Errorf("core: opening role %d of instance %d: expected none, prefill, decode or mixed", r, i)
			}
		}
	}
	v.opening, v.resumed = true, cfg.Opening != nil
	err := ctrl.Init(v)
	for i, r := range cfg.Opening {
		v.inst[i].Role = r
		v.touch(event.Instance(i))
	}
	v.opening = false
	if err != nil {
		return nil, fmt.Errorf("core: %s: %w", ctrl.Name(), err)
	}
	// The opening roles are role-move records from RoleNone, so a journal
	// alone tells the split at every instant.
	for i := range v.inst {
		v.records = append(v.records, event.Record{Kind: event.KindRoleMove, Inst: event.Instance(i),
			Peer: event.NoInstance, From: event.RoleNone, To: v.inst[i].Role, Text: "opening role"})
	}
	return c, nil
}

// View returns the controller's view of the fleet (read it only).
func (c *Core) View() *View { return &c.v }

// Now is the time of the latest fact.
func (c *Core) Now() event.Time { return c.v.now }

// Controller returns the controller driving the core.
func (c *Core) Controller() Controller { return c.ctrl }

// advance moves the clock to now, or reports that now is in its past.
func (c *Core) advance(now event.Time) error {
	if now < c.v.now {
		return fmt.Errorf("core: %w: from %v to %v", ErrClockBack, c.v.now, now)
	}
	c.v.now = now
	return nil
}

// Decide journals a decision taken outside the core (the live router's
// cordons) at now, which must not be before the core's clock: the View's
// Decide stamps the core's last time, which can lie behind records the
// driver has journaled since.
func (c *Core) Decide(now event.Time, payload any) error {
	if err := c.advance(now); err != nil {
		return err
	}
	c.v.Decide(payload)
	return nil
}

// inst checks a fact's instance index.
func (c *Core) instance(fact string, i event.Instance) (*Instance, error) {
	if i < 0 || int(i) >= len(c.v.inst) {
		return nil, fmt.Errorf("core: %s: instance %d: expected 0..%d", fact, i, len(c.v.inst)-1)
	}
	return &c.v.inst[i], nil
}

// Ready returns what the core produced since the last call and forgets it.
func (c *Core) Ready() Ready {
	rd := Ready{Decisions: c.v.out, Records: c.v.records, NextTick: min(c.ctrl.NextTick(), c.adm.nextDeadline())}
	c.v.out, c.v.records = c.v.out[:0], c.v.records[:0]
	return rd
}

// Arrive places a new request's prefill, or refuses it.
func (c *Core) Arrive(now event.Time, r Request) error {
	if err := c.advance(now); err != nil {
		return err
	}
	v := &c.v
	if c.arrivals != nil {
		c.arrivals.Arrived(v, r)
	}
	if c.adm.cfg.Mode == AdmitQueue && c.adm.len() > 0 {
		// First come, first served: nobody jumps the queue.
		c.enqueue(now, r)
		return nil
	}
	c.admit(now, r, false)
	return nil
}

// admit asks the controller where r's prefill runs and, under the queue
// gate, prices it there: placed within the budget, refused when its own
// prefill alone breaks the budget, else queued (or, from the queue, left
// there: admit reports false).
func (c *Core) admit(now event.Time, r Request, queued bool) bool {
	v := &c.v
	inst, cause := c.ctrl.PlacePrefill(v, r)
	if inst != event.NoInstance && c.placeableDown(inst, r.ID) {
		// Every engine that could take it is down (the pool fell back to
		// them): fail it rather than send a leg to a dead engine.
		inst, cause = event.NoInstance, event.CauseUnavailable
	}
	if inst == event.NoInstance {
		kind := Refuse
		if cause == event.CauseUnavailable {
			kind = Fail
		}
		v.out = append(v.out, Decision{Kind: kind, Req: r.ID, Inst: event.NoInstance, Cause: cause})
		return true
	}
	if c.adm.cfg.Mode == AdmitQueue {
		switch priced, own := v.price(inst, r); {
		case own > c.adm.budget:
			v.out = append(v.out, Decision{Kind: Refuse, Req: r.ID, Inst: event.NoInstance, Cause: event.CausePrompt})
			return true
		case priced > c.adm.budget:
			if !queued {
				c.enqueue(now, r)
			}
			return false
		}
	}
	c.place(now, r, inst, cause)
	return true
}

// enqueue puts r at the back of the admission queue, or refuses it when
// the queue is full.
func (c *Core) enqueue(now event.Time, r Request) {
	v := &c.v
	if d := c.adm.cfg.Depth; d > 0 && c.adm.len() >= d {
		v.out = append(v.out, Decision{Kind: Refuse, Req: r.ID, Inst: event.NoInstance, Cause: event.CauseOverload})
		return
	}
	c.adm.queue = append(c.adm.queue, waiting{r: r, deadline: now + c.adm.cfg.Deadline})
	v.out = append(v.out, Decision{Kind: Queue, Req: r.ID, Inst: event.NoInstance, Depth: c.adm.len()})
}

// drain admits from the head of the queue while the head's price fits,
// and expires heads whose deadline passed.
func (c *Core) drain(now event.Time) {
	for c.adm.len() > 0 {
		w := c.adm.queue[c.adm.head]
		if now >= w.deadline {
			c.adm.pop()
			c.v.out = append(c.v.out, Decision{Kind: Expire, Req: w.r.ID, Inst: event.NoInstance, Cause: event.CauseQueueTimeout})
			continue
		}
		if !c.admit(now, w.r, true) {
			return // head-of-line: the queue stays in arrival order
		}
		c.adm.pop()
	}
}

// place puts r's prefill on inst; cause says why when it is not the
// placement's own pool (CauseSpilled: a decode engine absorbs the prompt).
func (c *Core) place(now event.Time, r Request, inst event.Instance, cause event.Cause) {
	v := &c.v
	v.remember(r, inst)
	in := &v.inst[inst]
	in.touchPrice(now)
	// Resident work is priced at the full T(n), cache or not (as the
	// reference prices residents): conservative for prompts that hit.
	in.PrefillCount++
	in.PrefillTokens += int64(r.InputTokens)
	in.PrefillWork += in.Profile.Prefill(r.InputTokens)
	v.touch(inst)
	v.out = append(v.out, Decision{Kind: PlacePrefill, Req: r.ID, Inst: inst, Cause: cause})
}

// releasePrefill forgets r's resident prefill on in.
func (in *Instance) releasePrefill(now event.Time, r Request) {
	in.touchPrice(now)
	in.PrefillCount--
	in.PrefillTokens -= int64(r.InputTokens)
	in.PrefillWork -= in.Profile.Prefill(r.InputTokens)
	if in.PrefillCount <= 0 { // forget float drift
		in.PrefillCount, in.PrefillWork, in.PrefillTokens = 0, 0, 0
	}
}

// releaseDecode forgets r's resident decode leg on in.
func (in *Instance) releaseDecode(r Request) {
	in.DecodeCount--
	in.DecodeTokens = max(0, in.DecodeTokens-r.ContextTokens)
	if in.DecodeCount <= 0 {
		in.DecodeCount, in.DecodeTokens = 0, 0
	}
}

// PrefillDone records that r's prefill finished on r.PrefillInst (its first
// token exists) and places its decode leg.
func (c *Core) PrefillDone(now event.Time, r Request) error {
	in, err := c.instance("prefill done", r.PrefillInst)
	if err != nil {
		return err
	}
	if err := c.advance(now); err != nil {
		return err
	}
	v := &c.v
	in.releasePrefill(now, r)
	v.touch(r.PrefillInst)
	c.drain(now)
	if r.NoDecode {
		if c.finishes != nil {
			c.finishes.Finished(v, r)
		}
		return nil
	}
	var d event.Instance
	a, avoided := c.avoid[r.ID]
	switch {
	case r.Local || r.Whole:
		// One ordinary request on one engine: it decodes where it ran.
		d = r.PrefillInst
	case avoided:
		down := v.inst[a].Down
		v.setDown(a, true)
		d = c.ctrl.PlaceDecode(v, r)
		v.setDown(a, down)
	default:
		d = c.ctrl.PlaceDecode(v, r)
	}
	// A request that decodes where its prompt ran (one engine serving it
	// whole, or a stay) keeps that engine when it was cordoned meanwhile
	// (down to new placements); one that failed has its leg ended by the
	// driver.
	if d != r.PrefillInst && c.placeableDown(d, r.ID) {
		c.forget(r.ID)
		v.out = append(v.out, Decision{Kind: Fail, Req: r.ID, Inst: event.NoInstance, Cause: event.CauseUnavailable})
		return nil
	}
	c.forget(r.ID)
	dst := &v.inst[d]
	dst.DecodeCount++
	dst.DecodeTokens += int64(r.InputTokens) + 1
	v.touch(d)
	cause := event.CauseNone
	switch {
	case d != r.PrefillInst:
		cause = event.CauseCrossed
	case r.Whole:
		cause = event.CauseWhole
	}
	v.out = append(v.out, Decision{Kind: PlaceDecode, Req: r.ID, Inst: d, Cause: cause})
	return nil
}

// Finished records that r's decode leg on inst ended (finished, failed or
// expired). r.InputTokens must be what Arrive was told.
func (c *Core) Finished(now event.Time, inst event.Instance, r Request) error {
	in, err := c.instance("finished", inst)
	if err != nil {
		return err
	}
	if err := c.advance(now); err != nil {
		return err
	}
	in.releaseDecode(r)
	c.v.touch(inst)
	c.forget(r.ID)
	if c.finishes != nil {
		c.finishes.Finished(&c.v, r)
	}
	return nil
}

// Cancel records that r ended early (the client went away, a deadline
// passed, an engine failed it) at stage: the core releases what r held
// there (its resident prefill on r.PrefillInst, or its decode leg on
// r.DecodeInst with r.ContextTokens). Controllers are not told: they
// watch completions, and a cancelled request completed nothing.
func (c *Core) Cancel(now event.Time, r Request, stage Stage) error {
	var in *Instance
	var err error
	switch stage {
	case StageQueued:
	case StagePrefill:
		in, err = c.instance("cancel at prefill", r.PrefillInst)
	case StageDecode:
		in, err = c.instance("cancel at decode", r.DecodeInst)
	default:
		err = fmt.Errorf("core: cancel: stage %d: expected queued, prefill or decode", stage)
	}
	if err != nil {
		return err
	}
	if err := c.advance(now); err != nil {
		return err
	}
	c.forget(r.ID)
	switch stage {
	case StageQueued:
		c.adm.remove(r.ID)
	case StagePrefill:
		in.releasePrefill(now, r)
		c.v.touch(r.PrefillInst)
		c.drain(now)
	case StageDecode:
		in.releaseDecode(r)
		c.v.touch(r.DecodeInst)
	}
	return nil
}

// EngineDown records that inst stopped answering: it takes no placements
// until EngineUp. Work resident there is the driver's to end, each request
// with its own Cancel. The core journals the change.
func (c *Core) EngineDown(now event.Time, inst event.Instance, cause event.Cause) error {
	in, err := c.instance("engine down", inst)
	if err != nil {
		return err
	}
	if err := c.advance(now); err != nil {
		return err
	}
	if in.Down {
		return nil
	}
	c.v.setDown(inst, true)
	c.v.records = append(c.v.records, event.Record{At: now, Kind: event.KindHealth, Inst: inst,
		Peer: event.NoInstance, Tokens: int64(in.Generation), Cause: cause, Text: "down"})
	c.coverRole(inst)
	return nil
}

// EngineUp records that inst answers again, as process generation gen: it
// takes placements again in the role it holds, and an engine moved to
// cover its role while it was down goes back (Core.uncover). The core
// journals the change.
func (c *Core) EngineUp(now event.Time, inst event.Instance, gen uint64) error {
	return c.EngineUpBy(now, inst, gen, event.CauseEngineUp)
}

// EngineUpBy is EngineUp journaled with another cause: an operator
// returning a cordoned engine to service (event.CauseOperator), where
// EngineDown took it out with the same cause.
func (c *Core) EngineUpBy(now event.Time, inst event.Instance, gen uint64, cause event.Cause) error {
	in, err := c.instance("engine up", inst)
	if err != nil {
		return err
	}
	if err := c.advance(now); err != nil {
		return err
	}
	if !in.Down && in.Generation == gen {
		return nil
	}
	c.v.setDown(inst, false)
	in.Generation = gen
	c.v.records = append(c.v.records, event.Record{At: now, Kind: event.KindHealth, Inst: inst,
		Peer: event.NoInstance, Tokens: int64(gen), Cause: cause, Text: "up"})
	c.uncover(inst)
	c.drain(now)
	return nil
}

// Observe records what an engine did since its last observation.
func (c *Core) Observe(now event.Time, inst event.Instance, o Observation) error {
	in, err := c.instance("observe", inst)
	if err != nil {
		return err
	}
	if err := c.advance(now); err != nil {
		return err
	}
	in.gapSecs += o.DecodeSeconds
	in.gapIters += o.DecodeIters
	in.DecodeTokens = o.DecodeTokens
	in.DecodeWaiting = o.DecodeWaiting
	c.v.touch(inst)
	return nil
}

// arrivalObserver is implemented by controllers that watch every arrival.
type arrivalObserver interface{ Arrived(v *View, r Request) }

// finishObserver is implemented by controllers that watch every ending.
type finishObserver interface{ Finished(v *View, r Request) }

// Tick lets the controller act on time passing. When the controller ran a
// monitoring pass, the core closes the monitor's interval (Arrow §5.5).
func (c *Core) Tick(now event.Time) error {
	if err := c.advance(now); err != nil {
		return err
	}
	if c.ctrl.Tick(&c.v) {
		c.v.roll()
	}
	c.drain(now)
	return nil
}

// Now is the time of the latest fact.
func (v *View) Now() event.Time { return v.now }

// SLO returns the objectives.
func (v *View) SLO() event.SLO { return v.slo }

// N is the number of instances.
func (v *View) N() int { return len(v.inst) }

// Instance returns a copy of instance i's state.
func (v *View) Instance(i event.Instance) Instance { return v.inst[i] }

// Instances returns a copy of the fleet's state.
func (v *View) Instances() []Instance { return append([]Instance(nil), v.inst...) }

// Count returns how many instances hold role r.
func (v *View) Count(r event.Role) int {
	n := 0
	for i := range v.inst {
		if v.inst[i].Role == r {
			n++
		}
	}
	return n
}

// MaxTokens is MT for instance i at the TPOT SLO (Arrow §5.3).
func (v *View) MaxTokens(i event.Instance) float64 { return v.inst[i].mt }

// roll closes the monitor's update interval (Arrow §5.5): it publishes each
// instance's mean resident prefill work and mean decode gap over the
// interval, and opens the next one.
func (v *View) roll() {
	now := v.now
	for i := range v.inst {
		in := &v.inst[i]
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

// Move is a controller's decision to relabel inst to role to, serving it
// from readyAt (the current time for a hot swap; later when the move takes
// the engine offline). The core applies it at once and records it with its
// cause and reason. Resident work stays where it is (Arrow §5.2: a role is
// only a label for new placements). The engine takes no placements before
// readyAt (at least now). A pinned instance is never moved, nor one already
// in role to, nor, while an engine is down, the last online engine of its
// phase role (lastOnline); Move reports whether it moved.
func (v *View) Move(inst event.Instance, to event.Role, readyAt event.Time, cause event.Cause, reason string) bool {
	in := &v.inst[inst]
	from := in.Role
	if from == to || in.Pinned || v.lastOnline(inst, to) {
		return false
	}
	in.Role = to
	in.LastMove, in.Moved = v.now, true
	readyAt = max(readyAt, v.now)
	in.OfflineUntil = readyAt
	v.touch(inst)
	v.out = append(v.out, Decision{Kind: Move, Inst: inst, From: from, To: to, Cause: cause, ReadyAt: readyAt})
	v.records = append(v.records, event.Record{
		At: v.now, Kind: event.KindRoleMove, Inst: inst, Peer: event.NoInstance,
		From: from, To: to, Cause: cause, Tokens: in.DecodeTokens,
		Ref: event.Seconds(in.PrefillWork), Text: reason,
	})
	return true
}

// lastOnline reports whether moving inst to role to, while some engine is
// down, would leave a phase (prefill or decode) that inst serves now and
// to does not with no online engine serving it (a mixed engine serves
// both). No controller may do that (a controller's split counts the down
// engines in their roles; only covering the role, core/faults.go, moves
// engines for the down ones). With every engine up, a role's engines that
// are offline (moving) come back by themselves, and the controllers' own
// rules hold.
func (v *View) lastOnline(inst event.Instance, to event.Role) bool {
	in := &v.inst[inst]
	if v.downs == 0 || !in.Online(v.now) {
		return false
	}
	serves := func(r, phase event.Role) bool { return r == phase || r == event.RoleMixed }
	for _, phase := range []event.Role{event.RolePrefill, event.RoleDecode} {
		if !serves(in.Role, phase) || serves(to, phase) {
			continue
		}
		other := false
		for i := range v.inst {
			if o := &v.inst[i]; i != int(inst) && serves(o.Role, phase) && o.Online(v.now) {
				other = true
				break
			}
		}
		if !other {
			return true
		}
	}
	return false
}

// SetRole sets inst's opening role without recording a move; only
// Controller.Init may call it.
func (v *View) SetRole(inst event.Instance, r event.Role) {
	if !v.opening {
		panic("core: SetRole outside Controller.Init")
	}
	v.inst[inst].Role = r
	v.touch(inst)
}

// Decide records a controller decision: payload (a typed struct) is
// journaled as JSON.
func (v *View) Decide(payload any) {
	text, err := json.Marshal(payload)
	if err != nil {
		text, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	v.records = append(v.records, event.Record{At: v.now, Kind: event.KindDecision,
		Inst: event.NoInstance, Peer: event.NoInstance, Text: string(text)})
}

// affinity is where a prefix group was last prefilled.
type affinity struct {
	inst   event.Instance
	tokens int
}

// affinityCap bounds the groups remembered.
const affinityCap = 1 << 16

// remember records that r's prefix group (and the group it leaves
// cached besides, if any) is now cached on inst.
func (v *View) remember(r Request, inst event.Instance) {
	if v.affinity == nil {
		return
	}
	v.rememberGroup(r.PrefixGroup, r.PrefixTokens, inst)
	if r.CacheGroup != r.PrefixGroup {
		v.rememberGroup(r.CacheGroup, r.CacheTokens, inst)
	}
}

func (v *View) rememberGroup(group int64, tokens int, inst event.Instance) {
	if group == 0 || tokens <= 0 {
		return
	}
	if _, ok := v.affinity[group]; !ok {
		if len(v.affRing) < affinityCap {
			v.affRing = append(v.affRing, group)
		} else {
			delete(v.affinity, v.affRing[v.affNext])
			v.affRing[v.affNext] = group
			v.affNext = (v.affNext + 1) % affinityCap
		}
	}
	v.affinity[group] = affinity{inst: inst, tokens: tokens}
}

// cachedOn returns how many of r's prompt tokens inst likely has cached.
func (v *View) cachedOn(i event.Instance, r Request) int {
	if v.affinity == nil {
		return 0
	}
	if r.CachedTokens > 0 {
		if i == r.CachedOn {
			return min(r.CachedTokens, r.InputTokens-1)
		}
		return 0
	}
	if r.PrefixGroup == 0 {
		return 0
	}
	if a, ok := v.affinity[r.PrefixGroup]; ok && a.inst == i {
		return min(a.tokens, r.PrefixTokens, r.InputTokens-1)
	}
	return 0
}
