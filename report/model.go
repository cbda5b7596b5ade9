package report

import (
	"context"
	"encoding/json"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Report is what narwhal-report prints: one RunReport per run, sorted by
// arm then rate (then run name), and one ArmReport per arm. Every number
// comes from the runs' records (or their Parquet export) alone. Write
// renders it; Plot draws it.
type Report struct {
	// AttainmentTarget is the share of offered requests that must qualify
	// for a rate to count toward the DistServe goodput (0.9).
	AttainmentTarget float64 `json:"attainment_target"`
	// ThrashWindow is the window of Thrash, in seconds (30).
	ThrashWindow float64 `json:"thrash_window_s"`
	// SLOOverride says which SLOs came from the command line rather than
	// the runs' metadata ("", "ttft", "tpot" or "ttft,tpot").
	SLOOverride string      `json:"slo_override"`
	Arms        []ArmReport `json:"arms"`
	Runs        []RunReport `json:"runs"`
	// HasReferences is true when some request carried a reference answer;
	// only then is the answer-quality section printed.
	HasReferences bool `json:"has_references"`
	// Partial is true when some run is not whole (Options.Partial); the
	// runs' partial fields say which and why.
	Partial bool `json:"partial"`

	plots []runPlot // per run, parallel to Runs: what the plots draw
}

// ArmReport is one arm across its rates.
type ArmReport struct {
	Arm   string    `json:"arm"`
	Rates []float64 `json:"rates"` // swept rates, ascending
	// DistServe goodput: the highest swept rate such that it and every
	// lower swept rate reach AttainmentTarget, req/s (score.Sustained);
	// null when the lowest rate fails.
	DistServe *float64 `json:"distserve_goodput_rps"`
	// DistServeGridTop: DistServe is the highest rate swept, which still
	// passes, so it is a floor ("≥ X, grid top"), not a ceiling.
	DistServeGridTop bool `json:"distserve_grid_top"`
	// DistServePerGPU is DistServe divided by the fleet's GPUs; null when
	// DistServe is null or the GPU count is unknown.
	DistServePerGPU *float64 `json:"distserve_goodput_per_gpu"`
	GPUs            int      `json:"gpus"` // 0: unknown (or runs disagree)
	// PartialRates are the rates whose run is not whole (Options.Partial);
	// DistServe counts them as failing, since a run cut short cannot show
	// that its rate is sustained.
	PartialRates []float64 `json:"partial_rates,omitempty"`
}

// RunReport holds every number the report prints for one run (one arm at
// one rate). Durations are seconds.
type RunReport struct {
	Run string `json:"run"` // the run's directory name
	// Partial says why the run is not whole ("" when it is): it was
	// interrupted, or its journal has no end-of-run record.
	Partial   string  `json:"partial,omitempty"`
	Arm       string  `json:"arm"`
	Rate      float64 `json:"rate"` // mean arrival rate, req/s
	Trace     string  `json:"trace"`
	Fleet     string  `json:"fleet"`
	Instances int     `json:"instances"`
	GPUs      int     `json:"gpus"`       // 0: unknown
	TTFTSLO   float64 `json:"ttft_slo_s"` // the SLOs the run was judged by
	TPOTSLO   float64 `json:"tpot_slo_s"`
	// Degraded: a live run whose load generator fell behind its schedule
	// (its p99 lag, LoadLagP99, over 0.5 s; event.RunMeta), so the rate
	// it offered was not Rate. Both are zero for simulations.
	Degraded   bool    `json:"degraded,omitempty"`
	LoadLagP99 float64 `json:"load_lag_p99_s,omitempty"`

	Offered        int     `json:"offered"`
	Completed      int     `json:"completed"` // finished, naturally or at the cap
	Qualified      int     `json:"qualified"` // passed event.Qualify
	CompletedShare float64 `json:"completed_share"`
	Attainment     float64 `json:"attainment"` // qualified / offered

	Groups Groups `json:"groups"`

	TTFT      Quantiles `json:"ttft_s"`       // completed requests, from the scheduled send
	TPOT      Quantiles `json:"tpot_s"`       // completed requests with >= 2 tokens
	QueueWait Quantiles `json:"queue_wait_s"` // admitted requests: admit - arrival

	Refused  int          `json:"refused"`
	Expired  int          `json:"expired"`
	Failed   int          `json:"failed"`
	Refusals []CauseCount `json:"refusals"` // by cause, sorted by name
	Expiries []CauseCount `json:"expiries"`
	Failures []CauseCount `json:"failures"`
	// Preemptions counts decode streams preempted for KV capacity (vLLM's
	// num_preemptions; a stream preempted twice counts twice); omitted
	// when none.
	Preemptions int `json:"preemptions,omitempty"`
	// Spilled counts the prompts burst spill ran on decode engines (the
	// admit records with cause spilled); omitted when none.
	Spilled int `json:"spilled,omitempty"`

	Goodput Goodput `json:"goodput"`

	Moves  int       `json:"moves"`  // role moves, opening roles not counted
	Thrash int       `json:"thrash"` // split changes reversed within ThrashWindow
	Lag    LagReport `json:"lag"`

	Quality []ClassQuality `json:"quality,omitempty"` // per class, then "(all)"; only with references
}

// Groups splits the offered requests into four disjoint groups that sum to
// Offered.
type Groups struct {
	Qualified int `json:"qualified"`
	AtCap     int `json:"at_cap"` // completed at the output cap (cause length)
	Missed    int `json:"missed"` // completed naturally but failed another check
	MissTTFT  int `json:"miss_ttft"`
	MissTPOT  int `json:"miss_tpot"`
	MissShort int `json:"miss_too_short"`
	MissCancl int `json:"miss_cancelled"`
	NotDone   int `json:"not_completed"` // failed, refused or expired
}

// Sum is the number of requests in the four groups.
func (g Groups) Sum() int { return g.Qualified + g.AtCap + g.Missed + g.NotDone }

// Quantiles are nearest-rank percentiles of a sample, in seconds.
type Quantiles struct {
	N   int     `json:"n"` // sample size; the percentiles are null when 0
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// MarshalJSON writes null percentiles for an empty sample.
func (q Quantiles) MarshalJSON() ([]byte, error) {
	type plain struct {
		N   int      `json:"n"`
		P50 *float64 `json:"p50"`
		P95 *float64 `json:"p95"`
		P99 *float64 `json:"p99"`
	}
	p := plain{N: q.N}
	if q.N > 0 {
		p.P50, p.P95, p.P99 = &q.P50, &q.P95, &q.P99
	}
	return json.Marshal(p)
}

// CauseCount is how many requests ended for one cause.
type CauseCount struct {
	Cause string `json:"cause"`
	N     int    `json:"n"`
}

// Goodput is the run's SLO-qualified throughput (AIPerf and vLLM's
// definition): qualified requests per second of the run's span, the time
// from its first scheduled send to its last end. The DistServe goodput is
// per arm (ArmReport) and repeated here for convenience.
type Goodput struct {
	SpanS     float64  `json:"span_s"`
	RPS       float64  `json:"aiperf_rps"`        // Qualified / SpanS
	PerGPU    *float64 `json:"aiperf_per_gpu"`    // RPS / GPUs; null when the GPU count is unknown
	DistServe *float64 `json:"distserve_rps"`     // the arm's DistServe goodput
	DSPerGPU  *float64 `json:"distserve_per_gpu"` // the arm's DistServe goodput per GPU
}

// LagReport is the adaptation lag against the oracle's split timeline at the
// same rate.
type LagReport struct {
	// Status is "measured", "no oracle run at this rate", "oracle" (the
	// run is the target itself) or "no split" (the arm's engines are all
	// mixed, so it has no prefill pool to move).
	Status    string    `json:"status"`
	OracleRun string    `json:"oracle_run,omitempty"`
	Changes   int       `json:"changes"`     // oracle split changes judged
	Mean      float64   `json:"mean_s"`      // mean lag over Changes, censored lags included
	Missed    int       `json:"missed"`      // changes never reached before the oracle's next change
	Lags      []float64 `json:"lags_s"`      // each change's lag (censored ones: the time until the next change)
	Targets   []int     `json:"targets"`     // the oracle's prefill pool after each change
	ChangesAt []float64 `json:"change_at_s"` // when each change happened, seconds
}

// MarshalJSON writes mean_s as null unless the lag was measured (a mean
// over no change is undefined, never 0) and the per-change lists as []
// rather than null.
func (l LagReport) MarshalJSON() ([]byte, error) {
	out := struct { // LagReport's fields, in its order
		Status    string    `json:"status"`
		OracleRun string    `json:"oracle_run,omitempty"`
		Changes   int       `json:"changes"`
		Mean      *float64  `json:"mean_s"`
		Missed    int       `json:"missed"`
		Lags      []float64 `json:"lags_s"`
		Targets   []int     `json:"targets"`
		ChangesAt []float64 `json:"change_at_s"`
	}{l.Status, l.OracleRun, l.Changes, nil, l.Missed, l.Lags, l.Targets, l.ChangesAt}
	if l.Status == LagMeasured {
		out.Mean = &l.Mean
	}
	if out.Lags == nil {
		out.Lags = []float64{}
	}
	if out.Targets == nil {
		out.Targets = []int{}
	}
	if out.ChangesAt == nil {
		out.ChangesAt = []float64{}
	}
	return json.Marshal(out)
}

// Lag statuses.
const (
	LagMeasured = "measured"
	LagNoOracle = "no oracle run at this rate"
	LagOracle   = "oracle"
	LagNoSplit  = "no split"
	// LagNoChange: the oracle keeps one split at this rate, so there is
	// no change to adapt to (a mean over none is undefined, not 0).
	LagNoChange = "no oracle change"
)

// ClassQuality is the answer quality of one request class (token F1
// against the trace's reference answer).
type ClassQuality struct {
	Class string `json:"class"` // "(all)" for every class together
	// WithReference counts offered requests that carry a reference.
	WithReference int `json:"with_reference"`
	// Scored counts completed requests with both a reference and a
	// response; Unscored, completed requests with a reference but no
	// recorded response (a simulation records none).
	Scored   int `json:"scored"`
	Unscored int `json:"unscored"`
	// CompletedF1 is the mean F1 over scored requests; AllOfferF1 the sum
	// of their F1 over WithReference; SLOF1 the sum of the F1 of scored
	// requests that also qualified, over WithReference. Null when nothing
	// was scored.
	CompletedF1 *float64 `json:"completed_f1"`
	AllOfferF1  *float64 `json:"all_offer_f1"`
	SLOF1       *float64 `json:"slo_delivered_f1"`
}

// Options tune Load.
type Options struct {
	// TTFTSLO and TPOTSLO, when positive, replace the SLOs of every run's
	// metadata.
	TTFTSLO, TPOTSLO time.Duration
	// Partial scores runs that are not whole (a journal without its
	// end-of-run record or marked partial, an export of such runs): their
	// requests that had not ended count as not completed, and every table
	// and plot is labelled partial. Without it such a run is an error.
	Partial bool
	// Context, when set, interrupts loading when done (between runs and
	// within a run's replay), with an error wrapping context.Cause.
	Context context.Context
}

// runPlot is what the plots need of one run, gathered while its rows are
// in memory so the rows need not be kept.
type runPlot struct {
	splits   []SplitChange // prefill pool over time (merged, as Splits gives)
	mixed    bool          // some engine served mixed batches (aggregated)
	prefill  []int64       // input tokens arriving per workBin
	decode   []int64       // wanted output tokens arriving per workBin
	ttftCDF  []float64     // sorted sample of TTFT, seconds (at most cdfPoints)
	tpotCDF  []float64     // sorted sample of TPOT, seconds
	binWidth event.Time    // width of the work bins (workBin unless the run is very long)
	first    event.Time    // the run's first scheduled send
	lastArr  event.Time    // the run's last arrival
	end      event.Time    // the run's last end
}
