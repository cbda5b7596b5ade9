package stub

import (
	"sync"
	"time"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/event"
)

type cmdKind uint8

const (
	cmdPrefill cmdKind = iota + 1 // prefill here (then decode here when want > 1)
	cmdDecode                     // the KV arrived: decode from token 2
	cmdCancel
)

type cmd struct {
	kind cmdKind
	r    *live
}

// live is one request as its handler and the owner goroutine share it.
type live struct {
	id     uint64
	prompt int
	want   int
	start  time.Time // arrival, for TTFT

	mu     sync.Mutex
	tokens int  // answer tokens produced so far
	done   bool // the engine is finished with it
	last   time.Time
	first  time.Time // the first token, for the request's TPOT
	// For vLLM's interval histograms (metrics.finished): when this engine
	// first scheduled the request (its prompt's first chunk; a decode
	// leg's admission to the running batch; a preemption's re-wait
	// changes neither), and the first token this engine's batch produced
	// after that (token 1 of a prompt prefilled here; token 2 of a
	// decode leg, whose token 1 came with the KV).
	scheduled, firstHere time.Time
	// hashes are the prompt's block hashes when the engine keeps a prefix
	// cache (set before submit); cached is how many prompt tokens it
	// served from it (owner goroutine, under mu).
	hashes []uint64
	cached int
	notify chan struct{} // one pending wake-up for the handler
}

func newLive(id uint64, prompt, want int) *live {
	return &live{id: id, prompt: prompt, want: want, start: time.Now(), notify: make(chan struct{}, 1)}
}

// progress returns the tokens so far and whether the request is done.
func (l *live) progress() (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens, l.done
}

func (l *live) wake() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// schedule records r's first scheduling at t (later ones are ignored,
// as vLLM keeps the first SCHEDULED event).
func (l *live) schedule(t time.Time) {
	l.mu.Lock()
	if l.scheduled.IsZero() {
		l.scheduled = t
	}
	l.mu.Unlock()
}

// immediate is always ready: the owner's "timer" for zero-cost iterations.
var immediate = func() chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// loop is the owner goroutine: the only code that touches the engine. It
// starts an iteration whenever the engine is idle and has work, after
// taking every command already queued (work arriving together is batched
// together, as in the simulator), and ends it when its scaled duration
// has passed on the wall clock.
func (s *Server) loop(e *engine.Engine) {
	defer close(s.loopDone)
	reqs := map[uint64]*live{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var wait <-chan time.Time // nil when no iteration is in flight
	// The prefix cache lives and dies with the engine (a restarted
	// server has none).
	var cache *prefixCache
	if pc := s.opts.PrefixCache; pc != nil {
		cache = newPrefixCache(pc.BlockTokens, pc.CapacityTokens)
	}
	if cache != nil {
		// Looked up when the prompt's first chunk is scheduled (vLLM counts
		// its queries and hits then too: a prompt cancelled while it waits
		// is never looked up).
		e.SetLookup(func(id uint64, prompt int) int {
			r := reqs[id]
			if r == nil {
				return 0
			}
			cached := cache.match(r.hashes, prompt)
			s.metrics.cacheQueries.Add(float64(prompt))
			s.metrics.cacheHits.Add(float64(cached))
			r.mu.Lock()
			r.cached = cached
			r.mu.Unlock()
			return cached
		})
	}
	// iterAt is when the iteration in flight (or the last) started: the
	// time the engine scheduled what it runs.
	var iterAt time.Time
	// prompts mirrors the engine's prefill queue (FIFO; a prompt leaves
	// it when cancelled or when its prefill ends). The engine begins
	// prompts in queue order, so those begun are a prefix: the first
	// Gauges().Started. begun is how many of them are marked scheduled.
	var prompts []*live
	begun := 0
	dropPrompt := func(r *live) {
		for i, x := range prompts {
			if x == r {
				copy(prompts[i:], prompts[i+1:])
				prompts[len(prompts)-1] = nil
				prompts = prompts[:len(prompts)-1]
				if i < begun {
					begun--
				}
				return
			}
		}
	}
	apply := func(c cmd) {
		switch c.kind {
		case cmdPrefill:
			if err := e.AddPrefill(c.r.id, c.r.prompt, 0, c.r.want); err != nil {
				panic(err) // ids are unique per server
			}
			reqs[c.r.id] = c.r
			prompts = append(prompts, c.r)
		case cmdDecode:
			if err := e.AddDecode(c.r.id, c.r.prompt, 1, c.r.want); err != nil {
				panic(err)
			}
			reqs[c.r.id] = c.r
		case cmdCancel:
			e.Cancel(c.r.id)
			delete(reqs, c.r.id)
			dropPrompt(c.r)
		}
	}
	for {
		select {
		case c := <-s.cmds:
			apply(c)
		drain:
			for {
				select {
				case c := <-s.cmds:
					apply(c)
				default:
					break drain
				}
			}
		case <-wait:
			wait = nil
			now := time.Now()
			for _, ev := range e.Finish() {
				r := reqs[ev.ID]
				if r == nil {
					continue
				}
				switch ev.Kind {
				case engine.PrefillDone:
					dropPrompt(r)
					if cache != nil {
						cache.insert(r.hashes)
						r.hashes = nil
					}
				case engine.Token:
					s.metrics.token(r, ev.K, now)
					r.mu.Lock()
					r.tokens, r.last = ev.K, now
					if r.firstHere.IsZero() {
						// A decode leg is scheduled when it joins the
						// running batch: the iteration that gives its
						// first token here.
						r.firstHere = now
						if r.scheduled.IsZero() {
							r.scheduled = iterAt
						}
					}
					r.mu.Unlock()
					r.wake()
				case engine.Done:
					delete(reqs, ev.ID)
					r.mu.Lock()
					r.done = true
					r.mu.Unlock()
					r.wake()
				}
			}
		case <-s.quit:
			timer.Stop()
			return
		}
		if wait == nil {
			at := time.Now()
			if d, busy := e.Start(); busy {
				iterAt = at
				if w := s.scale(time.Duration(d)); w > 0 {
					timer.Reset(w)
					wait = timer.C
				} else {
					wait = immediate
				}
			}
		}
		g := e.Gauges()
		// Prompts whose first chunk this iteration runs: scheduled at its
		// start (marked before the gauges say they began).
		for ; begun < g.Started && begun < len(prompts); begun++ {
			prompts[begun].schedule(iterAt)
		}
		s.gauges.Store(&g)
	}
}

// submit hands a command to the owner; false when the server is closing.
func (s *Server) submit(c cmd) bool {
	select {
	case s.cmds <- c:
		return true
	case <-s.quit:
		return false
	}
}

// modelTime converts seconds of model time to a Duration.
func modelTime(secs float64) time.Duration { return time.Duration(event.Seconds(secs)) }
