package stub

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the vLLM metrics the stub serves (vLLM's names, with the
// model_name label).
type metrics struct {
	ttft, tpot, itl  prometheus.Observer
	prompt, generate prometheus.Counter
	success          *prometheus.CounterVec
}

// vLLM's buckets for the two latency histograms.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	tpotBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
		5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
)

func newMetrics(s *Server) metrics {
	labels := prometheus.Labels{"model_name": s.opts.Model, "engine": s.id}
	f := func(name, help string, fn func() float64) {
		s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, fn))
	}
	f("vllm:num_requests_running", "Requests in the running decode batch.", func() float64 { return float64(s.Gauges().Running) })
	f("vllm:num_requests_waiting", "Requests waiting: prompts queued or prefilling, and decode streams waiting to join.", func() float64 {
		g := s.Gauges()
		return float64(g.Waiting + g.Prefill)
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
	success := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
		Help: "Finished requests by finish reason.", ConstLabels: labels}, []string{"finished_reason"})
	s.reg.MustRegister(ttft, tpot, itl, prompt, gen, success)
	return metrics{ttft: ttft, tpot: tpot, itl: itl, prompt: prompt, generate: gen, success: success}
}

// token records output token k of r at now (owner goroutine, or the
// handler for the first token of a pulled decode).
func (m metrics) token(r *live, k int, now time.Time) {
	m.generate.Inc()
	r.mu.Lock()
	last := r.last
	r.mu.Unlock()
	if k == 1 || last.IsZero() {
		m.ttft.Observe(now.Sub(r.start).Seconds())
		return
	}
	m.tpot.Observe(now.Sub(last).Seconds())
	m.itl.Observe(now.Sub(last).Seconds())
}
