package sweep

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/score"
	"github.com/narwhal-bench/narwhal-bench/sim"
	"github.com/narwhal-bench/narwhal-bench/timing"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// Config is one sweep.
type Config struct {
	Trace *traces.Trace
	Fleet *fleet.Spec
	// Arms to run; see core.NewController.
	Arms []string
	// Rates are mean arrival rates, req/s; empty means the trace's own.
	Rates []float64
	// Seed picks the trace's random draws (the same for every arm and rate).
	Seed uint64
	// SLO overrides the fleet's objectives when non-zero.
	SLO event.SLO
	// PrefixCache turns each engine's prefix cache on (sized by the fleet,
	// else sim.DefaultPrefixCache).
	PrefixCache bool
	// Admission is the core's admission gate (default open).
	Admission core.Admission
	// Cordons are maintenance windows every run plays (sim.Config.Cordons;
	// the hindsight arms' searches too); CordonSpec is their canonical
	// spelling, stamped into each run's metadata.
	Cordons    []sim.Cordon
	CordonSpec string
	// Workers bounds the runs in flight (default GOMAXPROCS).
	Workers int
	// Progress, when set, is called after each run (and each rate's oracle
	// search) with done and total.
	Progress func(done, total int)
	// Journal, when set, opens a sink for one run's records (a journal
	// directory, say), given the run's name (RunName) and metadata; it is
	// called from the run's goroutine, and the sink is closed when the run
	// ends: with Close when it ran to the end, with ClosePartial (when the
	// sink has it) when the sweep was interrupted or the run failed (its
	// trace's stream stopped on an error, say). A nil sink with a nil
	// error runs the cell without journaling it (a run already journaled
	// whole, when a sweep resumes).
	Journal func(name string, meta event.RunMeta) (Sink, error)
	// Context, when set, interrupts the sweep when done: no run starts
	// after it, runs in flight stop at their next thousand records (their
	// sinks closed partial), and Execute returns an error wrapping
	// ErrInterrupted and the context's error.
	Context context.Context
	// Version is the narwhal-bench version stamped into run metadata.
	Version string
	// Refine, when above 0, bisects each arm's sustained rate this many
	// times within the grid step above it (at most MaxRefine): the grid
	// resolves a sustained rate to a step, Refine bisections to a step
	// over 2^Refine, at Refine more runs per arm.
	Refine int
}

// Sink receives one run's records and is closed when the run ends.
type Sink interface {
	event.Recorder
	Close() error
}

// TokenSink is a Sink that also takes every output token's time, as
// sim.Config.TokenHook gives it (a test's invariant checker): token k of
// request req at at.
type TokenSink interface {
	Sink
	Token(req event.RequestID, k int, at event.Time)
}

// PartialSink is a Sink that can record that its run stopped early
// (journal.Writer is one).
type PartialSink interface {
	Sink
	ClosePartial(reason string) error
}

// ErrInterrupted is wrapped by Execute's error when Config.Context ended
// the sweep.
var ErrInterrupted = errors.New("sweep interrupted")

// interruptReason is the partial marker of a run the sweep's context
// stopped.
func interruptReason(ctx context.Context) string {
	why := context.Cause(ctx).Error()
	if !strings.Contains(why, "interrupt") {
		why = "interrupted: " + why
	}
	return why
}

// abort is the panic that stops a run in flight when the sweep is
// interrupted; runOne recovers it.
type abort struct{}

// stopper is a Recorder that checks the sweep's context every 1024
// records and stops the simulation when it is done.
type stopper struct {
	ctx context.Context
	n   int
}

func (s *stopper) Record(*event.Record) {
	if s.n++; s.n&1023 == 0 && s.ctx.Err() != nil {
		panic(abort{})
	}
}

// RunName names a run: the arm with ':' and '/' as '-', '@', the rate as
// the sweep runs it (CanonRate's significant digits, no exponent), so
// that two rates a sweep tells apart never share a run's name.
func RunName(arm string, rate float64) string {
	return strings.NewReplacer(":", "-", "/", "-").Replace(arm) + "@" + strconv.FormatFloat(CanonRate(rate), 'f', -1, 64)
}

// Run is one (arm, rate) cell's result.
type Run struct {
	Arm        string  `json:"arm"`
	Rate       float64 `json:"rate"`
	Offered    int     `json:"offered"`
	Completed  int     `json:"completed"`
	SLOOK      int     `json:"slo_ok"`
	Attainment float64 `json:"attainment"`
	Refused    int     `json:"refused"`
	Expired    int     `json:"expired"`
	// Failed counts requests that failed (no engine could take them, an
	// engine went down under them, HTTP 503 in the Ray model): offered =
	// completed + refused + expired + failed + unfinished.
	Failed int `json:"failed"`
	Moves  int `json:"moves"`
	// Preemptions counts decode streams preempted for KV capacity (vLLM's
	// recompute preemption; one stream preempted twice counts twice), as
	// vLLM's vllm:num_preemptions.
	Preemptions int `json:"preemptions"`
	// OverKV counts requests whose prompt and answer need more KV than an
	// engine holds (sim.Stats.OverKV; absent when none).
	OverKV int `json:"over_kv,omitempty"`
	// Spilled counts the prompts burst spill ran on decode engines.
	Spilled int `json:"spilled"`
	// MissTTFT and MissTPOT count completed requests that failed on TTFT
	// or on TPOT (first failed check).
	MissTTFT int `json:"miss_ttft"`
	MissTPOT int `json:"miss_tpot"`
	// Thrash counts moves reversed within 30 s.
	Thrash int `json:"thrash"`
	// Reversals counts changes of the prefill pool reversed within 60 s
	// (score.ReversalWindow); Changes counts changes of the prefill pool
	// (several engines moved at one instant are one change).
	Reversals int `json:"reversals_60s"`
	Changes   int `json:"split_changes"`
	// LagMean is the mean adaptation lag over the trace's phase changes, s:
	// from a phase's start until the split is within one engine of the
	// oracle's split for it (a phase never reached counts whole). Null
	// unless the oracle arm is in the sweep and the trace changes phase.
	LagMean *float64 `json:"lag_mean_s"`
	// LagMissed counts phase changes whose oracle split was never reached.
	LagMissed int `json:"lag_missed"`
	// SimSeconds is the virtual time the run took to drain.
	SimSeconds float64 `json:"sim_seconds"`
}

// OracleSplits is the hindsight split chosen for each phase at one rate
// (the phase-oracle's schedule, and the yardstick of adaptation lag) and,
// when the oracle arm is in the sweep, what the oracle plays there.
type OracleSplits struct {
	Rate    float64 `json:"rate"`
	Prefill []int   `json:"prefill"`
	// Source is "window search" when the oracle plays its searched
	// schedule (Windows, one split per window of WindowSeconds, cut at
	// phase bounds too), or "arm NAME" when a rival arm qualified more
	// requests than any schedule found, so the oracle plays that arm.
	Source        string  `json:"source,omitempty"`
	WindowSeconds float64 `json:"window_s,omitempty"`
	Windows       []int   `json:"windows,omitempty"`
	// Replays is how many whole-trace replays the window search made.
	Replays int `json:"replays,omitempty"`
}

// Result is a whole sweep.
type Result struct {
	Trace     string    `json:"trace"`
	Fleet     string    `json:"fleet"`
	Instances int       `json:"instances"`
	Seed      uint64    `json:"seed"`
	SLO       SLOJSON   `json:"slo"`
	BaseRate  float64   `json:"base_rate"`
	Rates     []float64 `json:"rates"`
	Arms      []string  `json:"arms"`
	Runs      []Run     `json:"runs"`
	// Incomplete, when set, says why the sweep's rates are not all there
	// or not all whole (a live sweep stopped by a signal): the table then
	// gives no sustained rate and no comparison.
	Incomplete string `json:"incomplete,omitempty"`
	// Sustained is the highest rate such that it and every lower swept rate
	// reach 90% attainment (null: the lowest rate fails); SustainedGridTop
	// marks an arm that passes at every swept rate (its sustained rate is at
	// least the grid's top); SustainedCrossing is where its attainment
	// crosses 90%, interpolated between the last passing and the first
	// failing rate (null at the grid top or with no passing rate).
	Sustained         map[string]*float64 `json:"sustained"`
	SustainedGridTop  map[string]bool     `json:"sustained_grid_top"`
	SustainedCrossing map[string]*float64 `json:"sustained_crossing"`
	// Oracle lists the hindsight split per phase and rate, when the oracle
	// arm is in the sweep.
	Oracle []OracleSplits `json:"oracle,omitempty"`
	// Requests is the total simulated requests across runs.
	Requests int `json:"requests"`
	// Refine is how many bisections refined each arm's sustained rate
	// (Config.Refine), and Refined their runs, in the order they ran (by
	// step, then rate, then arm): runs at rates off the grid, counted in
	// Sustained and SustainedCrossing but not in Runs.
	Refine  int   `json:"refine,omitempty"`
	Refined []Run `json:"refined,omitempty"`
	// Cordons are the maintenance windows every run played (sim --cordon,
	// canonical); absent for none.
	Cordons string `json:"cordons,omitempty"`
}

// SLOJSON is the objectives in seconds.
type SLOJSON struct {
	TTFT float64 `json:"ttft_s"`
	TPOT float64 `json:"tpot_s"`
}

// SetSustained fills the sustained-rate maps from the runs, in (arm,
// rate) order (Execute's, and a result assembled elsewhere: a live run, a
// replay).
func (res *Result) SetSustained() {
	res.Sustained, res.SustainedGridTop, res.SustainedCrossing = map[string]*float64{}, map[string]bool{}, map[string]*float64{}
	for ai, arm := range res.Arms {
		rates := slices.Clone(res.Rates)
		att := make([]float64, len(res.Rates))
		for ri := range res.Rates {
			att[ri] = res.Runs[ai*len(res.Rates)+ri].Attainment
		}
		for _, r := range res.Refined {
			if r.Arm == arm {
				rates, att = append(rates, r.Rate), append(att, r.Attainment)
			}
		}
		s := score.SustainedOf(rates, att, score.AttainmentTarget)
		res.Sustained[arm], res.SustainedCrossing[arm] = nil, nil
		if s.OK {
			v := s.Rate
			res.Sustained[arm] = &v
		}
		res.SustainedGridTop[arm] = s.GridTop
		if !math.IsNaN(s.Crossing) {
			c := s.Crossing
			res.SustainedCrossing[arm] = &c
		}
	}
}

// Execute runs the sweep. Runs go in parallel; results come back in (arm,
// rate) order whatever the scheduling, so output is deterministic.
func Execute(cfg Config) (*Result, error) {
	if cfg.Trace == nil || cfg.Fleet == nil {
		return nil, errors.New("sweep: a trace and a fleet are required")
	}
	if len(cfg.Arms) == 0 {
		return nil, errors.New("sweep: no arms: expected at least one")
	}
	if cfg.Refine < 0 || cfg.Refine > MaxRefine {
		return nil, fmt.Errorf("sweep: refine %d: expected 0 (off) to %d bisections", cfg.Refine, MaxRefine)
	}
	base := cfg.Trace.MeanRate()
	if !(base > 0) {
		return nil, fmt.Errorf("sweep: trace %s has mean rate %v: expected > 0", cfg.Trace.Name, base)
	}
	rates := make([]float64, 0, len(cfg.Rates))
	for _, r := range cfg.Rates {
		rates = append(rates, CanonRate(r))
	}
	if len(rates) == 0 {
		rates = []float64{CanonRate(base)}
	}
	seenRate := map[float64]bool{}
	for _, r := range rates {
		if !(r > 0) {
			return nil, fmt.Errorf("sweep: rate %v: expected a positive rate in req/s", r)
		}
		if seenRate[r] {
			return nil, fmt.Errorf("sweep: rate %v req/s given twice (rates are rounded to %d significant digits): expected each rate once", r, RateDigits)
		}
		seenRate[r] = true
	}
	ctx := cfg.Context
	if ctx == nil {
		ctx = context.Background()
	}
	n := cfg.Fleet.Size()
	needOracle, needBound := false, false
	for _, a := range cfg.Arms {
		if a == "oracle" || a == "phase-oracle" {
			needOracle = true
			needBound = needBound || a == "oracle"
			continue
		}
		if _, err := core.NewController(a, n); err != nil {
			return nil, fmt.Errorf("sweep: %w", err)
		}
	}
	slo := cfg.Fleet.CoreSLO()
	if cfg.SLO.TTFT > 0 {
		slo.TTFT = cfg.SLO.TTFT
	}
	if cfg.SLO.TPOT > 0 {
		slo.TPOT = cfg.SLO.TPOT
	}
	simCfg := sim.Config{Profiles: cfg.Fleet.Profiles(), Pinned: cfg.Fleet.Pins(), SLO: slo, KV: cfg.Fleet.KVModel(), Batch: sim.DefaultBatch}
	if b := cfg.Fleet.Batch; b != nil {
		simCfg.Batch = *b
	}
	if cfg.PrefixCache {
		simCfg.Cache = sim.DefaultPrefixCache
		if pc := cfg.Fleet.PrefixCache; pc != nil {
			simCfg.Cache.PrefixCache = *pc
		}
	}
	simCfg.DrainLimit = cfg.Fleet.Drain()
	simCfg.Admission = cfg.Admission
	simCfg.Cordons = cfg.Cordons
	// One workload per rate: each run streams its requests from the trace
	// as the simulated clock reaches them. A rate's trace is generated
	// whole once, shared read-only by every arm, only when the oracle's
	// searches replay it, or when it is small (at most ShareRequests) and
	// several arms would otherwise each generate it again.
	workloads := make([]workload, len(rates))
	for i, r := range rates {
		w := workload{trace: cfg.Trace, seed: cfg.Seed, scale: r / base}
		small := cfg.Trace.Spec != nil && len(cfg.Arms) > 1 && cfg.Trace.Spec.ExpectedRequests(r/base) <= ShareRequests
		if needOracle || small {
			reqs, err := cfg.Trace.Generate(cfg.Seed, r/base)
			if err != nil {
				return nil, fmt.Errorf("sweep: trace %s at %v req/s: %w", cfg.Trace.Name, r, err)
			}
			w.reqs = make([]sim.Request, len(reqs))
			for j := range reqs {
				w.reqs[j] = simRequest(&reqs[j])
			}
		} else if st, err := cfg.Trace.Stream(cfg.Seed, r/base); err != nil {
			// The trace is checked at every rate before any run starts.
			return nil, fmt.Errorf("sweep: trace %s at %v req/s: %w", cfg.Trace.Name, r, err)
		} else {
			st.Close()
		}
		workloads[i] = w
	}
	res := &Result{Trace: cfg.Trace.Name, Fleet: cfg.Fleet.Name, Instances: n, Seed: cfg.Seed,
		SLO: SLOJSON{TTFT: slo.TTFT.Seconds(), TPOT: slo.TPOT.Seconds()}, BaseRate: base, Rates: rates, Arms: cfg.Arms,
		Runs: make([]Run, len(cfg.Arms)*len(rates)), Cordons: cfg.CordonSpec}
	scoreSLO := slo

	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	// Hindsight splits per phase, one set per rate (the oracle arm's
	// schedule and the yardstick of adaptation lag).
	targets := make([][]score.PhaseTarget, len(rates))
	// Progress counts every run and, first, every rate's oracle search
	// (the longest part of a sweep with the oracle).
	total := len(res.Runs)
	if needOracle {
		total += len(rates)
	}
	if needBound {
		total += len(rates)
	}
	var done atomic.Int64
	tick := func() {
		if cfg.Progress != nil {
			cfg.Progress(int(done.Add(1)), total)
		}
	}
	// The searches of one rate share the workers the rates leave idle.
	inner := max(1, workers/len(rates))
	// perRate runs one hindsight search per rate in parallel, counting
	// each in the progress.
	perRate := func(search func(i int) error) error {
		err := parallel(ctx, len(rates), workers, func(i int) error {
			err := search(i)
			tick()
			return err
		})
		if ctx.Err() != nil {
			return fmt.Errorf("%w (during the oracle's search): %w", ErrInterrupted, context.Cause(ctx))
		}
		if err != nil {
			return fmt.Errorf("sweep: oracle: %w", err)
		}
		return nil
	}
	// Whole replays the per-phase oracle made, reused by the bound's search.
	memos := make([]wholeReplays, len(rates))
	for i := range memos {
		memos[i] = wholeReplays{}
	}
	if needOracle {
		if err := perRate(func(i int) (err error) {
			targets[i], err = oracle(ctx, simCfg, workloads[i].reqs, cfg.Trace.Bounds(rates[i]/base), scoreSLO, memos[i], inner)
			return err
		}); err != nil {
			return nil, err
		}
		for i, r := range rates {
			o := OracleSplits{Rate: r}
			for _, t := range targets[i] {
				o.Prefill = append(o.Prefill, t.Prefill)
			}
			res.Oracle = append(res.Oracle, o)
		}
	}
	// The runs: first every arm but the hindsight ones, then (when the
	// bound is asked for) its search, which reuses those runs for the
	// rivals the sweep already played, then the hindsight arms.
	plans := make([]*boundPlan, len(rates))
	moveLogs := make([]*MoveLog, len(res.Runs))
	errs := make([]error, len(res.Runs))
	started := 0
	order := dispatchOrder(cfg.Arms, rates)
	hasher := newConfigHasher(simCfg)
	runJobs := func(hindsight bool) error {
		jobs := make(chan int)
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var fold event.StreamFold
				for k := range jobs {
					arm, ri := cfg.Arms[k/len(rates)], k%len(rates)
					meta := event.RunMeta{Schema: event.SchemaVersion, Version: cfg.Version, Driver: "sim", Arm: arm,
						Rate: rates[ri], Seed: cfg.Seed, Trace: cfg.Trace.Name, TraceHash: cfg.Trace.Hash(),
						Fleet: cfg.Fleet.Name, Instances: n, GPUs: n * cfg.Fleet.GPUsPerInstance, TTFTSLO: slo.TTFT.Seconds(), TPOTSLO: slo.TPOT.Seconds()}
					meta.ConfigHash = hasher.hash(meta)
					// After the hash, which has the cache in its settings
					// already: runs journaled before the field hash the same.
					meta.PrefixCache = cfg.PrefixCache
					meta.Cordons = cfg.CordonSpec // (in the hash through the fleet's settings)
					moveLogs[k] = &MoveLog{}
					if p := plans[ri]; arm == "oracle" && p != nil && p.run != nil && cfg.Journal == nil {
						// The oracle plays a rival whose whole run the
						// bound's search kept, and nothing is journaled:
						// the oracle's run is that run.
						res.Runs[k] = *p.run
						res.Runs[k].Arm = arm
						tick()
						continue
					}
					errs[k] = guard(func() (err error) {
						res.Runs[k], err = runOne(ctx, simCfg, arm, n, rates[ri], &workloads[ri], scoreSLO, targets[ri], plans[ri], &fold, cfg.Journal, meta, moveLogs[k])
						return err
					})
					tick()
				}
			}()
		}
	dispatch:
		for _, k := range order {
			if a := cfg.Arms[k/len(rates)]; (a == "oracle" || a == "phase-oracle") != hindsight {
				continue
			}
			select {
			case jobs <- k:
				started++
			case <-ctx.Done():
				break dispatch
			}
		}
		close(jobs)
		wg.Wait()
		if ctx.Err() != nil {
			return fmt.Errorf("%w after %d of %d runs started: %w", ErrInterrupted, started, len(res.Runs), context.Cause(ctx))
		}
		return errors.Join(errs...)
	}
	if err := runJobs(false); err != nil {
		return nil, err
	}
	if needBound {
		rivals := BoundRivals(n)
		for _, a := range cfg.Arms {
			if a != "oracle" && a != "phase-oracle" && !slices.Contains(rivals, a) {
				rivals = append(rivals, a)
			}
		}
		if err := perRate(func(i int) (err error) {
			// The rivals this sweep already ran at this rate.
			played := map[string]playedRun{}
			for ai, a := range cfg.Arms {
				if k := ai*len(rates) + i; slices.Contains(rivals, a) {
					played[a] = playedRun{ok: res.Runs[k].SLOOK, moves: moveLogs[k].moves, run: &res.Runs[k]}
				}
			}
			// A rival that moves roles is played as an arm is, so that
			// the oracle, when it plays that rival, reuses its run.
			play := func(arm string, log *MoveLog) (Run, error) {
				var fold event.StreamFold
				return runOne(ctx, simCfg, arm, n, rates[i], &workloads[i], scoreSLO, targets[i], nil, &fold, nil, event.RunMeta{}, log)
			}
			plans[i], err = bound(ctx, simCfg, workloads[i].reqs, cfg.Trace.Bounds(rates[i]/base), scoreSLO, targets[i], rivals, played, memos[i], inner, play)
			return err
		}); err != nil {
			return nil, err
		}
		for i, p := range plans {
			o := &res.Oracle[i]
			o.Replays = p.evals
			if p.arm != "" {
				o.Source = "arm " + p.arm
				continue
			}
			o.Source, o.Windows = "window search", p.splits
			o.WindowSeconds = BoundWindow(cfg.Trace.Bounds(rates[i] / base)[len(cfg.Trace.Bounds(rates[i]/base))-1]).Seconds()
		}
	}
	if err := runJobs(true); err != nil {
		return nil, err
	}
	for _, r := range res.Runs {
		res.Requests += r.Offered
	}
	res.SetSustained()
	if cfg.Refine > 0 {
		if err := res.refine(cfg); err != nil {
			return nil, err
		}
		res.SetSustained()
	}
	return res, nil
}

// ShareRequests is the most requests a rate's synthetic trace may expect
// for a sweep of several arms to generate it once and share it (64 bytes
// a request) rather than stream it in every run: a small trace costs
// more to generate again than to keep.
const ShareRequests = 1 << 16

// workload is one rate's trace: streamed by each run, or materialised
// (reqs) and shared by every arm.
type workload struct {
	trace *traces.Trace
	seed  uint64
	scale float64
	reqs  []sim.Request // nil: stream
}

// newSim prepares a run of the workload. Call done when the run is over:
// it closes the trace's stream (an imported trace's file).
func (w *workload) newSim(cfg sim.Config, ctrl core.Controller, rec event.Recorder) (s *sim.Sim, done func(), err error) {
	if w.reqs != nil {
		s, err = sim.New(cfg, ctrl, w.reqs, rec)
		return s, func() {}, err
	}
	st, err := w.trace.Stream(w.seed, w.scale)
	if err != nil {
		return nil, nil, err
	}
	done = func() { st.Close() }
	if s, err = sim.NewStream(cfg, ctrl, &traceSource{st: st}, rec); err != nil {
		done()
		return nil, nil, err
	}
	return s, done, nil
}

// traceSource hands a trace's stream to the simulator.
type traceSource struct {
	st *traces.Stream
	r  traces.Request
}

func (s *traceSource) Next(r *sim.Request) bool {
	if !s.st.Next(&s.r) {
		return false
	}
	*r = simRequest(&s.r)
	return true
}

func (s *traceSource) Err() error { return s.st.Err() }

// simRequest is a trace's request as the simulator takes it.
func simRequest(q *traces.Request) sim.Request {
	return sim.Request{At: q.At, Class: q.Class, InputTokens: q.InputTokens, OutputTokens: q.OutputTokens,
		OutputCap: q.OutputCap, PrefixGroup: q.PrefixGroup, PrefixTokens: q.PrefixTokens,
		CacheGroup: q.CacheGroup, CacheTokens: q.CacheTokens}
}

// runOne runs one cell. Its outcomes are scored as its requests end
// (event.StreamFold), so it holds no row per offered request.
func runOne(ctx context.Context, cfg sim.Config, arm string, n int, rate float64, wl *workload, slo event.SLO,
	targets []score.PhaseTarget, plan *boundPlan, fold *event.StreamFold, journal func(string, event.RunMeta) (Sink, error), meta event.RunMeta, moves *MoveLog) (run Run, err error) {
	var ctrl core.Controller
	switch {
	case arm == "phase-oracle":
		steps := make([]core.ScheduleStep, len(targets))
		for i, t := range targets {
			steps[i] = core.ScheduleStep{At: t.Start, Prefill: t.Prefill}
		}
		ctrl = &core.Scheduled{Arm: "phase-oracle", Steps: steps}
	case arm == "oracle" && plan.arm != "":
		var err error
		if ctrl, err = newController(plan.arm, cfg); err != nil {
			return Run{}, err
		}
	case arm == "oracle":
		ctrl = &core.Scheduled{Arm: "oracle", Steps: plan.steps()}
	default:
		var err error
		if ctrl, err = newController(arm, cfg); err != nil {
			return Run{}, err
		}
	}
	fold.Reset()
	var sum score.Summary
	fold.End = func(r *event.Row) { sum.Add(r, slo) }
	tee := event.Tee{fold, moves, &stopper{ctx: ctx}}
	interrupted := false
	var rec event.Recorder = tee
	if journal != nil {
		// jerr, not err: the deferred close below reads and sets the
		// run's err.
		sink, jerr := journal(RunName(arm, rate), meta)
		if jerr != nil {
			return Run{}, fmt.Errorf("sweep: %s at %v req/s: %w", arm, rate, jerr)
		}
		if sink != nil {
			// The sink goes before the stopper, so it has every record the
			// run made before it stopped. A run that failed is no whole
			// run either.
			rec = event.Tee{fold, moves, sink, tee[2]}
			if ts, ok := sink.(TokenSink); ok {
				cfg.TokenHook = ts.Token
			}
			defer func() {
				var cerr error
				if ps, ok := sink.(PartialSink); ok && interrupted {
					cerr = ps.ClosePartial(interruptReason(ctx))
				} else if ok && err != nil {
					cerr = ps.ClosePartial("failed: " + err.Error())
				} else {
					cerr = sink.Close()
				}
				if cerr != nil && err == nil {
					err = fmt.Errorf("sweep: %s at %v req/s: closing its journal: %w", arm, rate, cerr)
				}
			}()
		}
	}
	s, done, err := wl.newSim(cfg, ctrl, rec)
	if err != nil {
		return Run{}, fmt.Errorf("sweep: %s at %v req/s: %w", arm, rate, err)
	}
	defer done()
	var st sim.Stats
	func() {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(abort); !ok {
					panic(v)
				}
				interrupted = true
				err = fmt.Errorf("sweep: %s at %v req/s: %w: %w", arm, rate, ErrInterrupted, context.Cause(ctx))
			}
		}()
		st, err = s.Run()
	}()
	if interrupted {
		return Run{}, err
	}
	if err != nil {
		return Run{}, fmt.Errorf("sweep: %s at %v req/s: %w", arm, rate, err)
	}
	if err := fold.Err(); err != nil {
		return Run{}, fmt.Errorf("sweep: %s at %v req/s: journal inconsistent: %w", arm, rate, err)
	}
	if fold.Len() != st.Offered || sum.Offered != st.Offered {
		return Run{}, fmt.Errorf("sweep: %s at %v req/s: %d requests folded, %d ended, %d offered", arm, rate, fold.Len(), sum.Offered, st.Offered)
	}
	run = Scored(arm, rate, sum, moves.moves, targets)
	run.Moves, run.OverKV, run.SimSeconds = st.Moves, st.OverKV, st.End.Seconds()
	return run, nil
}

// Scored is a run's row from its requests' summary and its role-move
// records (opening roles included), as the simulator and the live driver
// both score a run: outcomes, SLO misses, thrash, reversals, split changes
// and, with phase targets, adaptation lag. Moves, OverKV and SimSeconds
// are the driver's to set.
func Scored(arm string, rate float64, sum score.Summary, moves []event.Record, targets []score.PhaseTarget) Run {
	splits := score.Splits(moves)
	var lagMean *float64
	var missed int
	if len(targets) > 0 {
		var lags []event.Time
		lags, missed = score.Lag(splits, targets)
		m := 0.0
		for _, l := range lags {
			m += l.Seconds() / float64(len(lags))
		}
		if len(lags) > 0 { // no phase change: no lag to average
			lagMean = &m
		}
	}
	return Run{Thrash: score.Thrash(splits, score.DefaultThrashWindow), Reversals: score.Thrash(splits, score.ReversalWindow),
		Changes: max(len(score.Changes(splits))-1, 0), Failed: sum.Failed, LagMean: lagMean, LagMissed: missed, Arm: arm, Rate: rate, Offered: sum.Offered, Completed: sum.Completed, SLOOK: sum.Qualified,
		Attainment: sum.Attainment(), Refused: sum.Refused, Expired: sum.Expired, Preemptions: sum.Preemptions, Spilled: sum.Spilled,
		MissTTFT: sum.Misses[event.CheckTTFT], MissTPOT: sum.Misses[event.CheckTPOT]}
}

// parallel runs f(0..n-1) on up to workers goroutines and joins the
// errors; it starts no more calls once ctx is done.
func parallel(ctx context.Context, n, workers int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = guard(func() error { return f(i) })
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// CheckArm reports whether arm names a known arm for a fleet of n.
func CheckArm(arm string, n int) error {
	if arm == "oracle" || arm == "phase-oracle" {
		if n < 2 {
			return fmt.Errorf("arm %q: %d instance: expected at least 2 (its search is over splits of prefill and decode; on one engine run aggregated)", arm, n)
		}
		return nil
	}
	_, err := core.NewController(arm, n)
	return err
}

func admissionOrNil(a core.Admission) *core.Admission {
	if a == (core.Admission{}) {
		return nil
	}
	return &a
}

// sloSeconds is the objectives as the config hash has always encoded them
// (seconds), so hashes stay comparable across versions.
type sloSeconds struct {
	TTFT float64 `json:"ttft"`
	TPOT float64 `json:"tpot"`
}

// configHash fingerprints everything that determines a run: the simulated
// fleet and the run's metadata (arm, rate, seed, trace hash, SLOs).
func configHash(cfg sim.Config, meta event.RunMeta) string {
	return newConfigHasher(cfg).hash(meta)
}

// configHasher computes configHash for many runs of one simulated fleet,
// encoding the fleet once: the hash is the SHA-256 of the JSON object
// {Profiles, Pinned, SLO, KV, Batch, Cache, DrainLimit, Meta, Admission}
// (Admission absent for the open gate, so hashes from before the gate
// existed still match), and only Meta changes from run to run.
type configHasher struct {
	head, tail []byte // the object's bytes before and after Meta's value
}

func newConfigHasher(cfg sim.Config) configHasher {
	head, err := json.Marshal(struct {
		Profiles   []timing.Profile
		Pinned     []bool
		SLO        sloSeconds
		KV         timing.KV
		Batch      sim.Batch
		Cache      sim.PrefixCache
		DrainLimit event.Time
	}{cfg.Profiles, cfg.Pinned, sloSeconds{cfg.SLO.TTFT.Seconds(), cfg.SLO.TPOT.Seconds()}, cfg.KV, cfg.Batch, cfg.Cache, cfg.DrainLimit})
	if err != nil {
		panic(fmt.Sprintf("sweep: config hash: %v", err)) // plain data always encodes
	}
	h := configHasher{head: append(head[:len(head)-1], `,"Meta":`...), tail: []byte("}")}
	if a := admissionOrNil(cfg.Admission); a != nil {
		adm, err := json.Marshal(a)
		if err != nil {
			panic(fmt.Sprintf("sweep: config hash: %v", err))
		}
		h.tail = append(append([]byte(`,"Admission":`), adm...), '}')
	}
	if len(cfg.Cordons) > 0 {
		// Absent without windows, so hashes from before them still match.
		cw, err := json.Marshal(cfg.Cordons)
		if err != nil {
			panic(fmt.Sprintf("sweep: config hash: %v", err))
		}
		h.tail = append(append(h.tail[:len(h.tail)-1], `,"Cordons":`...), append(cw, '}')...)
	}
	return h
}

func (h configHasher) hash(meta event.RunMeta) string {
	m, err := json.Marshal(meta)
	if err != nil {
		panic(fmt.Sprintf("sweep: config hash: %v", err))
	}
	d := sha256.New()
	d.Write(h.head)
	d.Write(m)
	d.Write(h.tail)
	return hex.EncodeToString(d.Sum(nil))
}

// dispatchOrder is the order in which a sweep's runs (index arm*len(rates)
// + rate) are handed to its workers: the longest first, so that the
// workers finish together rather than one of them running the sweep's
// most expensive runs last, alone (on the demo sweep, 1.5 of 2 cores
// were busy in the run order). A run's length is guessed from its rate
// (requests offered, and queues, grow with it) and its arm (an arm that
// moves roles rescores the fleet as it runs: twice a static split). The
// order only changes when each run starts: every run writes its own
// cell, so results never depend on it.
func dispatchOrder(arms []string, rates []float64) []int {
	cost := func(k int) float64 {
		a := arms[k/len(rates)]
		w := 2.0
		if a == "aggregated" || strings.HasPrefix(a, "static:") || strings.HasPrefix(a, "hybrid:") {
			w = 1
		}
		return w * rates[k%len(rates)]
	}
	order := make([]int, len(arms)*len(rates))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(cost(b), cost(a)) })
	return order
}

// guard runs f, turning a panic (a broken invariant in a run) into an
// error, so a worker goroutine never takes the process down.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sweep: internal error: %v", r)
		}
	}()
	return f()
}

// KVCapacity is the KV tokens an engine of the sweep's fleet holds (0:
// no bound).
func (c Config) KVCapacity() int64 {
	if b := c.Fleet.Batch; b != nil {
		return b.KVCapacityTokens
	}
	return sim.DefaultBatch.KVCapacityTokens
}

// OverKVNote says, when a run of results had requests that need more KV
// than an engine holds, how many at most and what that does ("" when
// none). With several results (one per seed) it names the worst run's seed.
func OverKVNote(capacity int64, results ...*Result) string {
	var worst *Run
	var seed uint64
	for _, res := range results {
		for i, r := range res.Runs {
			if r.OverKV > 0 && (worst == nil || r.OverKV > worst.OverKV) {
				worst, seed = &res.Runs[i], res.Seed
			}
		}
	}
	if worst == nil {
		return ""
	}
	at := fmt.Sprintf("%s at %s req/s", worst.Arm, fmtRate(worst.Rate))
	if len(results) > 1 {
		at += fmt.Sprintf(", seed %d", seed)
	}
	return fmt.Sprintf("%d of %d requests (%s; the most of any run) need more KV than an engine holds (prompt and answer over kv_capacity_tokens %d): they crowd out the streams beside them, preempted again and again, which no vLLM would accept (its max_model_len must fit its KV cache): give the fleet a larger kv_capacity_tokens, or cap the trace's lengths",
		worst.OverKV, worst.Offered, at, capacity)
}
