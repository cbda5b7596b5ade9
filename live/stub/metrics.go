package stub

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the vLLM metrics the stub serves (vLLM's names, with its
// model_name and engine labels).
type metrics struct {
	ttft, tpot, itl  prometheus.Observer
	prompt, generate prometheus.Counter
	// Prefix cache: prompt tokens looked up and served from it (vLLM
	// v1's counters, in tokens; 0 without a cache).
	cacheQueries, cacheHits prometheus.Counter
	success                 *prometheus.CounterVec
	// Per finished request: end to end, mean time per output token,
	// prompt and answer lengths.
	e2e, reqTPOT, reqPrompt, reqGen prometheus.Observer
	// Per finished request, vLLM's intervals: waiting, prefill, decode
	// and running (prefill + decode).
	queue, prefill, decode, inference prometheus.Observer
	// The NIXL connector's (vLLM's nixl/stats.py), on the engine that
	// pulls: per transfer its duration and bytes, and failed transfers.
	nixlTime, nixlBytes prometheus.Observer
	nixlFailed          prometheus.Counter
}

// vLLM's buckets for the two latency histograms.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	tpotBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
		5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
		50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// finishReasons are vLLM's finish reasons, each series made at start as
// vLLM makes them (abort: the client went away or the server stopped).
var finishReasons = []string{"stop", "length", "abort"}

// tokenBuckets are vLLM's buckets for token counts: 1, 2, 5, 10, 20, 50,
// ... up to max, the engine's max_model_len.
func tokenBuckets(max int) []float64 {
	var b []float64
	for e := 1; ; e *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*e > max {
				return b
			}
			b = append(b, float64(m*e))
		}
	}
}

func newMetrics(s *Server) metrics {
	// vLLM's engine label is the engine's index inside one server, "0"
	// for a server with one engine, not a fleet-wide name: a scrape
	// configuration names each engine with a target label
	// (docs/operations.md), as it must for real vLLM.
	labels := prometheus.Labels{"model_name": s.opts.Model, "engine": "0"}
	f := func(name, help string, fn func() float64) {
		s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, fn))
	}
	// vLLM's split: running is every request the scheduler has taken
	// (decoding, part-way through its prompt, or recomputing after a
	// preemption); waiting is the rest (prompts not begun, preempted
	// streams, and decode legs waiting for their KV).
	f("vllm:num_requests_running", "Requests scheduled: decoding, prefilling or recomputing.", func() float64 {
		g := s.Gauges()
		return float64(g.Running + g.Started + g.Recomputing)
	})
	f("vllm:num_requests_waiting", "Requests waiting: prompts not begun, preempted or waiting decode streams, and decode legs pulling their KV.", func() float64 {
		g := s.Gauges()
		return float64(g.Prefill - g.Started + g.Waiting + int(s.pulling.Load()))
	})
	usage := func() float64 {
		c := s.cfg.KVCapacityTokens
		if c <= 0 {
			return 0
		}
		g := s.Gauges()
		return float64(g.ContextTokens+g.PrefillTokens+g.RecomputeTokens+s.PinnedTokens()) / float64(c)
	}
	f("vllm:gpu_cache_usage_perc", "KV-cache usage: resident, held and pinned tokens over the KV capacity (0 when unbounded).", usage)
	f("vllm:kv_cache_usage_perc", "KV-cache usage (vLLM's newer name).", usage)
	s.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "vllm:num_preemptions_total",
		Help: "Decode streams preempted for KV capacity (recompute), cumulative.", ConstLabels: labels},
		func() float64 { return float64(s.Gauges().Preemptions) }))
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "process_start_time_seconds",
		Help: "When this engine started, Unix seconds (changes on restart)."},
		func() float64 { return float64(s.started.Load()) / 1e9 }))
	ttft := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds",
		Help: "Time to first token, from arrival at this engine.", ConstLabels: labels, Buckets: ttftBuckets})
	tpot := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_per_output_token_seconds",
		Help: "Time between consecutive output tokens of a request.", ConstLabels: labels, Buckets: tpotBuckets})
	itl := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:inter_token_latency_seconds",
		Help: "Time between consecutive output tokens of a request (vLLM's newer name).", ConstLabels: labels, Buckets: tpotBuckets})
	prompt := prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total",
		Help: "Prompt tokens of the requests accepted.", ConstLabels: labels})
	gen := prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:generation_tokens_total",
		Help: "Output tokens generated.", ConstLabels: labels})
	cacheQueries := prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total",
		Help: "Prefix cache queries, in prompt tokens looked up.", ConstLabels: labels})
	cacheHits := prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total",
		Help: "Prefix cache hits, in prompt tokens served from the cache.", ConstLabels: labels})
	success := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
		Help: "Finished requests by finish reason.", ConstLabels: labels}, []string{"finished_reason"})
	for _, r := range finishReasons {
		success.WithLabelValues(r)
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
	}
	e2e := hist("vllm:e2e_request_latency_seconds", "End-to-end latency of finished requests, from arrival at this engine.", requestBuckets)
	reqTPOT := hist("vllm:request_time_per_output_token_seconds", "Mean time per output token of finished requests (first token to last over tokens - 1).", tpotBuckets)
	reqPrompt := hist("vllm:request_prompt_tokens", "Prompt tokens of finished requests.", tokenBuckets(s.opts.MaxModelLen))
	reqGen := hist("vllm:request_generation_tokens", "Output tokens of finished requests.", tokenBuckets(s.opts.MaxModelLen))
	// vLLM's v1 interval histograms (vllm/v1/metrics/loggers.py,
	// PrometheusStatLogger: names, meaning, request_latency_buckets):
	// the request's phases on this engine, as finished measures them.
	queue := hist("vllm:request_queue_time_seconds", "Time spent in WAITING phase: from arrival at this engine to its first scheduling.", requestBuckets)
	prefill := hist("vllm:request_prefill_time_seconds", "Time spent in PREFILL phase: from first scheduled to the first token this engine produced.", requestBuckets)
	decode := hist("vllm:request_decode_time_seconds", "Time spent in DECODE phase: from the first token this engine produced to the last.", requestBuckets)
	inference := hist("vllm:request_inference_time_seconds", "Time spent in RUNNING phase: from first scheduled to the last token (prefill + decode).", requestBuckets)
	// The NIXL connector's metrics, its buckets: 5 ms to 5 s, and 2 KiB
	// to 8 GiB in steps of four.
	nixlTime := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:nixl_xfer_time_seconds",
		Help: "Histogram of transfer duration for NIXL KV Cache transfers.", ConstLabels: labels,
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0}})
	var byteBuckets []float64
	for i := 1; i < 25; i += 2 {
		byteBuckets = append(byteBuckets, float64(int64(1)<<(10+i)))
	}
	nixlBytes := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:nixl_bytes_transferred",
		Help: "Histogram of bytes transferred per NIXL KV Cache transfers.", ConstLabels: labels, Buckets: byteBuckets})
	nixlFailed := prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:nixl_num_failed_transfers_total",
		Help: "Number of failed NIXL KV Cache transfers.", ConstLabels: labels})
	s.reg.MustRegister(ttft, tpot, itl, prompt, gen, success, e2e, reqTPOT, reqPrompt, reqGen, queue, prefill, decode, inference,
		cacheQueries, cacheHits, nixlTime, nixlBytes, nixlFailed)
	return metrics{ttft: ttft, tpot: tpot, itl: itl, prompt: prompt, generate: gen, success: success,
		e2e: e2e, reqTPOT: reqTPOT, reqPrompt: reqPrompt, reqGen: reqGen, cacheQueries: cacheQueries, cacheHits: cacheHits,
		queue: queue, prefill: prefill, decode: decode, inference: inference,
		nixlTime: nixlTime, nixlBytes: nixlBytes, nixlFailed: nixlFailed}
}

// finished records a request that ended with reason (a finish reason, or
// "abort") at now. The per-request histograms are vLLM's finished-request
// stats: an aborted request (client gone, server stopped) has none, as
// vLLM's OutputProcessor drops an aborted request's state without
// update_from_finished_request. Durations are wall time, as e2e's (under
// a time scale, scaled as the engine ran them).
//
// The four intervals follow vllm/v1/metrics/stats.py
// (IterationStats.update_from_finished_request, update_from_events):
// queue = first SCHEDULED - QUEUED, prefill = first token - first
// SCHEDULED, decode = last token - first token, inference = last token -
// first SCHEDULED; a preemption's re-wait and recompute fall in prefill
// or decode, never in queue. QUEUED is the arrival at this engine;
// SCHEDULED is the start of the iteration that runs the prompt's first
// chunk or, for a decode leg, that admits it to the running batch after
// its KV is here (vLLM's scheduler with an async KV connector schedules
// the request only once its KV has loaded). So a prefill leg's decode is
// 0 (it ends with its first token), and a decode leg's queue time holds
// its KV pull and its wait to join, its prefill the iteration that gives
// its first token here (token 2; token 1 came with the KV).
func (m metrics) finished(r *live, reason string, now time.Time) {
	m.success.WithLabelValues(reason).Inc()
	if reason == "abort" {
		return
	}
	r.mu.Lock()
	n, first, last := r.tokens, r.first, r.last
	sched, firstHere := r.scheduled, r.firstHere
	r.mu.Unlock()
	m.e2e.Observe(now.Sub(r.start).Seconds())
	m.reqPrompt.Observe(float64(r.prompt))
	m.reqGen.Observe(float64(n))
	if n > 1 && !first.IsZero() {
		m.reqTPOT.Observe(last.Sub(first).Seconds() / float64(n-1))
	}
	if !sched.IsZero() && !firstHere.IsZero() {
		m.queue.Observe(sched.Sub(r.start).Seconds())
		m.prefill.Observe(firstHere.Sub(sched).Seconds())
		m.decode.Observe(last.Sub(firstHere).Seconds())
		m.inference.Observe(last.Sub(sched).Seconds())
	}
}

// token records output token k of r at now (owner goroutine, or the
// handler for the first token of a pulled decode).
func (m metrics) token(r *live, k int, now time.Time) {
	m.generate.Inc()
	r.mu.Lock()
	last := r.last
	if k == 1 || last.IsZero() {
		r.first = now
	}
	r.mu.Unlock()
	if k == 1 || last.IsZero() {
		m.ttft.Observe(now.Sub(r.start).Seconds())
		return
	}
	m.tpot.Observe(now.Sub(last).Seconds())
	m.itl.Observe(now.Sub(last).Seconds())
}
