package engine

import (
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// Defaults for a zero Config field: the simulator's batch defaults
// (sim.DefaultBatch; engine may not import sim).
const (
	DefaultChunkTokens  = 2048
	DefaultBudgetTokens = 16384
)

// Config is one engine: its timing profile and its batching.
type Config struct {
	Profile timing.Profile
	// Batch is the engine's batching (zero ChunkTokens or BudgetTokens
	// take DefaultChunkTokens, DefaultBudgetTokens; the other limits 0
	// mean none).
	Batch
}

// Kind is what happened to a request at the end of an iteration.
type Kind uint8

const (
	// PrefillDone: the prompt's last chunk ran; the first token exists
	// (a Token event with K=1 follows).
	PrefillDone Kind = iota + 1
	// Token: output token K (1-based) exists.
	Token
	// Done: the request produced its last token and left the engine.
	Done
)

func (k Kind) String() string {
	switch k {
	case PrefillDone:
		return "prefill_done"
	case Token:
		return "token"
	case Done:
		return "done"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one fact of an iteration's end.
type Event struct {
	Kind Kind
	ID   uint64
	K    int // Token: the token's 1-based index in the answer
}

// seq is one request inside the engine.
type seq struct {
	id       uint64
	input    int  // prompt tokens
	done     int  // prompt tokens computed (or held)
	cached   int  // prompt tokens the prefix cache holds
	started  bool // first chunk scheduled
	want     int  // answer tokens in all
	produced int  // answer tokens so far
	where    place
	// preemption: a preempted stream must compute its context again
	// (recomp tokens: prompt + answer so far) before it decodes again
	recomp  int    // tokens to recompute; 0 when the stream holds its KV
	rdone   int    // of which computed
	admit   uint64 // admission order: the newest admitted is preempted first
	preempt int    // times preempted
}

type place uint8

const (
	inPrefill place = iota + 1
	inWaiting
	inRunning
	inRecompute // admitted again after a preemption, recomputing its context
)

type chunk struct {
	s      *seq
	tokens int
}

// Engine is one engine's continuous-batching state. It is not safe for
// concurrent use: one owner drives it.
type Engine struct {
	cfg     Config
	maxSeqs int
	// lookup, when set (SetLookup), gives a prompt's cached tokens when
	// its first chunk is scheduled.
	lookup func(id uint64, promptTokens int) int

	seqs     map[uint64]*seq
	prefillQ []*seq // prompts, FIFO
	waiting  []*seq // decode streams waiting to join, FIFO
	running  []*seq // the running decode batch
	ctx      int64  // resident context of the running batch
	recomp   []*seq // preempted streams admitted again, recomputing, in admission order
	held     int64  // KV the recomputing streams hold (their whole context)
	admits   uint64 // admissions so far (orders running and recomputing streams)

	// the iteration in flight
	busy     bool
	chunks   []chunk
	rchunks  []chunk // recompute chunks
	decoding []*seq  // running streams the iteration advances

	// decode-only spans, timed in closed form as the simulator does
	spanOn   bool // the last iteration was a span iteration
	spanKeep bool // nothing changed since, the span may continue
	spanCtx0 int64
	spanM    int64
	spanJ    int64 // span iterations started

	// counters
	iters       int64
	preemptions int64
	events      []Event
}

// New returns an idle engine. A zero ChunkTokens or BudgetTokens takes
// the default; it panics on a Config the simulator would refuse.
func New(cfg Config) *Engine {
	if cfg.ChunkTokens == 0 {
		cfg.ChunkTokens = DefaultChunkTokens
	}
	if cfg.BudgetTokens == 0 {
		cfg.BudgetTokens = DefaultBudgetTokens
	}
	if err := cfg.Validate(); err != nil {
		panic("engine: " + err.Error())
	}
	m := cfg.BudgetTokens
	if cfg.MaxSeqs > 0 && cfg.MaxSeqs < m {
		m = cfg.MaxSeqs
	}
	return &Engine{cfg: cfg, maxSeqs: m, seqs: map[uint64]*seq{}}
}

// Validate reports every bad field (after defaults).
func (c Config) Validate() error {
	if err := c.Profile.Validate(); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	return c.Batch.Validate()
}

// AddPrefill queues a prompt of promptTokens tokens, of which cachedTokens
// are in the prefix cache (the last prompt token is always computed). Its
// answer has want tokens in all: want 1 is a prefill-only leg (it ends
// with its first token, as a prefill engine's leg does); want > 1 decodes
// here after the prefill, joining the running batch at the next iteration.
// An id already in the engine is an error.
func (e *Engine) AddPrefill(id uint64, promptTokens, cachedTokens, want int) error {
	if promptTokens < 1 || want < 1 || cachedTokens < 0 {
		return fmt.Errorf("engine: request %d: prompt %d, cached %d, want %d: expected prompt >= 1, cached >= 0, want >= 1",
			id, promptTokens, cachedTokens, want)
	}
	if _, dup := e.seqs[id]; dup {
		return fmt.Errorf("engine: request %d: already in the engine", id)
	}
	s := &seq{id: id, input: promptTokens, cached: cachedTokens, want: want, where: inPrefill}
	e.seqs[id] = s
	e.prefillQ = append(e.prefillQ, s)
	e.spanKeep = false
	return nil
}

// SetLookup makes f the engine's prefix-cache lookup: when a prompt's
// first chunk is scheduled, f(id, prompt tokens) says how many of them
// the cache holds, replacing AddPrefill's count, as vLLM's scheduler looks
// the cache up when it first schedules a waiting request (a prompt queued
// behind another of its prefix group finds what that one cached). f runs
// inside Start, on the caller's goroutine.
func (e *Engine) SetLookup(f func(id uint64, promptTokens int) int) { e.lookup = f }

// AddDecode queues a decode stream whose prompt's KV is here (it was
// transferred): promptTokens of prompt and produced answer tokens already
// exist (1 after a remote prefill), and it produces tokens produced+1 to
// want. It joins the running batch at the next iteration boundary, when
// max_seqs and the KV capacity allow (FCFS).
func (e *Engine) AddDecode(id uint64, promptTokens, produced, want int) error {
	if promptTokens < 1 || produced < 0 || want <= produced {
		return fmt.Errorf("engine: request %d: prompt %d, produced %d, want %d: expected prompt >= 1 and want > produced >= 0",
			id, promptTokens, produced, want)
	}
	if _, dup := e.seqs[id]; dup {
		return fmt.Errorf("engine: request %d: already in the engine", id)
	}
	s := &seq{id: id, input: promptTokens, done: promptTokens, started: true, want: want, produced: produced, where: inWaiting}
	e.seqs[id] = s
	e.waiting = append(e.waiting, s)
	e.spanKeep = false
	return nil
}

// Cancel removes a request wherever it is and frees its context; an
// iteration in flight still runs, but reports nothing for it. It reports
// whether the request was there.
func (e *Engine) Cancel(id uint64) bool {
	s, ok := e.seqs[id]
	if !ok {
		return false
	}
	delete(e.seqs, id)
	switch s.where {
	case inPrefill:
		e.prefillQ = remove(e.prefillQ, s)
	case inWaiting:
		e.waiting = remove(e.waiting, s)
	case inRunning:
		e.running = remove(e.running, s)
		e.ctx -= int64(s.input + s.produced)
	case inRecompute:
		e.recomp = remove(e.recomp, s)
		e.held -= int64(s.recomp)
	}
	s.where = 0
	e.spanKeep = false
	return true
}

func remove(list []*seq, s *seq) []*seq {
	for i, x := range list {
		if x == s {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// Start begins the next iteration, as the simulator's startIteration
// does. When the KV the running and recomputing streams hold exceeds the
// KV capacity, the newest admitted of them is preempted, again until it
// fits or one is left (vLLM's recompute preemption: its KV is freed, it
// goes to the front of the waiting queue, and once admitted again it
// computes its prompt and answer so far again, as chunks, before it
// decodes on). Without a preemption, waiting streams are admitted (up to
// max_seqs, and FCFS within the KV capacity). Then recompute chunks and
// prompt chunks fill what the running streams leave of the token budget.
// It returns the iteration's duration (at least 1 ns), or busy=false when
// there is nothing to run. Call Finish when the duration has passed.
// Start during an iteration panics.
func (e *Engine) Start() (d event.Time, busy bool) {
	if e.busy {
		panic("engine: Start during an iteration")
	}
	cfg := &e.cfg
	kv := cfg.KVCapacityTokens
	preempted := false
	for kv > 0 && len(e.running)+len(e.recomp) > 1 && e.ctx+e.held > kv {
		e.preemptNewest()
		preempted = true
	}
	k := 0
	for ; !preempted && k < len(e.waiting) && len(e.running)+len(e.recomp) < e.maxSeqs; k++ {
		s := e.waiting[k]
		c := int64(s.input + s.produced)
		if kv > 0 && len(e.running)+len(e.recomp) > 0 && e.ctx+e.held+c > kv {
			break
		}
		e.admits++
		s.admit = e.admits
		if s.recomp > 0 {
			s.where = inRecompute
			e.held += c
			e.recomp = append(e.recomp, s)
			continue
		}
		s.where = inRunning
		e.ctx += c
		e.running = append(e.running, s)
	}
	if k > 0 {
		e.waiting = append(e.waiting[:0], e.waiting[k:]...)
		e.spanKeep = false
	}
	m := len(e.running)
	budget := cfg.BudgetTokens - m
	e.chunks = e.chunks[:0]
	e.rchunks = e.rchunks[:0]
	var secs float64
	for _, s := range e.recomp {
		if budget <= 0 {
			break
		}
		n := min(s.recomp-s.rdone, cfg.ChunkTokens, budget)
		secs += cfg.Profile.PrefillSpan(s.rdone, s.rdone+n)
		e.rchunks = append(e.rchunks, chunk{s: s, tokens: n})
		budget -= n
	}
	for _, s := range e.prefillQ {
		if budget <= 0 {
			break
		}
		if !s.started {
			s.started = true
			if e.lookup != nil {
				s.cached = max(e.lookup(s.id, s.input), 0)
			}
			s.done = min(s.cached, s.input-1)
		}
		n := min(s.input-s.done, cfg.ChunkTokens, budget)
		secs += cfg.Profile.PrefillSpan(s.done, s.done+n)
		e.chunks = append(e.chunks, chunk{s: s, tokens: n})
		budget -= n
	}
	e.decoding = append(e.decoding[:0], e.running...)
	if len(e.chunks) > 0 || len(e.rchunks) > 0 {
		if m > 0 {
			secs += cfg.Profile.Interval(e.ctx)
		}
		e.spanOn = false
		e.busy = true
		return max(event.Seconds(secs), 1), true
	}
	if m == 0 {
		e.spanOn = false
		return 0, false
	}
	// Decode only. The simulator prices a run of decode-only iterations
	// with the same streams in closed form from its first iteration, and
	// rounds once per span; each iteration here is the difference of two
	// rounded span ends, so the sum is the simulator's time to the ns.
	if !e.spanOn || !e.spanKeep {
		e.spanOn, e.spanCtx0, e.spanM, e.spanJ = true, e.ctx, int64(m), 0
	}
	e.spanKeep = true
	e.spanJ++
	e.busy = true
	return e.spanEnd(e.spanJ) - e.spanEnd(e.spanJ-1), true
}

// preemptNewest preempts the running or recomputing stream admitted last:
// its KV is freed and it goes to the front of the waiting queue, to
// compute its prompt and its answer so far again once admitted.
func (e *Engine) preemptNewest() {
	var v *seq
	for _, s := range e.running {
		if v == nil || s.admit > v.admit {
			v = s
		}
	}
	for _, s := range e.recomp {
		if v == nil || s.admit > v.admit {
			v = s
		}
	}
	if v.where == inRunning {
		e.running = remove(e.running, v)
		e.ctx -= int64(v.input + v.produced)
	} else {
		e.recomp = remove(e.recomp, v)
		e.held -= int64(v.recomp)
	}
	v.recomp, v.rdone = v.input+v.produced, 0
	v.where = inWaiting
	v.preempt++
	e.preemptions++
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = v
	e.spanKeep = false
}

// spanEnd is when the j-th iteration of the current span ends, relative
// to the span's start (the simulator's formula).
func (e *Engine) spanEnd(j int64) event.Time {
	if j == 0 {
		return 0
	}
	p := e.cfg.Profile
	a := p.Slope*float64(e.spanCtx0) + p.Intercept
	jf := float64(j)
	secs := jf*a + p.Slope*float64(e.spanM)*jf*(jf-1)/2
	return max(event.Seconds(secs), event.Time(j))
}

// Finish ends the iteration in flight and returns what happened, in the
// simulator's order: each running stream's next token (and Done for
// those that reached their length), then each prompt whose last chunk
// ran (PrefillDone, its first token, and Done for a prefill-only leg; a
// local decode joins the waiting queue). The slice is reused by the next
// call. Finish with no iteration in flight returns nil.
func (e *Engine) Finish() []Event {
	if !e.busy {
		return nil
	}
	e.busy = false
	e.iters++
	ev := e.events[:0]
	finished := false
	if len(e.decoding) > 0 {
		for _, s := range e.decoding {
			if s.where != inRunning {
				continue // cancelled during the iteration
			}
			s.produced++
			e.ctx++
			ev = append(ev, Event{Kind: Token, ID: s.id, K: s.produced})
		}
		w := 0
		for _, s := range e.running {
			if s.produced >= s.want {
				ev = append(ev, Event{Kind: Done, ID: s.id})
				e.ctx -= int64(s.input + s.produced)
				delete(e.seqs, s.id)
				s.where = 0
				finished = true
				continue
			}
			e.running[w] = s
			w++
		}
		clear(e.running[w:])
		e.running = e.running[:w]
	}
	if len(e.rchunks) > 0 {
		// A stream whose recompute ran to its end samples its next token
		// (the recompute's last position, as a prefill's gives the first)
		// and decodes on in the running batch: its KV is already held.
		gone := false
		for _, c := range e.rchunks {
			s := c.s
			if s.where != inRecompute {
				gone = true // cancelled during the iteration
				continue
			}
			s.rdone += c.tokens
			if s.rdone < s.recomp {
				continue
			}
			gone = true
			e.held -= int64(s.recomp)
			s.recomp, s.rdone = 0, 0
			s.produced++
			ev = append(ev, Event{Kind: Token, ID: s.id, K: s.produced})
			if s.produced >= s.want {
				ev = append(ev, Event{Kind: Done, ID: s.id})
				delete(e.seqs, s.id)
				s.where = 0
				continue
			}
			s.where = inRunning
			e.ctx += int64(s.input + s.produced)
			e.running = append(e.running, s)
		}
		if gone {
			w := 0
			for _, s := range e.recomp {
				if s.where == inRecompute {
					e.recomp[w] = s
					w++
				}
			}
			clear(e.recomp[w:])
			e.recomp = e.recomp[:w]
			e.spanKeep = false
		}
		e.rchunks = e.rchunks[:0]
	}
	if len(e.chunks) > 0 {
		gone := 0
		for _, c := range e.chunks {
			s := c.s
			if s.where != inPrefill {
				gone++ // cancelled during the iteration: already out of the queue
				continue
			}
			s.done += c.tokens
			if s.done < s.input {
				continue
			}
			gone++
			s.produced = 1
			ev = append(ev, Event{Kind: PrefillDone, ID: s.id}, Event{Kind: Token, ID: s.id, K: 1})
			if s.want <= 1 {
				ev = append(ev, Event{Kind: Done, ID: s.id})
				delete(e.seqs, s.id)
				s.where = 0
				continue
			}
			s.where = inWaiting
			e.waiting = append(e.waiting, s)
		}
		if gone > 0 {
			w := 0
			for _, s := range e.prefillQ {
				if s.where == inPrefill {
					e.prefillQ[w] = s
					w++
				}
			}
			clear(e.prefillQ[w:])
			e.prefillQ = e.prefillQ[:w]
		}
		e.chunks = e.chunks[:0]
	}
	if finished {
		e.spanKeep = false
	}
	clear(e.decoding)
	e.decoding = e.decoding[:0]
	e.events = ev
	return ev
}

// Busy reports an iteration in flight.
func (e *Engine) Busy() bool { return e.busy }

// Idle reports that the engine holds no request.
func (e *Engine) Idle() bool { return len(e.seqs) == 0 }

// Gauges is the engine's state for /metrics.
type Gauges struct {
	Running int // streams in the running decode batch
	Waiting int // decode streams waiting to join
	Prefill int // prompts queued or being prefilled
	// Started counts the prompts of Prefill whose prefill has begun (a
	// chunk scheduled): vLLM counts them running, the rest waiting.
	Started  int
	Requests int // requests in the engine (all of the above)
	// ContextTokens is the running batch's resident context.
	ContextTokens int64
	// PrefillTokens is the prompt tokens already computed of prompts
	// still prefilling, and the context of waiting streams: KV the engine
	// holds outside the running batch.
	PrefillTokens int64
	// Recomputing counts preempted streams admitted again and computing
	// their context again (RecomputeTokens: the KV they hold).
	Recomputing     int
	RecomputeTokens int64
	// Iterations counts finished iterations.
	Iterations int64
	// Preemptions counts preemptions (a stream preempted twice counts
	// twice), as vLLM's vllm:num_preemptions.
	Preemptions int64
}

// Gauges returns the engine's gauges now.
func (e *Engine) Gauges() Gauges {
	g := Gauges{Running: len(e.running), Waiting: len(e.waiting), Prefill: len(e.prefillQ),
		Requests: len(e.seqs), ContextTokens: e.ctx, Iterations: e.iters,
		Recomputing: len(e.recomp), RecomputeTokens: e.held, Preemptions: e.preemptions}
	for _, s := range e.prefillQ {
		g.PrefillTokens += int64(s.done)
		if s.started {
			g.Started++
		}
	}
	for _, s := range e.waiting {
		if s.recomp == 0 { // a preempted stream's KV was freed
			g.PrefillTokens += int64(s.input + s.produced)
		}
	}
	return g
}
