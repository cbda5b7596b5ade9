package loadgen

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"
)

// Quantiles are nearest-rank percentiles of a sample, in seconds (the
// report's rule); all zero when N is 0, and null in JSON then.
type Quantiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
}

// MarshalJSON writes null mean and percentiles for an empty sample (as
// the report does), so that a run where nothing finished never reads as
// zero latency.
func (q Quantiles) MarshalJSON() ([]byte, error) {
	type plain struct {
		N    int      `json:"n"`
		Mean *float64 `json:"mean"`
		P50  *float64 `json:"p50"`
		P90  *float64 `json:"p90"`
		P95  *float64 `json:"p95"`
		P99  *float64 `json:"p99"`
	}
	p := plain{N: q.N}
	if q.N > 0 {
		p.Mean, p.P50, p.P90, p.P95, p.P99 = &q.Mean, &q.P50, &q.P90, &q.P95, &q.P99
	}
	return json.Marshal(p)
}

// quantiles sorts xs (seconds) in place and summarises it.
func quantiles(xs []float64) Quantiles {
	q := Quantiles{N: len(xs)}
	if len(xs) == 0 {
		return q
	}
	sort.Float64s(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	q.Mean = sum / float64(len(xs))
	at := func(p float64) float64 {
		k := int(math.Ceil(p/100*float64(len(xs)))) - 1
		return xs[min(max(k, 0), len(xs)-1)]
	}
	q.P50, q.P90, q.P95, q.P99 = at(50), at(90), at(95), at(99)
	return q
}

// Lag is the schedule lag of every sent request: actual send minus the
// time the schedule let it go (Outcome.Ready: its scheduled send, or later
// when it waited for a concurrency slot).
func Lag(res *Result) Quantiles {
	xs := make([]float64, 0, len(res.Outcomes))
	for i := range res.Outcomes {
		o := &res.Outcomes[i]
		xs = append(xs, (o.Sent - o.Ready()).Seconds())
	}
	return quantiles(xs)
}

// Summary is a run as the client measured it. Latencies are in seconds;
// the names are vllm bench serve's and AIPerf's (docs/live.md has the
// table):
//
//   - TTFT: first content chunk − actual send (both tools' TTFT);
//     TTFTScheduled counts from the scheduled send instead (the journal's
//     TTFT, which the SLO rule uses).
//   - TPOT: (e2e − TTFT)/(n − 1) per request with n ≥ 2 output tokens
//     (vLLM's TPOT, AIPerf's inter_token_latency, GuideLLM's ITL).
//   - ITL: every gap between two content chunks (vLLM's ITL).
//   - E2E: end − actual send (vLLM's E2EL, AIPerf's request_latency).
type Summary struct {
	Planned   int `json:"planned"`
	Sent      int `json:"sent"`
	OK        int `json:"ok"`     // streamed to their end
	Errors    int `json:"errors"` // HTTP errors, broken streams, timeouts
	Cancelled int `json:"cancelled"`
	// ErrorKinds are the distinct errors (at most 5, in order of first
	// appearance), each with its count: "HTTP 500: ... (12)".
	ErrorKinds []string `json:"error_kinds,omitempty"`
	Partial    bool     `json:"partial"`
	// Lag is the schedule lag; Degraded is Lag.P99 > DegradedLag.
	Lag      Quantiles `json:"schedule_lag_s"`
	Degraded bool      `json:"degraded"`
	// ClientQueue is the wait for a slot under --max-concurrency (vllm
	// bench serve's client queue time; all 0 without a cap).
	ClientQueue Quantiles `json:"client_queue_s"`

	TTFT          Quantiles `json:"ttft_s"`
	TTFTScheduled Quantiles `json:"ttft_from_scheduled_s"`
	TPOT          Quantiles `json:"tpot_s"`
	ITL           Quantiles `json:"itl_s"`
	E2E           Quantiles `json:"e2e_s"`

	// DurationS is from the first scheduled send to the last end (the
	// report's span for aiperf_rps).
	DurationS float64 `json:"duration_s"`
	// Good counts requests that streamed to their end naturally (not cut
	// at an output cap) with >= 2 tokens, TTFT from the scheduled send to
	// the first content chunk <= the TTFT SLO and TPOT <= the TPOT SLO:
	// the journal's rule on the client's clock (whose first token comes
	// after the KV transfer; docs/live.md). GoodputRPS is Good / DurationS (vLLM's and AIPerf's goodput);
	// GoodShare is Good / Sent, errors counted in the denominator as
	// AIPerf counts them.
	Good             int     `json:"good"`
	GoodputRPS       float64 `json:"goodput_rps"`
	GoodShare        float64 `json:"good_share"`
	RequestRPS       float64 `json:"request_throughput_rps"`
	OutputTokensRPS  float64 `json:"output_token_throughput_tps"`
	TotalOutputToken int     `json:"total_output_tokens"`
	// TotalInputTokens sums the prompts of the requests that succeeded,
	// each as the server counted it (usage.prompt_tokens) where it did,
	// else as planned; InputFromServer counts those the server counted.
	// TotalTokensRPS is input and output tokens per second (vllm bench
	// serve's total token throughput).
	TotalInputTokens int     `json:"total_input_tokens"`
	InputFromServer  int     `json:"input_tokens_from_server"`
	TotalTokensRPS   float64 `json:"total_token_throughput_tps"`
}

// Summarize scores res against the SLOs (zero: no SLO on that latency).
func Summarize(res *Result, ttftSLO, tpotSLO time.Duration) Summary {
	s := Summary{Planned: res.Planned, Sent: len(res.Outcomes), Partial: res.Partial, Lag: Lag(res)}
	s.Degraded = s.Lag.P99 > DegradedLag.Seconds()
	var ttft, ttfts, tpot, itl, e2e, queue []float64
	kinds, order := map[string]int{}, []string(nil)
	for i := range res.Outcomes {
		o := &res.Outcomes[i]
		queue = append(queue, o.QueueWait.Seconds())
		switch {
		case o.OK():
			s.OK++
		case o.Cancelled:
			s.Cancelled++
		default:
			s.Errors++
			msg := o.Err
			if msg == "" {
				msg = fmt.Sprintf("HTTP %d", o.Status)
			}
			if _, seen := kinds[msg]; !seen && len(order) < 5 {
				order = append(order, msg)
			}
			kinds[msg]++
		}
		if !o.OK() {
			continue
		}
		s.TotalOutputToken += o.Tokens
		if o.PromptTokens >= 0 {
			s.TotalInputTokens += o.PromptTokens
			s.InputFromServer++
		} else {
			s.TotalInputTokens += o.Input
		}
		e2e = append(e2e, (o.End - o.Sent).Seconds())
		if o.FirstToken < 0 {
			continue
		}
		t := (o.FirstToken - o.Sent).Seconds()
		ts := (o.FirstToken - o.Ready()).Seconds()
		ttft, ttfts = append(ttft, t), append(ttfts, ts)
		tp := math.Inf(1)
		if o.Tokens >= 2 {
			tp = (o.End - o.FirstToken).Seconds() / float64(o.Tokens-1)
			tpot = append(tpot, tp)
		}
		for k := 1; k < len(o.TokenAt); k++ {
			itl = append(itl, float64(o.TokenAt[k]-o.TokenAt[k-1])/1e6)
		}
		if o.Tokens >= 2 && !o.Cut && (ttftSLO <= 0 || ts <= ttftSLO.Seconds()) && (tpotSLO <= 0 || tp <= tpotSLO.Seconds()) {
			s.Good++
		}
	}
	s.TTFT, s.TTFTScheduled, s.TPOT, s.ITL, s.E2E = quantiles(ttft), quantiles(ttfts), quantiles(tpot), quantiles(itl), quantiles(e2e)
	s.ClientQueue = quantiles(queue)
	for _, m := range order {
		s.ErrorKinds = append(s.ErrorKinds, fmt.Sprintf("%s (%d)", m, kinds[m]))
	}
	if len(res.Outcomes) > 0 {
		first := res.Outcomes[0].Scheduled
		for i := range res.Outcomes {
			first = min(first, res.Outcomes[i].Scheduled)
		}
		s.DurationS = max(0, (res.Elapsed - first).Seconds())
	}
	if s.DurationS > 0 {
		s.GoodputRPS = float64(s.Good) / s.DurationS
		s.RequestRPS = float64(s.OK) / s.DurationS
		s.OutputTokensRPS = float64(s.TotalOutputToken) / s.DurationS
		s.TotalTokensRPS = float64(s.TotalInputTokens+s.TotalOutputToken) / s.DurationS
	}
	if s.Sent > 0 {
		s.GoodShare = float64(s.Good) / float64(s.Sent)
	}
	return s
}
