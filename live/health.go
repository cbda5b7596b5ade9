package live

import (
	"bufio"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// Engine health: a breaker per engine, the probes that readmit an ejected
// engine, and a liveness sweep over idle ones.
//
//   - A connection failure (refused, reset, EOF before an answer) or a 5xx
//     other than 503 (busy is not broken) counts one failure; FailuresToEject consecutive ones open the
//     breaker: the owner marks the engine down (EngineDown) and ends the
//     legs still on it.
//   - A timeout does not count by itself: it makes the router probe the
//     engine's /health at once; a failed probe counts one failure (a
//     flooded engine times out but answers /health; a wedged one does not).
//   - Any answer (a 200, or a 4xx: the request's fault) closes the count.
//   - An ejected engine is probed every ProbeInterval; it is readmitted
//     (EngineUp under the next generation) when /health answers 200
//     and its process_start_time_seconds differs from the one seen
//     before: a new process. An engine that exposes no start time is
//     readmitted on /health alone. The process that failed is readmitted
//     (in its generation) once it has answered every probe for
//     SameProcessHold, doubled for each earlier readmission of it.
//   - Every SweepInterval, engines with no leg in flight and no answer
//     since the last sweep are probed the same way; a sweep that finds a
//     new process start on an engine that was never ejected (it restarted
//     between two requests) reports the new generation too.

// ejected says whether the breaker is open (the engine is down).
func (b *breaker) ejected() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// breaker is one engine's failure count and probe state.
type breaker struct {
	mu        sync.Mutex
	fails     int
	open      bool    // ejected: the owner was told EngineDown
	suspect   bool    // a timeout's probe is running
	sweeping  bool    // a sweep probe is running
	spared    bool    // at the threshold but kept in: the last engine up (logged once)
	startSeen float64 // process_start_time_seconds last read (0: unknown)
	sameBack  int     // readmissions of the process startSeen names
	gen       uint64  // the generation last reported to the core
	busy      atomic.Int64
	lastOK    atomic.Int64 // router-clock ns of the last answer
}

// legGuard lets the owner end a leg whose engine it ejected: the handler
// arms it for the duration of each leg, and kill cancels the leg's
// context and marks it dead, so the handler ends (or re-places) the
// request with cause engine_down.
type legGuard struct {
	mu     sync.Mutex
	inst   event.Instance
	cancel context.CancelFunc
	dead   bool
	armed  bool
}

func (g *legGuard) arm(inst event.Instance, cancel context.CancelFunc) {
	g.mu.Lock()
	g.inst, g.cancel, g.dead, g.armed = inst, cancel, false, true
	g.mu.Unlock()
}

func (g *legGuard) disarm() {
	g.mu.Lock()
	g.armed, g.cancel = false, nil
	g.mu.Unlock()
}

// kill ends the armed leg when it runs on inst (owner).
func (g *legGuard) kill(inst event.Instance) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed && g.inst == inst && g.cancel != nil {
		g.dead = true
		g.cancel()
	}
}

func (g *legGuard) isDead() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dead
}

// armLeg derives the leg's context on e and arms f's guard; the returned
// func (idempotent) disarms it and cancels the context.
func (l *leg) armLeg(ctx context.Context, e *engine) (context.Context, func()) {
	lctx, cancel := context.WithCancel(ctx)
	l.f.guard.arm(e.idx, cancel)
	e.br.busy.Add(1)
	var once sync.Once
	return lctx, func() {
		once.Do(func() {
			l.f.guard.disarm()
			e.br.busy.Add(-1)
			cancel()
		})
	}
}

// blame settles a decode leg's 5xx when its KV came from another engine:
// a failed pull is the producer's fault when the producer no longer
// answers, else the decode engine's.
func (r *Router) blame(pe, de *engine) {
	go func() {
		if ok, _ := r.probeHealth(pe); ok {
			r.failed(de, "5xx")
		} else {
			r.failed(pe, "probe")
		}
	}()
}

// answered closes e's failure count: it answered (a 200 or a 4xx).
func (r *Router) answered(e *engine) {
	e.br.lastOK.Store(int64(r.now()))
	e.br.mu.Lock()
	e.br.fails, e.br.spared = 0, false
	e.br.mu.Unlock()
}

// failing says whether e is ejected or at the ejection threshold (the
// last engine up, kept in): not an engine to count on (/ready).
func (r *Router) failing(e *engine) bool {
	e.br.mu.Lock()
	defer e.br.mu.Unlock()
	return e.br.open || e.br.fails >= r.cfg.FailuresToEject
}

// failed counts one failure against e (kind: connect, 5xx, probe); at the
// threshold the breaker opens and e is ejected.
func (r *Router) failed(e *engine, kind string) {
	r.met.failures.WithLabelValues(e.name, kind).Inc()
	e.br.mu.Lock()
	e.br.fails++
	due := !e.br.open && e.br.fails >= r.cfg.FailuresToEject
	e.br.mu.Unlock()
	if due && r.claimEjection(e) {
		r.eject(e, kind)
	}
}

// claimEjection opens e's breaker unless e is the last engine up: that
// one stays in with its failures counted (as the reference router never
// ejects its last engine), so that a blip on the router's own network
// cannot eject every engine at once (an ejected engine comes back as a
// new process, or after SameProcessHold). One decision at a time, so two engines failing
// together cannot both take the last place.
func (r *Router) claimEjection(e *engine) bool {
	r.ejectMu.Lock()
	defer r.ejectMu.Unlock()
	up := 0
	for _, o := range r.engines {
		if o != e && !o.br.ejected() && !o.cordoned.Load() {
			up++
		}
	}
	e.br.mu.Lock()
	defer e.br.mu.Unlock()
	if e.br.open {
		return false
	}
	if up == 0 {
		if !e.br.spared {
			e.br.spared = true
			r.logf("narwhal-bench: engine %s failed %d times in a row but is the last engine up: it stays in (GET /ready answers 503 until it answers)", e.name, e.br.fails)
		}
		return false
	}
	e.br.open = true
	return true
}

// timedOut probes e at once after a leg on it timed out; only a failed
// probe counts against it.
func (r *Router) timedOut(e *engine) {
	r.met.failures.WithLabelValues(e.name, "timeout").Inc()
	e.br.mu.Lock()
	if e.br.open || e.br.suspect {
		e.br.mu.Unlock()
		return
	}
	e.br.suspect = true
	e.br.mu.Unlock()
	go func() {
		ok, _ := r.probeHealth(e)
		e.br.mu.Lock()
		e.br.suspect = false
		e.br.mu.Unlock()
		if ok {
			r.answered(e)
		} else {
			r.failed(e, "probe")
		}
	}()
}

// eject tells the owner e is down and starts its readmission probes.
func (r *Router) eject(e *engine, kind string) {
	r.met.ejections.WithLabelValues(e.name).Inc()
	r.logf("narwhal-bench: engine %s ejected after %d consecutive failures (last: %s); probing it every %v (readmitted as a new process, or as this one after a hold)",
		e.name, r.cfg.FailuresToEject, kind, r.cfg.ProbeInterval)
	r.send(msg{kind: msgEngine, inst: e.idx, up: false})
	go r.readmit(e)
}

// readmit probes an ejected engine until it answers as a new process, or
// as the same one for the hold (SameProcessHold).
func (r *Router) readmit(e *engine) {
	e.br.mu.Lock()
	known := e.br.startSeen != 0
	e.br.mu.Unlock()
	if !known {
		// No sweep read its start time yet: the process that failed, if
		// it still answers, is the baseline a readmission must differ from.
		if _, start := r.probeHealth(e); start != 0 {
			e.br.mu.Lock()
			e.br.startSeen = start
			e.br.mu.Unlock()
		}
	}
	t := time.NewTicker(r.cfg.ProbeInterval)
	defer t.Stop()
	var healthySince time.Time // the same process answering since (zero: not answering)
	for {
		select {
		case <-r.stopped:
			return
		case <-t.C:
		}
		ok, start := r.probeHealth(e)
		if !ok {
			healthySince = time.Time{}
			continue
		}
		e.br.mu.Lock()
		fresh := (start == 0 && e.br.startSeen == 0) || (start != 0 && start != e.br.startSeen)
		if !fresh {
			hold := r.cfg.SameProcessHold << min(e.br.sameBack, 4)
			if r.cfg.SameProcessHold < 0 {
				e.br.mu.Unlock()
				if healthySince.IsZero() {
					healthySince = time.Now()
					r.logf("narwhal-bench: engine %s answers /health but runs the same process (started %.3f): it stays out until it restarts", e.name, start)
				}
				continue
			}
			if healthySince.IsZero() {
				e.br.mu.Unlock()
				healthySince = time.Now()
				r.logf("narwhal-bench: engine %s answers /health but runs the same process (started %.3f): readmitted if it answers every probe for %v, or when it restarts", e.name, start, hold)
				continue
			}
			if time.Since(healthySince) < hold {
				e.br.mu.Unlock()
				continue
			}
			e.br.sameBack++
			gen := e.br.gen
			e.br.fails, e.br.open = 0, false
			e.br.mu.Unlock()
			e.br.lastOK.Store(int64(r.now()))
			r.met.readmits.WithLabelValues(e.name).Inc()
			r.logf("narwhal-bench: engine %s readmitted, the same process (generation %d), after answering for %v", e.name, gen, hold)
			r.send(msg{kind: msgEngine, inst: e.idx, up: true, gen: gen})
			return
		}
		if start != 0 {
			e.br.startSeen = start
			e.br.sameBack = 0
		}
		e.br.gen++
		gen := e.br.gen
		e.br.fails, e.br.open = 0, false
		e.br.mu.Unlock()
		e.br.lastOK.Store(int64(r.now()))
		r.met.started.WithLabelValues(e.name).Set(start)
		r.met.readmits.WithLabelValues(e.name).Inc()
		r.logf("narwhal-bench: engine %s readmitted as generation %d (process started %.3f)", e.name, gen, start)
		r.send(msg{kind: msgEngine, inst: e.idx, up: true, gen: gen})
		return
	}
}

// sweepLoop probes idle engines every SweepInterval, from the start.
func (r *Router) sweepLoop() {
	if r.cfg.SweepInterval < 0 {
		return
	}
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	for {
		now := int64(r.now())
		for _, e := range r.engines {
			if e.br.busy.Load() > 0 || (e.br.lastOK.Load() > 0 && now-e.br.lastOK.Load() < int64(r.cfg.SweepInterval)) {
				continue
			}
			e.br.mu.Lock()
			skip := e.br.open || e.br.sweeping
			e.br.sweeping = !skip
			e.br.mu.Unlock()
			if !skip {
				go r.sweepOne(e)
			}
		}
		select {
		case <-r.stopped:
			return
		case <-t.C:
		}
	}
}

func (r *Router) sweepOne(e *engine) {
	ok, start := r.probeHealth(e)
	e.br.mu.Lock()
	e.br.sweeping = false
	e.br.mu.Unlock()
	if !ok {
		r.failed(e, "probe")
		return
	}
	r.answeredAs(e, start)
}

// answeredAs records that a probe of e was answered by the process that
// started at start (0: unknown): a start other than the one seen before
// is a restart between two probes, which takes the next generation.
func (r *Router) answeredAs(e *engine, start float64) {
	e.br.mu.Lock()
	var gen uint64
	if start != 0 && start != e.br.startSeen {
		if e.br.startSeen != 0 {
			e.br.gen++ // it restarted between two requests
			gen = e.br.gen
		}
		e.br.startSeen = start
	}
	e.br.mu.Unlock()
	r.answered(e)
	if start != 0 {
		r.met.started.WithLabelValues(e.name).Set(start)
	}
	if gen != 0 {
		r.logf("narwhal-bench: engine %s restarted between two probes: generation %d", e.name, gen)
		r.send(msg{kind: msgEngine, inst: e.idx, up: true, gen: gen})
	}
}

// probeHealth GETs e's /health (200 expected) and then its /metrics for
// process_start_time_seconds (0 when absent), each bounded by
// ProbeTimeout.
func (r *Router) probeHealth(e *engine) (bool, float64) {
	get := func(path string) (*http.Response, context.CancelFunc, error) {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ProbeTimeout)
		hq, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+path, nil)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		resp, err := r.client.Do(hq)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		return resp, cancel, nil
	}
	resp, cancel, err := get("/health")
	if err != nil {
		return false, 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	cancel()
	if resp.StatusCode != http.StatusOK {
		return false, 0
	}
	if !e.modelsRead.Load() && e.modelsFailed.Load() < 3 {
		// Each engine's list once (an engine started with a longer context
		// counts too); three failed tries and the router stops asking.
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ProbeTimeout)
		if r.learnContext(ctx, e) {
			e.modelsRead.Store(true)
		} else {
			e.modelsFailed.Add(1)
		}
		cancel()
	}
	resp, cancel, err = get("/metrics")
	if err != nil {
		return true, 0
	}
	defer cancel()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return true, 0
	}
	return true, startTime(io.LimitReader(resp.Body, 16<<20))
}

// startTime reads process_start_time_seconds from a Prometheus text
// exposition (0 when absent). Only a finite time after the epoch counts:
// NaN differs from every start seen before (each probe would read as a
// restart) and neither NaN nor an infinity encodes in GET /state.
func startTime(rd io.Reader) float64 {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := api.MetricSample(sc.Text())
		if !ok || name != "process_start_time_seconds" {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil && v > 0 && !math.IsInf(v, 1) {
			return v
		}
	}
	return 0
}

func (r *Router) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf(format, args...)
	}
}
