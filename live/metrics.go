package live

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// Metrics are the router's Prometheus series (GET /metrics), on a registry
// of its own so that several routers in one process (tests) never share a
// series. Label sets are bounded: outcomes are the five ends of /state's
// counts, causes are event.Cause names, engines are the fleet's instances,
// roles the four event.Role names.
//
// The owner goroutine sets what it owns (request counters, queue depth,
// in-flight, engine role/health/generation, moves, missing handoffs);
// handlers observe the latency histograms from their own timestamps on the
// router clock.
type Metrics struct {
	reg *prometheus.Registry

	arrived   prometheus.Counter
	requests  *prometheus.CounterVec // outcome, cause
	sloMet    prometheus.Counter
	inFlight  prometheus.Gauge
	queue     prometheus.Gauge
	wait      prometheus.Histogram
	ttft      prometheus.Histogram
	tpot      prometheus.Histogram
	e2e       prometheus.Histogram
	handoff   prometheus.Histogram
	noHandoff prometheus.Counter

	role      *prometheus.GaugeVec // engine, role
	up        *prometheus.GaugeVec // engine
	cordoned  *prometheus.GaugeVec // engine
	gen       *prometheus.GaugeVec // engine
	started   *prometheus.GaugeVec // engine
	moves     *prometheus.CounterVec
	failures  *prometheus.CounterVec // engine, kind
	ejections *prometheus.CounterVec // engine
	readmits  *prometheus.CounterVec // engine
	retries   *prometheus.CounterVec // stage
	spilled   prometheus.Counter
	tokenize  *prometheus.CounterVec // source

	journalAppend prometheus.Histogram
	journalErrors prometheus.Counter
	tick          prometheus.Histogram
}

// outcome names a terminal record the way /state's counts do.
func outcome(kind event.Kind, cause event.Cause) string {
	switch {
	case kind == event.KindFinish && cause == event.CauseCancel:
		return "cancelled"
	case kind == event.KindFinish:
		return "finished"
	case kind == event.KindRefuse:
		return "refused"
	case kind == event.KindExpire:
		return "expired"
	default:
		return "failed"
	}
}

// sloBuckets are histogram edges at fractions of an SLO, one edge exactly
// at it (the reference's edges), so attainment reads off a bucket, below
// them edges doubling from low seconds, so that a quantile of values far
// under the SLO (an idle fleet's admission wait, a short prompt's TTFT)
// is not read off one wide first bucket.
func sloBuckets(slo event.Time, low float64) []float64 {
	s := slo.Seconds()
	if s <= 0 {
		return prometheus.DefBuckets
	}
	fracs := []float64{0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0, 1.5, 3.0, 10.0}
	var b []float64
	for e := low; low > 0 && e < 0.8*fracs[0]*s; e *= 2 {
		b = append(b, e)
	}
	for _, f := range fracs {
		b = append(b, f*s)
	}
	return b
}

func newMetrics(arm string, slo event.SLO, names []string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		m.reg.MustRegister(g)
		return g
	}
	hist := func(name, help string, b []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b})
		m.reg.MustRegister(h)
		return h
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	gaugeVec := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(g)
		return g
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := gaugeVec("narwhal_router_info", "Always 1; the arm (controller) this router runs.", "arm")
	info.WithLabelValues(arm).Set(1)
	m.arrived = counter("narwhal_requests_arrived_total", "Requests decoded and offered to the core (GET /state counts.arrived).")
	m.requests = counterVec("narwhal_requests_total", "Requests ended, by outcome (finished, cancelled, refused, failed, expired: GET /state's counts) and journaled cause.", "outcome", "cause")
	m.sloMet = counter("narwhal_requests_slo_met_total", "Requests that ended meeting both SLOs (the journal's qualification rule: finished naturally, 2+ tokens, TTFT and TPOT within the fleet's SLO).")
	m.inFlight = gauge("narwhal_requests_in_flight", "Requests admitted and not ended, queued ones included.")
	m.queue = gauge("narwhal_admission_queue_depth", "Requests waiting in the core's admission queue.")
	m.wait = hist("narwhal_admission_wait_seconds", "Time from a request's arrival to the core's answer (a placement, a refusal or an expiry).", sloBuckets(slo.TTFT, 1e-4))
	m.ttft = hist("narwhal_ttft_seconds", "Time to first token as the journal defines it: from the scheduled send time (or arrival) to the prefill's return; once a request, none for a non-streamed answer one engine served whole.", sloBuckets(slo.TTFT, 1e-3))
	m.tpot = hist("narwhal_tpot_seconds", "Mean gap between output tokens after the first, per finished request with 2+ tokens (none for a non-streamed answer one engine served whole).", sloBuckets(slo.TPOT, 1e-4))
	m.e2e = hist("narwhal_request_duration_seconds", "End-to-end time of finished requests, from the scheduled send time (or arrival) to the last token.", prometheus.ExponentialBuckets(0.01, 2, 17))
	m.handoff = hist("narwhal_kv_handoff_seconds", "KV handoff time: from the prefill leg's return to the decode leg's first token on another engine.", prometheus.ExponentialBuckets(0.0005, 2, 16))
	m.noHandoff = counter("narwhal_missing_handoffs_total", "Prefill legs that returned no usable KV handoff (GET /state counts.no_handoff).")
	m.spilled = counter("narwhal_spilled_prompts_total", "Prompts run on an idle decode engine, as one request, because no prefill engine could start them within the TTFT SLO (burst spill; the journal's admit cause spilled).")
	m.tokenize = counterVec("narwhal_prompt_counts_total", "Prompt lengths by where they came from: engine (an engine's POST /tokenize, with --tokenize) or estimate (--tokenize on, but no engine answered in time).", "source")
	m.role = gaugeVec("narwhal_engine_role", "1 for the role each engine holds (prefill, decode, mixed, none), 0 for the others.", "engine", "role")
	m.up = gaugeVec("narwhal_engine_up", "1 unless the router ejected the engine (down); a cordoned engine counts as up (an operator took it out: narwhal_engine_cordoned).", "engine")
	m.cordoned = gaugeVec("narwhal_engine_cordoned", "1 while an operator has the engine cordoned (POST /engines/NAME/cordon): it takes no new legs, and those on it finish.", "engine")
	m.gen = gaugeVec("narwhal_engine_generation", "The engine's process generation as the router counts it (bumped when a new process start time is seen).", "engine")
	m.started = gaugeVec("narwhal_engine_process_start_time_seconds", "The engine's process_start_time_seconds as last probed (0 until read).", "engine")
	m.moves = counterVec("narwhal_role_moves_total", "Role moves (opening roles excluded), by new role and cause (controller, inline, operator, engine_down: covering a down engine's role; engine_up: back from that cover).", "to", "cause")
	m.failures = counterVec("narwhal_engine_failures_total", "Failures the breaker saw, by engine and kind (connect, 5xx, timeout, probe).", "engine", "kind")
	m.ejections = counterVec("narwhal_engine_ejections_total", "Times an engine was ejected (marked down).", "engine")
	m.readmits = counterVec("narwhal_engine_readmissions_total", "Times an ejected engine was readmitted: as a new process, or as the same one after a hold.", "engine")
	m.retries = counterVec("narwhal_leg_retries_total", "Requests re-placed after a failed leg, by the stage that failed (prefill, decode).", "stage")
	m.journalAppend = hist("narwhal_journal_append_seconds", "Time to hand one record to the journal (buffered append; commits and fsyncs run on the journal's own goroutine).", prometheus.ExponentialBuckets(1e-7, 4, 12))
	m.tick = hist("narwhal_core_tick_seconds", "Time the owner goroutine spent in one core tick: the controller's pass (an adaptive rehearsal's replays included) and the admission queue's expiries. No request is placed meanwhile.", prometheus.ExponentialBuckets(1e-5, 4, 10))
	m.journalErrors = counter("narwhal_journal_errors_total", "Records the journal failed to store (its sticky error: every record after the first failure).")
	for _, n := range names {
		m.up.WithLabelValues(n).Set(1)
		m.cordoned.WithLabelValues(n).Set(0)
		m.gen.WithLabelValues(n)
		m.started.WithLabelValues(n)
		m.ejections.WithLabelValues(n)
		m.readmits.WithLabelValues(n)
		// Every series a counter may take exists from the start, so
		// increase() and rate() count its first step from zero.
		for _, k := range []string{"connect", "5xx", "timeout", "probe"} {
			m.failures.WithLabelValues(n, k)
		}
	}
	for _, to := range []event.Role{event.RolePrefill, event.RoleDecode, event.RoleMixed, event.RoleNone} {
		for _, c := range []event.Cause{event.CauseController, event.CauseInline, event.CauseOperator, event.CauseEngineDown, event.CauseEngineUp} {
			m.moves.WithLabelValues(to.String(), c.String())
		}
	}
	for _, o := range []string{"finished", "cancelled", "refused", "failed", "expired"} {
		// The common series exist from the start, so rate() sees their zero.
		switch o {
		case "finished":
			m.requests.WithLabelValues(o, event.CauseStop.String())
			m.requests.WithLabelValues(o, event.CauseLength.String()) // the SLO alert subtracts it
		case "cancelled":
			m.requests.WithLabelValues(o, event.CauseCancel.String())
		case "refused":
			m.requests.WithLabelValues(o, event.CauseOverload.String())
		case "failed":
			m.requests.WithLabelValues(o, event.CauseEngineError.String())
		case "expired":
			m.requests.WithLabelValues(o, event.CauseQueueTimeout.String())
		}
	}
	for _, s := range []string{"prefill", "decode"} {
		m.retries.WithLabelValues(s)
	}
	return m
}

// Registry is the router's registry (tests and embedders add to it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ended counts a terminal record (owner).
func (m *Metrics) ended(kind event.Kind, cause event.Cause) {
	m.requests.WithLabelValues(outcome(kind, cause), cause.String()).Inc()
}

// engines sets every engine's role, health and generation from the core's
// view (owner, after records that change them). A cordoned engine is down
// in the core but up here unless its breaker is open.
func (m *Metrics) engines(v *core.View, names []string, engs []*engine) {
	for i, n := range names {
		in := v.Instance(event.Instance(i))
		for _, r := range []event.Role{event.RolePrefill, event.RoleDecode, event.RoleMixed, event.RoleNone} {
			val := 0.0
			if in.Role == r {
				val = 1
			}
			m.role.WithLabelValues(n, r.String()).Set(val)
		}
		up, cordoned := 1.0, 0.0
		if engs[i].cordoned.Load() {
			cordoned = 1
			if engs[i].br.ejected() {
				up = 0
			}
		} else if in.Down {
			up = 0
		}
		m.up.WithLabelValues(n).Set(up)
		m.cordoned.WithLabelValues(n).Set(cordoned)
		m.gen.WithLabelValues(n).Set(float64(in.Generation))
	}
}

// meteredRecorder times each append to the journal and counts the records
// it lost. A recorder with an Err method (journal.Writer) reports its
// sticky error there.
type meteredRecorder struct {
	next event.Recorder
	m    *Metrics
	errs errSource
}

func (j *meteredRecorder) Record(r *event.Record) {
	t := time.Now()
	j.next.Record(r)
	j.m.journalAppend.Observe(time.Since(t).Seconds())
	if j.errs != nil && j.errs.Err() != nil {
		j.m.journalErrors.Inc()
	}
}

// errSource finds the recorder's sticky error, if it has one.
type errSource interface{ Err() error }

// sched is the request's scheduled send time, else its arrival (router
// clock), as the journal measures TTFT from.
func (l *leg) sched() event.Time {
	if l.f.scheduled >= 0 {
		return event.Time(l.f.scheduled)
	}
	return l.f.arrived
}

// observeFirst notes that this attempt's first token exists (the prefill
// returned, or a single request's first event) and observes TTFT, once a
// request, and not for an answer that came whole (its first token is
// unseen).
func (l *leg) observeFirst() {
	l.tFirst = l.r.now()
	if l.ttftSeen || l.whole {
		return
	}
	l.ttftSeen = true
	l.r.met.ttft.Observe(max(0, (l.tFirst - l.sched()).Seconds()))
}

// observeHandoff observes the KV handoff: from the prefill's return to the
// decode leg's first token on another engine.
func (l *leg) observeHandoff() {
	if l.pe == nil || l.f.decode == l.pe.idx || l.f.noHandoff {
		return
	}
	l.r.met.handoff.Observe((l.r.now() - l.tFirst).Seconds())
}

// observeFinish observes TPOT and the end-to-end time of a request that
// finished with tokens output tokens.
func (l *leg) observeFinish(tokens int64) {
	now := l.r.now()
	l.r.met.e2e.Observe(max(0, (now - l.sched()).Seconds()))
	if tokens > 1 && !l.whole {
		l.r.met.tpot.Observe((now - l.tFirst).Seconds() / float64(tokens-1))
	}
}
