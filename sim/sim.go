package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"

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
	// OverKV counts requests whose prompt and answer need more KV than an
	// engine holds (Batch.KVCapacityTokens), counted at arrival: they
	// crowd out the streams beside them, which no vLLM would accept (its
	// max_model_len must fit its KV cache).
	OverKV int
	End    event.Time // virtual time when the run ended
	Events int        // heap events processed
}

type evKind uint8

const (
	evIterDone evKind = iota + 1 // an iteration with prefill chunks ended
	evSpan                       // a decode-only span reached its target iteration
	evKVReady                    // a decode leg's KV arrived at its engine
	evTick                       // the controller asked for a tick
	evStart                      // an idle engine starts its next iteration
	evCordon                     // a maintenance window opens (gen 1) or closes (gen 0) on engine eng
)

type ev struct {
	at   event.Time
	seq  uint64
	kind evKind
	eng  int32
	req  int32
	gen  uint32
}

// reqState is the simulator's truth about one request in flight: 64
// bytes without pointers, so the collector never scans the states, however
// many requests are open. What the request's trace entry says beyond
// these (its class) is journaled at its arrival and not kept.
type reqState struct {
	at       event.Time // scheduled send time
	firstAt  event.Time // first token
	joinIter int64      // decode engine's iteration count when it joined the batch
	group    int64      // shared-prefix group (0 = none)
	cgroup   int64      // the group it leaves cached besides (Request.CacheGroup; 0 = none)
	prefix   int32      // shared-prefix tokens
	ctokens  int32      // cgroup's tokens
	input    int32
	want     int32 // tokens it will produce: min(output, cap)
	done     int32 // prompt tokens computed
	produced int32 // output tokens produced
	prefill  int32
	decode   int32
	capped   bool
	ended    bool
	running  bool // in its decode engine's running batch
	started  bool // first prefill chunk ran
}

// ctx is the request's context: prompt plus tokens produced.
func (st *reqState) ctx() int64 { return int64(st.input) + int64(st.produced) }

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
	last   bool // the prompt's last chunk: its first token exists when the iteration ends
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

// Source hands a run its requests one at a time, sorted by At; the
// simulator takes each when the clock reaches it (traces.Stream is one,
// adapted by package sweep).
type Source interface {
	// Next stores the next request in r and reports true, or reports
	// false at the end or on an error (Err).
	Next(r *Request) bool
	// Err is why Next stopped early, or nil.
	Err() error
}

// sliceSource hands out a slice's requests.
type sliceSource struct {
	reqs []Request
	i    int
}

func (s *sliceSource) Next(r *Request) bool {
	if s.i >= len(s.reqs) {
		return false
	}
	*r = s.reqs[s.i]
	s.i++
	return true
}

func (s *sliceSource) Err() error { return nil }

// Sim is one simulated run. Build it with New or NewStream and call Run
// once.
//
// Requests are numbered in arrival order (request i is RequestID i+1).
// The state of request i lives in st[i&mask] from its arrival until it
// and every request before it have ended: st is a ring over the requests
// from the oldest still open to the newest arrived, grown by doubling, so
// a run's memory follows its requests in flight, not the requests it was
// offered.
type Sim struct {
	cfg  Config
	core *core.Core
	// refusedCordon marks the instances whose open maintenance window the
	// core refused (nil until one is).
	refusedCordon []bool
	rec           event.Recorder
	src           Source
	st            []reqState // ring of request states, len a power of two
	mask          int32
	// slots is the ring's size when Run handed it back (Slots).
	slots int
	base  int32 // requests below base have ended; their states are gone
	top   int32 // requests arrived
	eng   []engine

	next    Request // the next arrival, when hasNext
	hasNext bool
	lastAt  event.Time // the latest arrival's scheduled time

	heap    evHeap
	due     []ev // events at the current instant, in push order, from dueHead
	dueHead int
	seq     uint64
	now     event.Time
	recSeq  uint64
	open    int
	tickAt  event.Time
	tickGen uint32
	// tickAskSeq is seq when the tick was first asked for after the last
	// one fired (tickAsked): a pending tick was pushed then (Fork).
	tickAskSeq uint64
	tickAsked  bool
	started    bool
	// observedAt is when every engine was last observed (observed: ever).
	observedAt event.Time
	observed   bool
	stats      Stats
	record     event.Record
	drainEnd   event.Time
	err        error // the first fact the core refused; ends the run
}

// New prepares a run of reqs (sorted by At) on cfg, with ctrl deciding
// placements and roles. rec receives every record; nil discards them.
func New(cfg Config, ctrl core.Controller, reqs []Request, rec event.Recorder) (*Sim, error) {
	for i := range reqs {
		var prev *Request
		if i > 0 {
			prev = &reqs[i-1]
		}
		if err := checkRequest(i, &reqs[i], prev); err != nil {
			return nil, err
		}
	}
	return NewStream(cfg, ctrl, &sliceSource{reqs: reqs}, rec)
}

// maxTokens bounds a request's token counts (the state keeps them in 32
// bits).
const maxTokens = math.MaxInt32

// checkRequest checks request i (0-based) against the one before it.
func checkRequest(i int, r, prev *Request) error {
	if r.InputTokens < 1 || r.OutputTokens < 1 || r.OutputCap < 0 {
		return fmt.Errorf("sim: request %d: input %d, output %d, cap %d: expected input >= 1, output >= 1, cap >= 0",
			i+1, r.InputTokens, r.OutputTokens, r.OutputCap)
	}
	if r.InputTokens > maxTokens || r.OutputTokens > maxTokens || r.OutputCap > maxTokens || r.PrefixTokens > maxTokens || r.PrefixTokens < math.MinInt32 {
		return fmt.Errorf("sim: request %d: input %d, output %d, cap %d, prefix %d: expected at most %d tokens each",
			i+1, r.InputTokens, r.OutputTokens, r.OutputCap, r.PrefixTokens, maxTokens)
	}
	if prev != nil && r.At < prev.At {
		return fmt.Errorf("sim: request %d at %v before request %d at %v: expected arrivals sorted by time", i+1, r.At, i, prev.At)
	}
	if r.At < 0 {
		return fmt.Errorf("sim: request %d at %v: expected a time >= 0", i+1, r.At)
	}
	return nil
}

// NewStream prepares a run of the requests src hands out (sorted by At)
// on cfg, with ctrl deciding placements and roles; it takes each request
// when the simulated clock reaches it and keeps its state only while it
// is in flight. A request that is out of order or malformed ends the run
// with an error there. rec receives every record; nil discards them.
func NewStream(cfg Config, ctrl core.Controller, src Source, rec event.Recorder) (*Sim, error) {
	if cfg.Batch == (Batch{}) {
		cfg.Batch = DefaultBatch
	}
	if cfg.DrainLimit == 0 {
		cfg.DrainLimit = DefaultDrainLimit
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	c, err := core.New(core.Config{Profiles: cfg.Profiles, SLO: cfg.SLO, Pinned: cfg.Pinned, PrefixAware: cfg.Cache.Enabled,
		Admission: cfg.Admission}, ctrl)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if rec == nil {
		rec = event.Discard
	}
	s := &Sim{cfg: cfg, core: c, rec: rec, src: src, st: newRing(minRing), mask: minRing - 1, tickAt: event.Never}
	s.eng = make([]engine, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		s.eng[i] = engine{id: int32(i), prof: p}
		if cfg.Cache.Enabled {
			s.eng[i].cache = newPrefixCache(cfg.Cache)
		}
	}
	return s, nil
}

// minRing is the smallest ring of request states.
const minRing = 64

// rings recycles the request-state rings of finished runs within a
// process: a sweep makes hundreds of runs, each growing its ring from
// minRing, and fresh memory costs the kernel a page fault per 4 KiB.
// rings[k] holds rings of minRing<<k slots. A recycled ring's contents do
// not matter: reqState holds no pointers, and arrive overwrites a slot
// whole before any use.
var rings [32]sync.Pool

// newRing returns a ring of n slots, n = minRing<<k.
func newRing(n int) []reqState {
	if p, ok := rings[bits.TrailingZeros(uint(n/minRing))].Get().(*[]reqState); ok {
		return *p
	}
	return make([]reqState, n)
}

// maxRecycled is the largest ring recycled (256 KiB): the short runs of a
// sweep gain from reuse; a long run's large ring is left to the collector
// (kept in a pool, rings of an overloaded run's size, tens of MB, held
// the oracle's peak memory 25% higher).
const maxRecycled = 4096

// recycleRing hands a ring back for the next run's newRing.
func recycleRing(r []reqState) {
	if len(r) >= minRing && len(r) <= maxRecycled {
		rings[bits.TrailingZeros(uint(len(r)/minRing))].Put(&r)
	}
}

// state is request i's state; i must be in flight (arrived, and it or a
// request before it still open).
func (s *Sim) state(i int32) *reqState {
	if i < s.base || i >= s.top {
		panic(fmt.Sprintf("sim: request %d: state asked for outside the requests in flight [%d, %d)", i+1, s.base+1, s.top+1))
	}
	return &s.st[i&s.mask]
}

// Slots is how many request states the run holds room for now: a power of
// two at least the number of requests from the oldest still open to the
// newest arrived (tests use it to check that memory follows the requests
// in flight).
func (s *Sim) Slots() int { return max(len(s.st), s.slots) }

// pull takes the next request from the source into s.next, checking it.
func (s *Sim) pull() {
	s.hasNext = s.src.Next(&s.next)
	if !s.hasNext {
		if err := s.src.Err(); err != nil && s.err == nil {
			s.err = err
		}
		// Every arrival is known: the run drains until the limit.
		s.drainEnd = s.lastAt + s.cfg.DrainLimit
		return
	}
	var prev *Request
	if s.top > 0 {
		prev = &Request{At: s.lastAt}
	}
	if err := checkRequest(int(s.top), &s.next, prev); err != nil {
		s.hasNext = false
		if s.err == nil {
			s.err = err
		}
		return
	}
	if s.top == math.MaxInt32 {
		s.hasNext = false
		if s.err == nil {
			s.err = fmt.Errorf("sim: more than %d requests: expected at most %d", math.MaxInt32, math.MaxInt32)
		}
		return
	}
	s.lastAt = s.next.At
}

// admit makes room for the next arrival's state and returns its index.
func (s *Sim) admit() int32 {
	if int(s.top-s.base) == len(s.st) {
		grown := newRing(2 * len(s.st))
		m := int32(len(grown) - 1)
		for j := s.base; j < s.top; j++ {
			grown[j&m] = s.st[j&s.mask]
		}
		recycleRing(s.st)
		s.st, s.mask = grown, m
	}
	i := s.top
	s.top++
	return i
}

// Core exposes the scheduling core (for inspection in tests).
func (s *Sim) Core() *core.Core { return s.core }

// Run simulates until every request has ended, or the drain limit passes.
// It may follow calls to Advance; it is called once.
func (s *Sim) Run() (Stats, error) {
	if s.st == nil {
		return s.stats, errors.New("sim: Run called on a run that has ended: expected one Run per Sim")
	}
	s.start()
	s.loop(event.Never)
	s.stats.Offered = int(s.top)
	if s.err != nil {
		return s.stats, fmt.Errorf("sim: at %v: %w", s.now, s.err)
	}
	if s.open > 0 {
		s.expireAll()
	}
	s.stats.End = s.now
	// Every request has ended: the ring goes to the next run.
	s.slots = len(s.st)
	recycleRing(s.st)
	s.st = nil
	return s.stats, nil
}

// Advance simulates every arrival and event before t and stops there,
// before anything at t or later: the state it leaves is the state a Run
// passes through at that point, so Fork can copy it. It reports whether
// the run has anything left to simulate. Run finishes the run.
func (s *Sim) Advance(t event.Time) (more bool, err error) {
	if s.st == nil {
		return false, errors.New("sim: Advance called on a run that has ended")
	}
	s.start()
	if !s.loop(t) {
		return false, s.err
	}
	return true, nil
}

// start opens the run: the controller's opening decisions and the first
// arrival.
func (s *Sim) start() {
	if s.started {
		return
	}
	s.started = true
	s.applyCore()
	// The windows' ends in time order, a close before an open at one
	// instant (windows of one engine may touch, listed in any order).
	ends := make([]ev, 0, 2*len(s.cfg.Cordons))
	for _, w := range s.cfg.Cordons {
		ends = append(ends, ev{at: w.From, kind: evCordon, eng: int32(w.Inst), gen: 1}, ev{at: w.Until, kind: evCordon, eng: int32(w.Inst), gen: 0})
	}
	slices.SortStableFunc(ends, func(a, b ev) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.gen, b.gen)) })
	for _, e := range ends {
		s.push(e)
	}
	// Until the source is drained the drain limit is unknown, and it
	// cannot bind: every arrival comes before it.
	s.drainEnd = event.Never
	s.pull()
}

// loop simulates arrivals and events in order until the run ends (false)
// or, when until is not Never, until the next one is at or after until
// (true: paused).
func (s *Sim) loop(until event.Time) (paused bool) {
	for (s.open > 0 || s.hasNext) && s.err == nil {
		// The next event: the heap's first or the first of the events
		// due now, whichever comes first by (at, seq).
		var at event.Time = event.Never
		now := s.dueHead < len(s.due)
		if now {
			at = s.due[s.dueHead].at
		}
		if s.heap.len() > 0 && (!now || s.heap.first().before(&s.due[s.dueHead])) {
			at, now = s.heap.first().at, false
		}
		if until != event.Never && (at >= until && (!s.hasNext || s.next.At >= until)) {
			return true
		}
		if s.hasNext && s.next.At <= at {
			s.setNow(s.next.At)
			s.arrive()
			s.pull()
			continue
		}
		if at == event.Never || at > s.drainEnd {
			break
		}
		var e ev
		if now {
			e = s.due[s.dueHead]
			s.dueHead++
			if s.dueHead == len(s.due) {
				s.due, s.dueHead = s.due[:0], 0
			}
		} else {
			e = s.heap.pop()
		}
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
		case evCordon:
			s.cordon(event.Instance(e.eng), e.gen == 1)
		case evTick:
			if e.gen == s.tickGen {
				s.tickAt, s.tickAsked = event.Never, false
				s.observe()
				s.fact(s.core.Tick(s.now))
			}
		}
	}
	return false
}

// cordon opens or closes a maintenance window on inst. A window whose
// cordon the core refused closes without an uncordon.
func (s *Sim) cordon(inst event.Instance, on bool) {
	if on {
		refused, err := s.core.Cordon(s.now, inst)
		if refused != "" {
			if s.refusedCordon == nil {
				s.refusedCordon = make([]bool, len(s.eng))
			}
			s.refusedCordon[inst] = true
		}
		s.fact(err)
		return
	}
	if s.refusedCordon != nil && s.refusedCordon[inst] {
		s.refusedCordon[inst] = false
		return
	}
	s.fact(s.core.EngineUpBy(s.now, inst, s.core.View().Instance(inst).Generation, event.CauseOperator))
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
	if e.at == s.now {
		// Due now (an idle engine starting): it comes after every event
		// already pending at this instant and before any later one, so
		// a queue in push order keeps it, without a pass through the
		// heap to its root and back.
		s.due = append(s.due, e)
		return
	}
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
	if s.tickAt == event.Never && !s.tickAsked {
		// The first ask since no tick is pending: where a controller that
		// wants a tick pushes it (Fork).
		s.tickAsked, s.tickAskSeq = true, s.seq
	}
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
	// The core's records go out in the core's order with its decisions:
	// a role move (and the records before it, the decision that explains
	// it) before the placements made after it, so that a journal read in
	// order knows each engine's role at every placement (an inline flip's
	// placement follows its flip; live's owner writes the records first).
	next := 0
	// A health record (a cordon, an uncordon) comes before the placements
	// the change allowed: an uncordon drains the admission queue there.
	for next < len(rd.Records) && rd.Records[next].Kind == event.KindHealth {
		r := rd.Records[next]
		next++
		s.emit(&r)
	}
	records := func(move bool) {
		for next < len(rd.Records) {
			r := rd.Records[next]
			next++
			if r.Kind == event.KindRoleMove && !r.Opening() {
				s.stats.Moves++
			}
			s.emit(&r)
			if move && r.Kind == event.KindRoleMove && !r.Opening() {
				return
			}
		}
	}
	for _, d := range rd.Decisions {
		switch d.Kind {
		case core.PlacePrefill:
			s.placePrefill(int32(d.Req-1), int32(d.Inst), d.Cause)
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
			// the engine keeps running what it holds. Its record (and
			// those before it) now.
			records(true)
		}
	}
	records(false)
	s.scheduleTick(rd.NextTick)
}

// arrive takes s.next in as the next request.
func (s *Sim) arrive() {
	r := &s.next
	i := s.admit()
	st := s.state(i)
	*st = reqState{at: r.At, group: r.PrefixGroup, prefix: int32(r.PrefixTokens), input: int32(r.InputTokens),
		want: int32(r.OutputTokens), prefill: -1, decode: -1}
	if r.CacheGroup != 0 && r.CacheGroup != r.PrefixGroup {
		st.cgroup, st.ctokens = r.CacheGroup, int32(r.CacheTokens)
	}
	if r.OutputCap > 0 && r.OutputTokens > r.OutputCap {
		st.want, st.capped = int32(r.OutputCap), true
	}
	if kv := s.cfg.Batch.KVCapacityTokens; kv > 0 && int64(st.input)+int64(st.want) > kv {
		s.stats.OverKV++
	}
	s.open++
	s.record = event.Record{At: s.now, Kind: event.KindArrival, Req: event.RequestID(i + 1),
		Inst: event.NoInstance, Peer: event.NoInstance, Tokens: int64(r.InputTokens),
		Want: int64(st.want), Ref: r.At, Class: r.Class}
	s.emit(&s.record)
	s.observeStale()
	s.fact(s.core.Arrive(s.now, core.Request{ID: event.RequestID(i + 1), InputTokens: r.InputTokens,
		PrefixGroup: r.PrefixGroup, PrefixTokens: r.PrefixTokens, CacheGroup: st.cgroup, CacheTokens: int(st.ctokens)}))
}

// end marks request i ended and releases the states of the ended
// requests at the front of the ring.
func (s *Sim) end(i int32) {
	s.state(i).ended = true
	s.open--
	for s.base < s.top && s.st[s.base&s.mask].ended {
		s.base++
	}
}

func (s *Sim) placePrefill(i int32, inst int32, cause event.Cause) {
	st := s.state(i)
	st.prefill = inst
	s.emitReq(event.KindAdmit, i, inst, -1, 0, cause)
	e := &s.eng[inst]
	e.prefillQ = append(e.prefillQ, i)
	s.poke(e)
}

func (s *Sim) placeDecode(i int32, inst int32) {
	st := s.state(i)
	st.decode = inst
	crossed := inst != st.prefill
	cause := event.CauseNone
	if crossed {
		cause = event.CauseCrossed
	}
	ctx := st.ctx()
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
	st := s.state(i)
	s.emitReq(event.KindKVDone, i, st.prefill, e.id, st.ctx(), event.CauseNone)
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
		st := s.state(i)
		c := st.ctx()
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
		st := s.state(i)
		n := min(int(st.input-st.done), b.ChunkTokens, budget)
		if !st.started {
			// The first chunk: tokens this engine has cached for the
			// prompt's prefix group are not computed again (the last
			// prompt token always is).
			st.started = true
			if e.cache != nil {
				st.done = int32(min(e.cache.lookup(st.group, int(st.prefix)), int(st.input)-1))
				e.cache.hits += int64(st.done)
				n = min(int(st.input-st.done), b.ChunkTokens, budget)
			}
			s.emitReq(event.KindPrefillStart, i, e.id, -1, int64(st.done), event.CauseNone)
		}
		secs += e.prof.PrefillSpan(int(st.done), int(st.done)+n)
		e.chunks = append(e.chunks, chunk{req: i, tokens: n, last: int(st.done)+n >= int(st.input)})
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
		st := s.state(i)
		st.produced += int32(e.iters - st.joinIter)
		st.running = false
		e.ctx -= st.ctx()
	}
	st := s.state(i)
	s.emitReq(event.KindPreempt, i, e.id, -1, st.ctx(), event.CauseNone)
	e.pendingCtx += st.ctx()
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
		st := s.state(c.req)
		st.done += int32(c.tokens)
		if c.last {
			s.prefillDone(e, c.req)
		}
	}
	w := k
	for j := k - 1; j >= 0; j-- {
		// A finished prompt's request may have ended already (a one-token
		// answer): its chunk, not its state, says it is done.
		if !e.chunks[j].last {
			w--
			e.prefillQ[w] = e.prefillQ[j]
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
		st := s.state(i)
		e.held -= int64(j.total)
		st.produced++
		if s.cfg.TokenHook != nil {
			s.cfg.TokenHook(event.RequestID(i+1), int(st.produced), s.now)
		}
		if st.produced >= st.want {
			s.finish(i, e.id)
			continue
		}
		st.joinIter, st.running = e.iters, true
		e.ctx += st.ctx()
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
		st := s.state(f.req)
		st.produced, st.running = st.want, false
		e.ctx -= int64(st.input) + int64(st.want)
		s.finish(f.req, e.id)
	}
}

// observe tells the core what every engine did since the last tick.
func (s *Sim) observe() {
	s.observedAt, s.observed = s.now, true
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

// observeStale observes every engine when the last observation is
// Config.ObserveEvery old or older (never, with a negative ObserveEvery),
// so that the core places a request on a view at most that stale.
func (s *Sim) observeStale() {
	every := s.cfg.ObserveEvery
	if every == 0 {
		every = DefaultObserveEvery
	}
	if every < 0 || s.observed && s.now-s.observedAt < every {
		return
	}
	s.observe()
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
			st := s.state(f.req)
			k := int(st.produced) + int(e.iters+j-st.joinIter)
			s.cfg.TokenHook(event.RequestID(f.req+1), k, at)
		}
	}
}

func (s *Sim) prefillDone(e *engine, i int32) {
	st := s.state(i)
	st.produced = 1
	if e.cache != nil {
		e.cache.insert(st.group, int(min(st.prefix, st.input)))
		if st.cgroup != 0 {
			e.cache.insertAfter(st.cgroup, int(min(st.ctokens, st.input)), st.group)
		}
	}
	s.emitReq(event.KindPrefillDone, i, e.id, -1, 0, event.CauseNone)
	if s.cfg.TokenHook != nil {
		s.cfg.TokenHook(event.RequestID(i+1), 1, s.now)
	}
	req := core.Request{ID: event.RequestID(i + 1), InputTokens: int(st.input), PrefillInst: event.Instance(e.id)}
	s.observeStale()
	if st.want <= 1 {
		// The answer is complete with its first token: no decode leg.
		req.NoDecode, req.OutputTokens = true, 1
		req.TTFT, req.TPOT = s.now-st.at, event.Never
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
	st := s.state(i)
	cause := event.CauseStop
	if st.capped {
		cause = event.CauseLength
	}
	s.emitReq(event.KindFinish, i, inst, -1, int64(st.produced), cause)
	if st.decode >= 0 {
		s.fact(s.core.Finished(s.now, event.Instance(inst), core.Request{ID: event.RequestID(i + 1), InputTokens: int(st.input),
			PrefillInst: event.Instance(st.prefill), DecodeInst: event.Instance(inst), ContextTokens: st.ctx(),
			OutputTokens: int(st.produced), TTFT: st.firstAt - st.at,
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
	for i := s.base; i < s.top; i++ {
		st := s.state(i)
		if st.ended {
			continue
		}
		produced := int64(st.produced)
		if st.running {
			produced += s.eng[st.decode].itersNow(s.now) - st.joinIter
		}
		s.emitReq(event.KindExpire, i, -1, -1, produced, event.CauseDrainLimit)
		st.ended = true
		s.stats.Expired++
	}
	s.open, s.base = 0, s.top
}

// itersNow is how many decode iterations the engine has completed by now,
// counting a span in progress.
func (e *engine) itersNow(now event.Time) int64 {
	if e.inSpan {
		return e.spanIters0 + e.itersBy(now)
	}
	return e.iters
}
