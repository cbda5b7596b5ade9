package sim

import (
	"fmt"
	"math"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// Stats summarises one run.
type Stats struct {
	Offered  int
	Finished int
	Refused  int
	Failed   int
	Expired  int
	Moves    int // role moves
	// Preemptions counts decode streams preempted for KV capacity (a
	// stream preempted twice counts twice).
	Preemptions int
	End         event.Time // virtual time when the run ended
	Events      int        // heap events processed
}

type evKind uint8

const (
	evIterDone evKind = iota + 1 // an iteration with prefill chunks ended
	evSpan                       // a decode-only span reached its target iteration
	evKVReady                    // a decode leg's KV arrived at its engine
	evTick                       // the controller asked for a tick
	evStart                      // an idle engine starts its next iteration
)

type ev struct {
	at   event.Time
	seq  uint64
	kind evKind
	eng  int32
	req  int32
	gen  uint32
}

// reqState is the simulator's truth about one request.
type reqState struct {
	input    int
	want     int // tokens it will produce: min(output, cap)
	capped   bool
	done     int // prompt tokens computed
	produced int // output tokens produced
	prefill  int32
	decode   int32
	joinIter int64 // decode engine's iteration count when it joined the batch
	ended    bool
	running  bool       // in its decode engine's running batch
	started  bool       // first prefill chunk ran
	firstAt  event.Time // first token
}

// recompJob is a preempted stream admitted again, computing its prompt
// and its answer so far (total tokens) again.
type recompJob struct {
	req         int32
	admit       uint32
	total, done int
}

// chunk is one prompt's share of a prefill iteration.
type chunk struct {
	req    int32
	tokens int
}

type engine struct {
	id    int32
	prof  timing.Profile
	link  timing.Link
	cache *prefixCache // nil when prefix caching is off

	prefillQ []int32 // prompts placed here, FIFO
	waiting  []int32 // decode legs ready to join the running batch
	running  finishHeap
	ctx      int64 // resident context of the running batch
	iters    int64 // decode iterations completed

	// KV capacity (Batch.KVCapacityTokens): preempted streams wait ahead
	// of waiting, newest preemption first; once admitted again they
	// recompute their context (recomp, holding it as KV) before decoding.
	preempted []int32
	recomp    []recompJob
	rchunks   []chunk // the recompute chunks of the iteration in flight
	held      int64   // KV the recomputing streams hold
	admits    uint32  // admissions so far: the newest admitted is preempted first

	// current activity
	busy   bool
	gen    uint32
	chunks []chunk // the prefill iteration in flight
	// decode-only span: iterations from spanIters0 priced in closed form
	inSpan     bool
	spanStart  event.Time
	spanIters0 int64
	spanCtx0   int64
	spanM      int64
	spanTarget int64      // iterations after spanIters0 at which the span event fires
	spanAt     event.Time // when it fires
	iterStart  event.Time // when the iteration with prefill in flight began

	// what the core has been told (Observation deltas)
	decIters      int64   // decode iterations completed, cumulative
	decSecs       float64 // their total duration, s
	reportedIters int64
	reportedSecs  float64
	pendingCtx    int64 // context of decode legs placed here but not running
	pendingN      int
}

// Sim is one simulated run. Build it with New and call Run once.
type Sim struct {
	cfg  Config
	core *core.Core
	rec  event.Recorder
	reqs []Request
	st   []reqState
	eng  []engine

	heap     evHeap
	seq      uint64
	now      event.Time
	recSeq   uint64
	open     int
	tickAt   event.Time
	tickGen  uint32
	stats    Stats
	record   event.Record
	drainEnd event.Time
	err      error // the first fact the core refused; ends the run
}

// New prepares a run of reqs (sorted by At) on cfg, with ctrl deciding
// placements and roles. rec receives every record; nil discards them.
func New(cfg Config, ctrl core.Controller, reqs []Request, rec event.Recorder) (*Sim, error) {
	if cfg.Batch == (Batch{}) {
		cfg.Batch = DefaultBatch
	}
	if cfg.DrainLimit == 0 {
		cfg.DrainLimit = DefaultDrainLimit
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	for i := range reqs {
		r := &reqs[i]
		if r.InputTokens < 1 || r.OutputTokens < 1 || r.OutputCap < 0 {
			return nil, fmt.Errorf("sim: request %d: input %d, output %d, cap %d: expected input >= 1, output >= 1, cap >= 0",
				i+1, r.InputTokens, r.OutputTokens, r.OutputCap)
		}
		if i > 0 && r.At < reqs[i-1].At {
			return nil, fmt.Errorf("sim: request %d at %v before request %d at %v: expected arrivals sorted by time", i+1, r.At, i, reqs[i-1].At)
		}
		if r.At < 0 {
			return nil, fmt.Errorf("sim: request %d at %v: expected a time >= 0", i+1, r.At)
		}
	}
	c, err := core.New(core.Config{Profiles: cfg.Profiles, SLO: cfg.SLO, Pinned: cfg.Pinned, PrefixAware: cfg.Cache.Enabled,
		Admission: cfg.Admission}, ctrl)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if rec == nil {
		rec = event.Discard
	}
	s := &Sim{cfg: cfg, core: c, rec: rec, reqs: reqs, st: make([]reqState, len(reqs)), tickAt: event.Never}
	s.eng = make([]engine, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		s.eng[i] = engine{id: int32(i), prof: p}
		if cfg.Cache.Enabled {
			s.eng[i].cache = newPrefixCache(cfg.Cache)
		}
	}
	for i := range reqs {
		r := &reqs[i]
		want := r.OutputTokens
		st := &s.st[i]
		if r.OutputCap > 0 && want > r.OutputCap {
			want, st.capped = r.OutputCap, true
		}
		st.input, st.want, st.prefill, st.decode = r.InputTokens, want, -1, -1
	}
	return s, nil
}

// Core exposes the scheduling core (for inspection in tests).
func (s *Sim) Core() *core.Core { return s.core }

// Run simulates until every request has ended, or the drain limit passes.
func (s *Sim) Run() (Stats, error) {
	s.stats.Offered = len(s.reqs)
	s.open = len(s.reqs)
	s.applyCore()
	last := event.Time(0)
	if n := len(s.reqs); n > 0 {
		last = s.reqs[n-1].At
	}
	s.drainEnd = last + s.cfg.DrainLimit
	next := 0
	for s.open > 0 && s.err == nil {
		var at event.Time = event.Never
		if len(s.heap) > 0 {
			at = s.heap[0].at
		}
		if next < len(s.reqs) && s.reqs[next].At <= at {
			s.setNow(s.reqs[next].At)
			s.arrive(int32(next))
			next++
			continue
		}
		if at == event.Never || at > s.drainEnd {
			break
		}
		e := s.heap.pop()
		s.setNow(e.at)
		s.stats.Events++
		switch e.kind {
		case evIterDone:
			if e.gen == s.eng[e.eng].gen {
				s.iterDone(&s.eng[e.eng])
			}
		case evSpan:
			if e.gen == s.eng[e.eng].gen {
				s.spanDone(&s.eng[e.eng])
			}
		case evKVReady:
			s.kvReady(&s.eng[e.eng], e.req)
		case evStart:
			if e.gen == s.eng[e.eng].gen {
				s.startIteration(&s.eng[e.eng])
			}
		case evTick:
			if e.gen == s.tickGen {
				s.tickAt = event.Never
				s.observe()
				s.fact(s.core.Tick(s.now))
			}
		}
	}
	if s.err != nil {
		return s.stats, fmt.Errorf("sim: at %v: %w", s.now, s.err)
	}
	if s.open > 0 {
		s.expireAll()
	}
	s.stats.End = s.now
	return s.stats, nil
}

// fact carries out what the core decided after a fact it was fed, or
// keeps the first error, which ends the run.
func (s *Sim) fact(err error) {
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	s.applyCore()
}

func (s *Sim) setNow(t event.Time) {
	if t < s.now {
		panic(fmt.Sprintf("sim: clock went back from %v to %v", s.now, t))
	}
	s.now = t
}

func (s *Sim) push(e ev) {
	s.seq++
	e.seq = s.seq
	s.heap.push(e)
}

func (s *Sim) emit(r *event.Record) {
	s.recSeq++
	r.Seq = s.recSeq
	s.rec.Record(r)
}

// emitReq emits a request record with the common fields filled.
func (s *Sim) emitReq(kind event.Kind, req int32, inst, peer int32, tokens int64, cause event.Cause) {
	r := &s.record
	*r = event.Record{At: s.now, Kind: kind, Req: event.RequestID(req + 1), Inst: event.Instance(inst),
		Peer: event.Instance(peer), Tokens: tokens, Cause: cause}
	s.emit(r)
}

func (s *Sim) scheduleTick(t event.Time) {
	if t == event.Never || t >= s.tickAt {
		return
	}
	if t < s.now {
		t = s.now
	}
	s.tickGen++
	s.tickAt = t
	s.push(ev{at: t, kind: evTick, gen: s.tickGen})
}

// applyCore carries out the core's decisions, journals its records and
// schedules the tick it asks for.
func (s *Sim) applyCore() {
	rd := s.core.Ready()
	for _, d := range rd.Decisions {
		switch d.Kind {
		case core.PlacePrefill:
			s.placePrefill(int32(d.Req-1), int32(d.Inst))
		case core.PlaceDecode:
			s.placeDecode(int32(d.Req-1), int32(d.Inst))
		case core.Refuse:
			i := int32(d.Req - 1)
			s.emitReq(event.KindRefuse, i, -1, -1, 0, d.Cause)
			s.end(i)
			s.stats.Refused++
		case core.Fail:
			i := int32(d.Req - 1)
			s.emitReq(event.KindFail, i, -1, -1, 0, d.Cause)
			s.end(i)
			s.stats.Failed++
		case core.Queue:
			s.emitReq(event.KindQueue, int32(d.Req-1), -1, -1, int64(d.Depth), event.CauseNone)
		case core.Expire:
			i := int32(d.Req - 1)
			s.emitReq(event.KindExpire, i, -1, -1, 0, d.Cause)
			s.end(i)
			s.stats.Expired++
		case core.Move:
			// A role is only a label for new placements (Arrow §5.2):
			// the engine keeps running what it holds.
		}
	}
	for _, r := range rd.Records {
		if r.Kind == event.KindRoleMove && !r.Opening() {
			s.stats.Moves++
		}
		s.emit(&r)
	}
	s.scheduleTick(rd.NextTick)
}

func (s *Sim) arrive(i int32) {
	r := &s.reqs[i]
	s.record = event.Record{At: s.now, Kind: event.KindArrival, Req: event.RequestID(i + 1),
		Inst: event.NoInstance, Peer: event.NoInstance, Tokens: int64(r.InputTokens),
		Want: int64(s.st[i].want), Ref: r.At, Class: r.Class}
	s.emit(&s.record)
	s.fact(s.core.Arrive(s.now, core.Request{ID: event.RequestID(i + 1), InputTokens: r.InputTokens,
		PrefixGroup: r.PrefixGroup, PrefixTokens: r.PrefixTokens}))
}

func (s *Sim) end(i int32) {
	s.st[i].ended = true
	s.open--
}

func (s *Sim) placePrefill(i int32, inst int32) {
	st := &s.st[i]
	st.prefill = inst
	s.emitReq(event.KindAdmit, i, inst, -1, 0, event.CauseNone)
	e := &s.eng[inst]
	e.prefillQ = append(e.prefillQ, i)
	s.poke(e)
}

func (s *Sim) placeDecode(i int32, inst int32) {
	st := &s.st[i]
	st.decode = inst
	crossed := inst != st.prefill
	cause := event.CauseNone
	if crossed {
		cause = event.CauseCrossed
	}
	ctx := int64(st.input + st.produced)
	s.emitReq(event.KindDecodeStart, i, inst, st.prefill, ctx, cause)
	dst := &s.eng[inst]
	dst.pendingCtx += ctx
	dst.pendingN++
	if !crossed {
		s.join(&s.eng[inst], i)
		return
	}
	src := &s.eng[st.prefill]
	ready := src.link.Transfer(s.cfg.KV, s.now, ctx)
	s.emitReq(event.KindKVStart, i, st.prefill, inst, ctx, event.CauseNone)
	s.push(ev{at: ready, kind: evKVReady, eng: inst, req: i})
}

func (s *Sim) kvReady(e *engine, i int32) {
	st := &s.st[i]
	s.emitReq(event.KindKVDone, i, st.prefill, e.id, int64(st.input+st.produced), event.CauseNone)
	s.join(e, i)
}

// join queues a decode leg to enter the running batch at the engine's next
// iteration boundary.
func (s *Sim) join(e *engine, i int32) {
	e.waiting = append(e.waiting, i)
	s.poke(e)
}

// poke tells an engine new work is there: an idle engine starts an
// iteration now, after every other event of this instant (so work that
// arrives together is batched together); a decode span stops at its next
// iteration boundary so the work can join; an iteration with prefill picks
// it up when it ends.
func (s *Sim) poke(e *engine) {
	if !e.busy {
		e.busy = true
		e.gen++
		s.push(ev{at: s.now, kind: evStart, eng: e.id, gen: e.gen})
		return
	}
	if !e.inSpan {
		return
	}
	j := e.itersBy(s.now) + 1 // the iteration in progress ends at end(j)
	if j >= e.spanTarget {
		return
	}
	e.spanTarget = j
	e.spanAt = e.spanEnd(j)
	e.gen++
	s.push(ev{at: e.spanAt, kind: evSpan, eng: e.id, gen: e.gen})
}

// startIteration begins the engine's next iteration at s.now: when the
// KV held exceeds the capacity the newest admitted streams are preempted;
// otherwise decode legs join; then recompute chunks and prompt chunks
// fill what is left of the token budget (engine.Engine.Start, the same
// rules).
func (s *Sim) startIteration(e *engine) {
	b := s.cfg.Batch
	maxSeqs := b.BudgetTokens
	if b.MaxSeqs > 0 && b.MaxSeqs < maxSeqs {
		maxSeqs = b.MaxSeqs
	}
	kv := b.KVCapacityTokens
	preempted := false
	for kv > 0 && e.running.Len()+len(e.recomp) > 1 && e.ctx+e.held > kv {
		s.preemptNewest(e)
		preempted = true
	}
	for !preempted && e.running.Len()+len(e.recomp) < maxSeqs {
		q := &e.preempted
		if len(*q) == 0 {
			q = &e.waiting
		}
		if len(*q) == 0 {
			break
		}
		i := (*q)[0]
		st := &s.st[i]
		c := int64(st.input + st.produced)
		if kv > 0 && e.running.Len()+len(e.recomp) > 0 && e.ctx+e.held+c > kv {
			break // FCFS: the head waits for room
		}
		*q = (*q)[1:]
		e.pendingCtx -= c
		e.pendingN--
		e.admits++
		if q == &e.preempted {
			e.held += c
			e.recomp = append(e.recomp, recompJob{req: i, admit: e.admits, total: int(c)})
			continue
		}
		st.joinIter, st.running = e.iters, true
		e.ctx += c
		e.running.push(finishEntry{at: e.iters + int64(st.want-st.produced), req: i, admit: e.admits})
	}
	m := e.running.Len()
	budget := b.BudgetTokens - m
	e.chunks = e.chunks[:0]
	e.rchunks = e.rchunks[:0]
	var secs float64
	for _, j := range e.recomp {
		if budget <= 0 {
			break
		}
		n := min(j.total-j.done, b.ChunkTokens, budget)
		secs += e.prof.PrefillSpan(j.done, j.done+n)
		e.rchunks = append(e.rchunks, chunk{req: j.req, tokens: n})
		budget -= n
	}
	for _, i := range e.prefillQ {
		if budget <= 0 {
			break
		}
		st := &s.st[i]
		n := min(st.input-st.done, b.ChunkTokens, budget)
		if !st.started {
			// The first chunk: tokens this engine has cached for the
			// prompt's prefix group are not computed again (the last
			// prompt token always is).
			st.started = true
			if e.cache != nil {
				r := &s.reqs[i]
				st.done = min(e.cache.lookup(r.PrefixGroup, r.PrefixTokens), st.input-1)
				e.cache.hits += int64(st.done)
				n = min(st.input-st.done, b.ChunkTokens, budget)
			}
			s.emitReq(event.KindPrefillStart, i, e.id, -1, int64(st.done), event.CauseNone)
		}
		secs += e.prof.PrefillSpan(st.done, st.done+n)
		e.chunks = append(e.chunks, chunk{req: i, tokens: n})
		budget -= n
	}
	e.gen++
	e.busy = true
	e.inSpan = false
	if len(e.chunks) > 0 || len(e.rchunks) > 0 {
		if m > 0 {
			secs += e.prof.Interval(e.ctx)
		}
		e.iterStart = s.now
		s.push(ev{at: s.now + iterTime(secs), kind: evIterDone, eng: e.id, gen: e.gen})
		return
	}
	if m == 0 {
		e.busy = false
		return
	}
	// Decode only: price every iteration until the first stream finishes
	// in closed form; new work breaks the span at an iteration boundary.
	e.inSpan = true
	e.spanStart, e.spanIters0, e.spanCtx0, e.spanM = s.now, e.iters, e.ctx, int64(m)
	e.spanTarget = e.running.min().at - e.iters
	if kv > 0 && m+len(e.recomp) > 1 {
		// The span also stops before the iteration whose context would
		// exceed the capacity: that iteration starts with a preemption.
		if t := (kv-e.held-e.ctx)/int64(m) + 1; t < e.spanTarget {
			e.spanTarget = t
		}
	}
	e.spanAt = e.spanEnd(e.spanTarget)
	s.push(ev{at: e.spanAt, kind: evSpan, eng: e.id, gen: e.gen})
}

// preemptNewest preempts the running or recomputing stream admitted last
// (vLLM's recompute preemption): its KV is freed and it waits at the front
// of the waiting queue, to compute its context again once admitted.
func (s *Sim) preemptNewest(e *engine) {
	at, job := -1, -1
	var newest uint32
	for k, f := range e.running.items {
		if at < 0 || f.admit > newest {
			at, newest = k, f.admit
		}
	}
	for k, j := range e.recomp {
		if (at < 0 && job < 0) || j.admit > newest {
			at, job, newest = -1, k, j.admit
		}
	}
	var i int32
	if job >= 0 {
		j := e.recomp[job]
		i = j.req
		e.held -= int64(j.total)
		e.recomp = append(e.recomp[:job], e.recomp[job+1:]...)
	} else {
		i = e.running.removeAt(at).req
		st := &s.st[i]
		st.produced += int(e.iters - st.joinIter)
		st.running = false
		e.ctx -= int64(st.input + st.produced)
	}
	st := &s.st[i]
	s.emitReq(event.KindPreempt, i, e.id, -1, int64(st.input+st.produced), event.CauseNone)
	e.pendingCtx += int64(st.input + st.produced)
	e.pendingN++
	e.preempted = append(e.preempted, 0)
	copy(e.preempted[1:], e.preempted)
	e.preempted[0] = i
	s.stats.Preemptions++
}

// iterTime converts an iteration's seconds to Time; an iteration always
// takes at least a nanosecond, so the clock always moves.
func iterTime(secs float64) event.Time {
	return max(event.Seconds(secs), 1)
}

// spanEnd is when iteration j of the current span ends: the decode interval
// grows by Slope·m each iteration as every stream adds a token of context.
func (e *engine) spanEnd(j int64) event.Time {
	a := e.prof.Slope*float64(e.spanCtx0) + e.prof.Intercept
	jf := float64(j)
	secs := jf*a + e.prof.Slope*float64(e.spanM)*jf*(jf-1)/2
	return e.spanStart + max(event.Seconds(secs), event.Time(j))
}

// itersBy returns how many span iterations have ended by t.
func (e *engine) itersBy(t event.Time) int64 {
	x := (t - e.spanStart).Seconds()
	a := e.prof.Slope*float64(e.spanCtx0) + e.prof.Intercept
	q := e.prof.Slope * float64(e.spanM) / 2
	var j float64
	if q > 0 {
		b := a - q
		j = (-b + math.Sqrt(b*b+4*q*x)) / (2 * q)
	} else if a > 0 {
		j = x / a
	} else {
		j = float64(e.spanTarget)
	}
	n := min(int64(math.Max(0, j)), e.spanTarget)
	for n < e.spanTarget && e.spanEnd(n+1) <= t {
		n++
	}
	for n > 0 && e.spanEnd(n) > t {
		n--
	}
	return n
}

func (s *Sim) spanDone(e *engine) {
	s.advanceDecode(e, e.spanTarget)
	e.busy, e.inSpan = false, false
	s.startIteration(e)
}

func (s *Sim) iterDone(e *engine) {
	if e.running.Len() > 0 {
		s.advanceDecode(e, 1)
	}
	if len(e.rchunks) > 0 {
		s.recomputeDone(e)
	}
	// Apply prompt chunks; completed prompts have their first token now.
	// Chunks went to the head of the queue in order, so only the first
	// len(chunks) entries can leave it: keep the unfinished ones in order,
	// packed against the untouched tail.
	k := len(e.chunks)
	for _, c := range e.chunks {
		st := &s.st[c.req]
		st.done += c.tokens
		if st.done >= st.input {
			s.prefillDone(e, c.req)
		}
	}
	w := k
	for j := k - 1; j >= 0; j-- {
		if i := e.prefillQ[j]; s.st[i].done < s.st[i].input {
			w--
			e.prefillQ[w] = i
		}
	}
	e.prefillQ = e.prefillQ[w:]
	e.chunks = e.chunks[:0]
	e.busy = false
	s.startIteration(e)
}

// recomputeDone applies the recompute chunks of the iteration that ended:
// a stream whose recompute is complete samples its next token (as a
// prefill's last position gives the first) and decodes on in the running
// batch, where its KV already is.
func (s *Sim) recomputeDone(e *engine) {
	k := len(e.rchunks)
	for n, c := range e.rchunks {
		e.recomp[n].done += c.tokens
	}
	w := 0
	for n, j := range e.recomp {
		if n >= k || j.done < j.total {
			e.recomp[w] = j
			w++
			continue
		}
		i := j.req
		st := &s.st[i]
		e.held -= int64(j.total)
		st.produced++
		if s.cfg.TokenHook != nil {
			s.cfg.TokenHook(event.RequestID(i+1), st.produced, s.now)
		}
		if st.produced >= st.want {
			s.finish(i, e.id)
			continue
		}
		st.joinIter, st.running = e.iters, true
		e.ctx += int64(st.input + st.produced)
		e.running.push(finishEntry{at: e.iters + int64(st.want-st.produced), req: i, admit: j.admit})
	}
	e.recomp = e.recomp[:w]
	e.rchunks = e.rchunks[:0]
}

// advanceDecode ends n decode iterations of the running batch at s.now:
// every stream gains n tokens, and streams that reached their length finish.
func (s *Sim) advanceDecode(e *engine, n int64) {
	if s.cfg.TokenHook != nil {
		s.reportTokens(e, n)
	}
	e.decIters += n
	if e.inSpan {
		e.decSecs += (e.spanEnd(n) - e.spanStart).Seconds()
	} else {
		e.decSecs += (s.now - e.iterStart).Seconds()
	}
	e.iters += n
	e.ctx += n * int64(e.running.Len())
	for e.running.Len() > 0 && e.running.min().at <= e.iters {
		f := e.running.pop()
		st := &s.st[f.req]
		st.produced, st.running = st.want, false
		e.ctx -= int64(st.input + st.want)
		s.finish(f.req, e.id)
	}
}

// observe tells the core what every engine did since the last tick.
func (s *Sim) observe() {
	for k := range s.eng {
		e := &s.eng[k]
		iters, secs, ctx := e.decIters, e.decSecs, e.ctx
		if e.inSpan {
			j := e.itersBy(s.now)
			iters += j
			secs += (e.spanEnd(j) - e.spanStart).Seconds()
			ctx += j * e.spanM
		}
		if err := s.core.Observe(s.now, event.Instance(k), core.Observation{
			DecodeIters: iters - e.reportedIters, DecodeSeconds: secs - e.reportedSecs,
			DecodeTokens: ctx + e.held + e.pendingCtx, DecodeWaiting: e.pendingN,
		}); err != nil && s.err == nil {
			s.err = err
		}
		e.reportedIters, e.reportedSecs = iters, secs
	}
}

// reportTokens calls the TokenHook for every token of the next n iterations
// (tests only: it costs an event per token).
func (s *Sim) reportTokens(e *engine, n int64) {
	for j := int64(1); j <= n; j++ {
		at := s.now
		if e.inSpan {
			at = e.spanEnd(e.iters - e.spanIters0 + j)
		}
		for _, f := range e.running.items {
			st := &s.st[f.req]
			k := st.produced + int(e.iters+j-st.joinIter)
			s.cfg.TokenHook(event.RequestID(f.req+1), k, at)
		}
	}
}

func (s *Sim) prefillDone(e *engine, i int32) {
	st := &s.st[i]
	st.produced = 1
	if e.cache != nil {
		r := &s.reqs[i]
		e.cache.insert(r.PrefixGroup, min(r.PrefixTokens, st.input))
	}
	s.emitReq(event.KindPrefillDone, i, e.id, -1, 0, event.CauseNone)
	if s.cfg.TokenHook != nil {
		s.cfg.TokenHook(event.RequestID(i+1), 1, s.now)
	}
	req := core.Request{ID: event.RequestID(i + 1), InputTokens: st.input, PrefillInst: event.Instance(e.id)}
	if st.want <= 1 {
		// The answer is complete with its first token: no decode leg.
		req.NoDecode, req.OutputTokens = true, 1
		req.TTFT, req.TPOT = s.now-s.reqs[i].At, event.Never
		if err := s.core.PrefillDone(s.now, req); err != nil && s.err == nil {
			s.err = err
		}
		s.finish(i, e.id)
		return
	}
	st.firstAt = s.now
	s.fact(s.core.PrefillDone(s.now, req))
}

func (s *Sim) finish(i int32, inst int32) {
	st := &s.st[i]
	cause := event.CauseStop
	if st.capped {
		cause = event.CauseLength
	}
	s.emitReq(event.KindFinish, i, inst, -1, int64(st.produced), cause)
	if st.decode >= 0 {
		s.fact(s.core.Finished(s.now, event.Instance(inst), core.Request{ID: event.RequestID(i + 1), InputTokens: st.input,
			PrefillInst: event.Instance(st.prefill), DecodeInst: event.Instance(inst), ContextTokens: int64(st.input + st.produced),
			OutputTokens: st.produced, TTFT: st.firstAt - s.reqs[i].At,
			TPOT: (s.now - st.firstAt) / event.Time(st.produced-1)}))
	}
	s.end(i)
	s.stats.Finished++
}

// expireAll ends every open request at the drain limit.
func (s *Sim) expireAll() {
	if s.drainEnd > s.now {
		s.setNow(s.drainEnd)
	}
	for i := range s.st {
		st := &s.st[i]
		if st.ended {
			continue
		}
		produced := st.produced
		if st.running {
			produced += int(s.eng[st.decode].itersNow(s.now) - st.joinIter)
		}
		s.emitReq(event.KindExpire, int32(i), -1, -1, int64(produced), event.CauseDrainLimit)
		st.ended = true
		s.stats.Expired++
	}
	s.open = 0
}

// itersNow is how many decode iterations the engine has completed by now,
// counting a span in progress.
func (e *engine) itersNow(now event.Time) int64 {
	if e.inSpan {
		return e.spanIters0 + e.itersBy(now)
	}
	return e.iters
}
