package live

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// msgKind says what a handler tells the owner.
type msgKind uint8

const (
	msgArrive     msgKind = iota + 1 // a request arrived: place its prefill
	msgPrefilled                     // its prefill finished: place its decode
	msgFirstToken                    // its decode leg produced its first event (KV arrived)
	msgEnd                           // it ended (finish, fail, expire, cancel)
	msgState                         // a GET /state snapshot
	msgEngine                        // an engine failed or answered again
	msgRetry                         // a leg failed: place the request again (live/retry.go)
	msgCordon                        // an operator cordons (up false) or uncordons an engine
)

// msg is one fact from a handler. The owner answers on the flight's reply
// channel where the handler waits for a decision.
type msg struct {
	kind msgKind
	f    *flight
	// msgEnd: how it ended.
	terminal event.Kind
	cause    event.Cause
	// msgEngine: which engine, up or down, and its new generation.
	inst event.Instance
	up   bool
	gen  uint64
	// msgState: where to send the snapshot.
	state chan State
	// msgCordon: where to send the answer.
	cordon chan cordonReply
}

// flight is one request in the router: shared by its handler and the
// owner. Fields the owner writes are read by the handler only after a
// reply; produced is atomic.
type flight struct {
	id        event.RequestID
	input     int
	want      int
	class     string
	scheduled time.Duration // from X-Narwhal-Scheduled-Ns, else arrival; -1 when absent
	single    bool          // one ordinary request does both phases (set by the owner)
	noDecode  bool          // the answer is its first token
	whole     bool          // it asks for its prompt's logprobs: one engine serves it whole
	noHandoff bool          // the prefill leg returned no usable handoff
	queued    bool          // waiting in the core's admission queue (owner only)
	// hashes are the prompt's block hashes when the router is
	// prefix-aware, until its prefill is placed; group, prefix, cachedOn
	// and cached what the prefix index made of them (set by the owner at
	// arrival, kept for a re-placement).
	hashes   []uint64
	group    int64
	prefix   int
	cachedOn event.Instance
	cached   int
	// prefillCached is what the prefill engine's answer said it served
	// from its prefix cache (a two-leg request; set by the leg before it
	// tells the owner the prefill is done).
	prefillCached int
	// endCached is the same count learned only from a streamed answer's
	// last chunk (one engine served it whole), journaled with its end.
	endCached int
	reply     chan placement
	// Set by the owner.
	prefill, decode event.Instance
	stage           core.Stage
	firstAt         event.Time
	arrived         event.Time
	// produced counts output tokens (the leg goroutine adds, the owner
	// reads at ticks).
	produced atomic.Int64
	// guard lets the owner end the leg in flight when its engine is
	// ejected (live/health.go).
	guard legGuard
}

// placement is the owner's answer to a handler.
type placement struct {
	inst  event.Instance
	cause event.Cause // refusal or failure cause when inst is NoInstance
	fail  bool        // a failure (503), not a refusal (429)
	// fenced: this router lost its high-availability lease (another
	// router may lead); clients should move.
	fenced bool
}

// owner holds the core and everything that changes with it. Only its
// goroutine touches these fields.
type owner struct {
	r       *Router
	core    *core.Core
	seq     uint64
	nextID  event.RequestID
	active  map[event.RequestID]*flight
	rec     event.Record
	tick    *time.Timer
	tickAt  event.Time
	lastObs []obsMark
	// observedAt is when every engine was last observed (observed: ever).
	observedAt event.Time
	observed   bool
	moves      int
	counts     Counts
	err        error
	names      []string     // engine names, for the metrics' labels
	prefixes   *prefixIndex // nil unless the router is prefix-aware
	// heldGen is, per engine, the generation a readmission brought while
	// it was cordoned (0: none): it rejoins at it when uncordoned.
	heldGen []uint64
}

// obsMark is what the owner last read of an engine's gap counters.
type obsMark struct{ nanos, gaps int64 }

// Counts are the router's running totals (GET /state).
type Counts struct {
	Arrived   int `json:"arrived"`
	Finished  int `json:"finished"`
	Refused   int `json:"refused"`
	Failed    int `json:"failed"`
	Expired   int `json:"expired"`
	Cancelled int `json:"cancelled"`
	// NoHandoff counts prefill legs that returned no usable KV handoff.
	NoHandoff int `json:"no_handoff"`
	// InFlight is the requests not ended, Queued those of them waiting in
	// the admission queue.
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
}

func newOwner(r *Router, c *core.Core) *owner {
	n := len(r.engines)
	names := make([]string, n)
	for i, e := range r.engines {
		names[i] = e.name
	}
	o := &owner{r: r, core: c, active: make(map[event.RequestID]*flight), tickAt: event.Never,
		lastObs: make([]obsMark, n), names: names, heldGen: make([]uint64, n)}
	if pc := r.cfg.PrefixCache; pc != nil {
		o.prefixes = newPrefixIndex(pc.BlockTokens)
	}
	return o
}

// run is the owner goroutine.
func (o *owner) run(ctx context.Context) {
	defer func() {
		close(o.r.stopped)
		o.r.haltCancel()
	}()
	o.tick = time.NewTimer(time.Hour)
	o.tick.Stop()
	// The opening roles.
	o.apply(o.core.Ready())
	for {
		select {
		case m := <-o.r.inbox:
			o.handle(m)
			o.gauges()
		case <-o.tick.C:
			o.tickAt = event.Never
			o.onTick()
			o.gauges()
		case <-ctx.Done():
			o.shutdown()
			return
		case <-o.r.done:
			o.shutdown()
			return
		}
	}
}

// shutdown ends every request still in flight, so the journal holds each
// admitted request's end exactly once, and answers handlers still waiting.
func (o *owner) shutdown() {
	// Facts already queued come first: a request whose end is in the
	// inbox (its handler answered the client, then the router was told to
	// stop, and the owner's select took the stop) ends as it did, not as
	// an engine error. What needs an answer is answered below.
	var rest []msg
	for drained := false; !drained; {
		select {
		case m := <-o.r.inbox:
			if m.kind == msgEnd || m.kind == msgFirstToken {
				o.handle(m)
			} else {
				rest = append(rest, m)
			}
		default:
			drained = true
		}
	}
	ids := make([]event.RequestID, 0, len(o.active))
	for id := range o.active {
		ids = append(ids, id)
	}
	// Requests still waiting for admission end first, so ending the
	// others (which frees prefill work) places nobody from the queue.
	sort.Slice(ids, func(i, j int) bool {
		qi, qj := o.active[ids[i]].queued, o.active[ids[j]].queued
		if qi != qj {
			return qi
		}
		return ids[i] < ids[j]
	})
	now := o.r.now()
	for _, id := range ids {
		f := o.active[id]
		// The router, not an engine, ends it: its client gets a 503 (or,
		// mid-stream, an error event saying so), as the Status codes of
		// docs/serve.md say.
		o.end(now, f, event.KindFail, event.CauseUnavailable)
		// Its handler may be waiting for a placement (admission or
		// decode): answer it now rather than when the router has stopped.
		select {
		case f.reply <- placement{inst: event.NoInstance, cause: event.CauseUnavailable, fail: true}:
		default:
		}
	}
	// Handlers blocked on a reply give up on their context; drain what is
	// queued so none waits forever.
	refuse := func(m msg) {
		if m.f != nil && (m.kind == msgArrive || m.kind == msgPrefilled) {
			m.f.reply <- placement{inst: event.NoInstance, cause: event.CauseUnavailable, fail: true}
		}
		if m.state != nil {
			close(m.state)
		}
	}
	for _, m := range rest {
		refuse(m)
	}
	for {
		select {
		case m := <-o.r.inbox:
			refuse(m)
		default:
			return
		}
	}
}

// emit journals one record, stamping its sequence number.
func (o *owner) emit(r *event.Record) {
	o.seq++
	r.Seq = o.seq
	r.Epoch = o.r.cfg.Epoch
	o.r.cfg.Recorder.Record(r)
}

func (o *owner) emitReq(at event.Time, kind event.Kind, f *flight, inst, peer event.Instance, tokens int64, cause event.Cause) {
	o.rec = event.Record{At: at, Kind: kind, Req: f.id, Inst: inst, Peer: peer, Tokens: tokens, Cause: cause}
	o.emit(&o.rec)
}

// fact keeps the first error the core returns (it never should: the owner
// stamps every fact with a monotonic clock).
func (o *owner) fact(err error) bool {
	if err != nil && o.err == nil {
		o.err = fmt.Errorf("live: %w", err)
	}
	return err == nil
}

func (o *owner) handle(m msg) {
	now := o.r.now()
	switch m.kind {
	case msgArrive:
		o.arrive(now, m.f)
	case msgPrefilled:
		o.prefilled(now, m.f)
	case msgFirstToken:
		f := m.f
		if _, ok := o.active[f.id]; ok && f.decode != f.prefill && f.stage == core.StageDecode {
			o.emitReq(now, event.KindKVDone, f, f.prefill, f.decode, int64(f.input)+1, event.CauseNone)
		}
	case msgEnd:
		if _, ok := o.active[m.f.id]; ok {
			o.end(now, m.f, m.terminal, m.cause)
		}
	case msgState:
		m.state <- o.snapshot(now)
	case msgCordon:
		m.cordon <- o.setCordon(now, m.inst, !m.up)
	case msgEngine:
		if m.up && o.r.engines[m.inst].cordoned.Load() {
			// Readmitted (or restarted) while cordoned: it stays out of
			// service until uncordoned, at this generation.
			o.heldGen[m.inst] = max(o.heldGen[m.inst], m.gen)
		} else if m.up {
			o.fact(o.core.EngineUp(now, m.inst, m.gen))
		} else {
			o.fact(o.core.EngineDown(now, m.inst, event.CauseEngineDown))
			o.killLegs(m.inst)
		}
		o.apply(o.core.Ready())
		// (A cordoned engine's health changes no record of the core.)
		o.r.met.engines(o.core.View(), o.names, o.r.engines)
	case msgRetry:
		o.retry(now, m)
	}
}

func (o *owner) arrive(now event.Time, f *flight) {
	o.nextID++
	f.id = o.nextID
	f.arrived = now
	f.prefill, f.decode = event.NoInstance, event.NoInstance
	o.counts.Arrived++
	o.r.met.arrived.Inc()
	sched := now
	if f.scheduled >= 0 {
		sched = event.Time(f.scheduled)
	}
	if o.prefixes != nil {
		// Read before the arrival is journaled, so that it carries the
		// prefix the core is given (sim --replay prices it the same way).
		f.cachedOn, f.cached, f.group, f.prefix = o.prefixes.lookup(f.hashes)
	}
	o.rec = event.Record{At: now, Kind: event.KindArrival, Req: f.id, Inst: event.NoInstance, Peer: event.NoInstance,
		Tokens: int64(f.input), Want: int64(f.want), Ref: sched, Class: f.class, PrefixGroup: f.group, PrefixTokens: int64(f.prefix)}
	o.emit(&o.rec)
	if o.counts.InFlight >= o.r.cfg.MaxInFlight {
		o.emitReq(now, event.KindRefuse, f, event.NoInstance, event.NoInstance, 0, event.CauseOverload)
		o.counts.Refused++
		o.r.met.ended(event.KindRefuse, event.CauseOverload)
		f.reply <- placement{inst: event.NoInstance, cause: event.CauseOverload}
		return
	}
	if o.fenced() {
		o.emitReq(now, event.KindFail, f, event.NoInstance, event.NoInstance, 0, event.CauseUnavailable)
		o.counts.Failed++
		o.r.met.ended(event.KindFail, event.CauseUnavailable)
		f.reply <- placement{inst: event.NoInstance, cause: event.CauseUnavailable, fail: true, fenced: true}
		return
	}
	f.stage = core.StageQueued
	o.active[f.id] = f
	o.counts.InFlight++
	o.observeStale(now)
	if !o.fact(o.core.Arrive(now, core.Request{ID: f.id, InputTokens: f.input, PrefixGroup: f.group, PrefixTokens: f.prefix,
		CachedOn: f.cachedOn, CachedTokens: f.cached})) {
		o.end(now, f, event.KindFail, event.CauseEngineError)
		f.reply <- placement{inst: event.NoInstance, cause: event.CauseEngineError, fail: true}
		return
	}
	o.apply(o.core.Ready())
}

func (o *owner) prefilled(now event.Time, f *flight) {
	if _, ok := o.active[f.id]; !ok {
		f.reply <- placement{inst: event.NoInstance, cause: event.CauseEngineError, fail: true}
		return
	}
	if f.noHandoff {
		o.counts.NoHandoff++
		o.r.met.noHandoff.Inc()
	}
	f.firstAt = now
	f.produced.Store(1)
	o.emitReq(now, event.KindPrefillDone, f, f.prefill, event.NoInstance, int64(f.prefillCached), event.CauseNone)
	req := core.Request{ID: f.id, InputTokens: f.input, PrefillInst: f.prefill, NoDecode: f.noDecode, Local: f.single, Whole: f.whole}
	if f.noDecode {
		req.OutputTokens, req.TTFT, req.TPOT = 1, now-o.scheduledOf(f), event.Never
	}
	o.observeStale(now)
	if !o.fact(o.core.PrefillDone(now, req)) {
		f.reply <- placement{inst: event.NoInstance, cause: event.CauseEngineError, fail: true}
		return
	}
	if f.noDecode {
		f.stage = core.StageQueued // nothing resident any more
		f.reply <- placement{inst: f.prefill}
	}
	o.apply(o.core.Ready())
}

func (o *owner) scheduledOf(f *flight) event.Time {
	if f.scheduled >= 0 {
		return event.Time(f.scheduled)
	}
	return 0
}

// apply carries out the core's decisions: it answers each waiting
// handler with its request's placement, journals everything, and re-arms
// the tick.
func (o *owner) apply(rd core.Ready) {
	now := o.r.now()
	// The core's records first: they carry the fact's time, earlier than
	// now, and a role move or a retry decision precedes the placements it
	// explains.
	for i := range rd.Records {
		r := rd.Records[i]
		if r.Kind == event.KindRoleMove && !r.Opening() {
			o.moves++
			o.r.met.moves.WithLabelValues(r.To.String(), r.Cause.String()).Inc()
		}
		o.emit(&r)
	}
	if len(rd.Records) > 0 {
		o.r.met.engines(o.core.View(), o.names, o.r.engines)
	}
	var fenced []*flight
	for _, d := range rd.Decisions {
		f := o.active[d.Req]
		if f == nil && d.Kind != core.Move {
			continue // ended meanwhile (a cancel raced the decision)
		}
		switch d.Kind {
		case core.PlacePrefill:
			o.unqueue(f)
			f.prefill, f.decode, f.stage = d.Inst, event.NoInstance, core.StagePrefill
			if o.prefixes != nil && f.hashes != nil {
				o.prefixes.placed(f.hashes, d.Inst)
				f.hashes = nil // a long prompt's hashes need not live as long as it does
			}
			if o.fenced() { // the lease lapsed while it waited: never admit
				// Ended after the loop: ending feeds the core a fact,
				// whose Ready would reuse rd's decisions under us.
				fenced = append(fenced, f)
				continue
			}
			// One ordinary request when the engine runs both phases in
			// one batch (aggregated, or a decode engine absorbing a
			// burst's prompt: burst spill), when there is no decode, or
			// when it asks for its prompt's logprobs (whole).
			f.single = f.noDecode || f.whole || d.Cause == event.CauseSpilled || o.core.View().Instance(d.Inst).Role == event.RoleMixed
			o.emitReq(now, event.KindAdmit, f, d.Inst, event.NoInstance, 0, d.Cause)
			if d.Cause == event.CauseSpilled {
				o.r.met.spilled.Inc()
			}
			o.emitReq(now, event.KindPrefillStart, f, d.Inst, event.NoInstance, 0, event.CauseNone)
			f.reply <- placement{inst: d.Inst}
		case core.PlaceDecode:
			f.decode, f.stage = d.Inst, core.StageDecode
			o.emitReq(now, event.KindDecodeStart, f, d.Inst, f.prefill, int64(f.input)+1, d.Cause)
			switch {
			case f.noHandoff:
				// The decode engine computes the prompt again: no KV moves.
				o.emitReq(now, event.KindKVStart, f, f.prefill, d.Inst, 0, event.CauseNoHandoff)
			case d.Cause == event.CauseCrossed:
				o.emitReq(now, event.KindKVStart, f, f.prefill, d.Inst, int64(f.input)+1, event.CauseNone)
			}
			f.reply <- placement{inst: d.Inst}
		case core.Refuse, core.Fail, core.Expire:
			kind := event.KindRefuse
			switch d.Kind {
			case core.Fail:
				kind = event.KindFail
				o.counts.Failed++
			case core.Expire:
				kind = event.KindExpire
				o.counts.Expired++
			default:
				o.counts.Refused++
			}
			delete(o.active, f.id)
			o.counts.InFlight--
			o.unqueue(f)
			f.stage = core.StageQueued
			o.emitReq(now, kind, f, event.NoInstance, event.NoInstance, 0, d.Cause)
			o.r.met.ended(kind, d.Cause)
			f.reply <- placement{inst: event.NoInstance, cause: d.Cause, fail: d.Kind != core.Refuse}
		case core.Queue:
			f.queued = true
			o.counts.Queued++
			o.emitReq(now, event.KindQueue, f, event.NoInstance, event.NoInstance, int64(d.Depth), event.CauseNone)
		case core.Move:
			// A role is a router label (protocol §1): new legs follow it
			// from d.ReadyAt, resident requests finish where they are.
		}
	}
	o.arm(rd.NextTick)
	for _, f := range fenced {
		o.end(now, f, event.KindFail, event.CauseUnavailable)
		f.reply <- placement{inst: event.NoInstance, cause: event.CauseUnavailable, fail: true, fenced: true}
	}
}

// unqueue notes that f left the admission queue (placed or ended).
func (o *owner) unqueue(f *flight) {
	if f.queued {
		f.queued = false
		o.counts.Queued--
	}
}

// arm sets the tick timer for the core's next wake-up.
func (o *owner) arm(t event.Time) {
	if t == event.Never || t >= o.tickAt {
		return
	}
	o.tickAt = t
	d := time.Duration(t - o.r.now())
	o.tick.Stop()
	select { // drain a stale fire
	case <-o.tick.C:
	default:
	}
	o.tick.Reset(max(d, 0))
}

// onTick observes every engine, then lets the controller act.
func (o *owner) onTick() {
	now := o.r.now()
	o.observe(now)
	start := time.Now()
	o.fact(o.core.Tick(now))
	o.r.met.tick.Observe(time.Since(start).Seconds())
	o.apply(o.core.Ready())
}

// observeStale observes every engine when the last observation is
// core.DefaultObserveEvery old or older, so that the core places a request
// on a view of the engines at most that stale, whether or not its
// controller ticks (a static split never does), as the simulator does.
func (o *owner) observeStale(now event.Time) {
	if o.observed && now-o.observedAt < core.DefaultObserveEvery {
		return
	}
	o.observe(now)
}

// observe tells the core each engine's decode pace since the last
// observation and its resident decode context now.
// residentDecode is each engine's resident decode context (prompts and
// tokens produced so far of the decode legs there, as the relays count
// them) and how many of those legs wait for their first decode token.
func (o *owner) residentDecode() (ctx []int64, waiting []int) {
	ctx, waiting = make([]int64, len(o.r.engines)), make([]int, len(o.r.engines))
	for _, f := range o.active {
		if f.stage == core.StageDecode {
			p := f.produced.Load()
			ctx[f.decode] += int64(f.input) + p
			if p <= 1 {
				waiting[f.decode]++
			}
		}
	}
	return ctx, waiting
}

func (o *owner) observe(now event.Time) {
	o.observedAt, o.observed = now, true
	ctx, waiting := o.residentDecode()
	for i, e := range o.r.engines {
		nanos, gaps := e.gapNanos.Load(), e.gaps.Load()
		last := o.lastObs[i]
		o.lastObs[i] = obsMark{nanos, gaps}
		o.fact(o.core.Observe(now, event.Instance(i), core.Observation{
			DecodeIters: gaps - last.gaps, DecodeSeconds: time.Duration(nanos - last.nanos).Seconds(),
			DecodeTokens: ctx[i], DecodeWaiting: waiting[i]}))
	}
}

// end journals f's terminal record and releases what it held in the core.
func (o *owner) end(now event.Time, f *flight, kind event.Kind, cause event.Cause) {
	delete(o.active, f.id)
	o.counts.InFlight--
	o.unqueue(f)
	if cause == event.CauseNoHandoff {
		o.counts.NoHandoff++
		o.r.met.noHandoff.Inc()
	}
	o.r.met.ended(kind, cause)
	produced := f.produced.Load()
	inst := f.decode
	if inst == event.NoInstance {
		inst = f.prefill
	}
	switch {
	case kind == event.KindFinish && cause == event.CauseCancel:
		o.counts.Cancelled++
	case kind == event.KindFinish:
		o.counts.Finished++
	case kind == event.KindExpire:
		o.counts.Expired++
	default:
		o.counts.Failed++
	}
	if kind == event.KindFinish && cause != event.CauseCancel && f.stage == core.StageDecode {
		o.rec = event.Record{At: now, Kind: kind, Req: f.id, Inst: inst, Peer: event.NoInstance, Tokens: produced,
			Cause: cause, Want: int64(f.endCached)}
		o.emit(&o.rec)
		tpot := event.Never
		if produced > 1 {
			tpot = (now - f.firstAt) / event.Time(produced-1)
		}
		o.qualified(now, f, cause, produced)
		o.fact(o.core.Finished(now, f.decode, core.Request{ID: f.id, InputTokens: f.input, PrefillInst: f.prefill,
			DecodeInst: f.decode, ContextTokens: int64(f.input) + produced, OutputTokens: int(produced),
			TTFT: f.firstAt - o.scheduledOf(f), TPOT: tpot}))
	} else {
		o.emitReq(now, kind, f, inst, event.NoInstance, produced, cause)
		o.fact(o.core.Cancel(now, core.Request{ID: f.id, InputTokens: f.input, PrefillInst: f.prefill,
			DecodeInst: f.decode, ContextTokens: int64(f.input) + produced}, f.stage))
	}
	f.stage = core.StageQueued
	o.apply(o.core.Ready())
}
