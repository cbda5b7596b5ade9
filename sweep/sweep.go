package sweep

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/report"
	"github.com/narwhal-bench/narwhal-bench/sim"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// Config is one sweep.
type Config struct {
	Trace *traces.Spec
	Fleet *fleet.Spec
	// Arms to run; see core.NewController.
	Arms []string
	// Rates are mean arrival rates, req/s; empty means the trace's own.
	Rates []float64
	// Seed picks the trace's random draws (the same for every arm and rate).
	Seed uint64
	// SLO overrides the fleet's objectives when non-zero.
	SLO core.SLO
	// Workers bounds the runs in flight (default GOMAXPROCS).
	Workers int
	// Progress, when set, is called after each run with done and total.
	Progress func(done, total int)
	// Recorder, when set, returns the recorder for one run's records (a
	// journal, say); it is called from the run's goroutine.
	Recorder func(arm string, rate float64) (event.Recorder, error)
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
	Moves      int     `json:"moves"`
	// MissTTFT and MissTPOT count completed requests that failed on TTFT
	// or on TPOT (first failed check).
	MissTTFT int `json:"miss_ttft"`
	MissTPOT int `json:"miss_tpot"`
	// SimSeconds is the virtual time the run took to drain.
	SimSeconds float64 `json:"sim_seconds"`
}

// Result is a whole sweep.
type Result struct {
	Trace     string              `json:"trace"`
	Fleet     string              `json:"fleet"`
	Instances int                 `json:"instances"`
	Seed      uint64              `json:"seed"`
	SLO       SLOJSON             `json:"slo"`
	BaseRate  float64             `json:"base_rate"`
	Rates     []float64           `json:"rates"`
	Arms      []string            `json:"arms"`
	Runs      []Run               `json:"runs"`
	Sustained map[string]*float64 `json:"sustained"`
	// Requests is the total simulated requests across runs.
	Requests int `json:"requests"`
}

// SLOJSON is the objectives in seconds.
type SLOJSON struct {
	TTFT float64 `json:"ttft_s"`
	TPOT float64 `json:"tpot_s"`
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
	base := cfg.Trace.MeanRate()
	if !(base > 0) {
		return nil, fmt.Errorf("sweep: trace %s has mean rate %v: expected > 0", cfg.Trace.Name, base)
	}
	rates := cfg.Rates
	if len(rates) == 0 {
		rates = []float64{base}
	}
	for _, r := range rates {
		if !(r > 0) {
			return nil, fmt.Errorf("sweep: rate %v: expected a positive rate in req/s", r)
		}
	}
	n := cfg.Fleet.Size()
	for _, a := range cfg.Arms {
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
	simCfg := sim.Config{Profiles: cfg.Fleet.Profiles(), SLO: slo, KV: cfg.Fleet.KVModel(), Batch: sim.DefaultBatch}
	if b := cfg.Fleet.Batch; b != nil {
		simCfg.Batch = sim.Batch{ChunkTokens: b.ChunkTokens, BudgetTokens: b.BudgetTokens, MaxSeqs: b.MaxSeqs}
	}
	if d := cfg.Fleet.DrainLimit; d != nil {
		simCfg.DrainLimit = event.Time(*d)
	}
	// One trace per rate, shared read-only by every arm.
	workloads := make([][]sim.Request, len(rates))
	for i, r := range rates {
		reqs, err := cfg.Trace.Generate(cfg.Seed, r/base)
		if err != nil {
			return nil, fmt.Errorf("sweep: trace %s at %v req/s: %w", cfg.Trace.Name, r, err)
		}
		w := make([]sim.Request, len(reqs))
		for j, q := range reqs {
			w[j] = sim.Request{At: q.At, Class: q.Class, InputTokens: q.InputTokens, OutputTokens: q.OutputTokens, OutputCap: q.OutputCap}
		}
		workloads[i] = w
	}
	res := &Result{Trace: cfg.Trace.Name, Fleet: cfg.Fleet.Name, Instances: n, Seed: cfg.Seed,
		SLO: SLOJSON{TTFT: slo.TTFT, TPOT: slo.TPOT}, BaseRate: base, Rates: rates, Arms: cfg.Arms,
		Runs: make([]Run, len(cfg.Arms)*len(rates)), Sustained: map[string]*float64{}}
	scoreSLO := event.SLO{TTFT: event.Seconds(slo.TTFT), TPOT: event.Seconds(slo.TPOT)}

	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	jobs := make(chan int)
	errs := make([]error, len(res.Runs))
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var fold event.Fold
			for k := range jobs {
				arm, ri := cfg.Arms[k/len(rates)], k%len(rates)
				res.Runs[k], errs[k] = runOne(simCfg, arm, n, rates[ri], workloads[ri], scoreSLO, &fold, cfg.Recorder)
				if cfg.Progress != nil {
					cfg.Progress(int(done.Add(1)), len(res.Runs))
				}
			}
		}()
	}
	for k := range res.Runs {
		jobs <- k
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for ai, arm := range cfg.Arms {
		att := make([]float64, len(rates))
		for ri := range rates {
			r := res.Runs[ai*len(rates)+ri]
			att[ri] = r.Attainment
			res.Requests += r.Offered
		}
		if s, ok := report.Sustained(rates, att, report.AttainmentTarget); ok {
			res.Sustained[arm] = &s
		} else {
			res.Sustained[arm] = nil
		}
	}
	return res, nil
}

func runOne(cfg sim.Config, arm string, n int, rate float64, reqs []sim.Request, slo event.SLO,
	fold *event.Fold, recorder func(string, float64) (event.Recorder, error)) (Run, error) {
	ctrl, err := core.NewController(arm, n)
	if err != nil {
		return Run{}, err
	}
	fold.Reset()
	var rec event.Recorder = fold
	if recorder != nil {
		extra, err := recorder(arm, rate)
		if err != nil {
			return Run{}, fmt.Errorf("sweep: %s at %v req/s: %w", arm, rate, err)
		}
		rec = event.Tee{fold, extra}
	}
	s, err := sim.New(cfg, ctrl, reqs, rec)
	if err != nil {
		return Run{}, fmt.Errorf("sweep: %s at %v req/s: %w", arm, rate, err)
	}
	st, err := s.Run()
	if err != nil {
		return Run{}, fmt.Errorf("sweep: %s at %v req/s: %w", arm, rate, err)
	}
	if err := fold.Err(); err != nil {
		return Run{}, fmt.Errorf("sweep: %s at %v req/s: journal inconsistent: %w", arm, rate, err)
	}
	rows := fold.Rows()
	if len(rows) != len(reqs) {
		return Run{}, fmt.Errorf("sweep: %s at %v req/s: %d requests folded, %d offered", arm, rate, len(rows), len(reqs))
	}
	sum := report.Summarize(rows, slo)
	return Run{Arm: arm, Rate: rate, Offered: sum.Offered, Completed: sum.Completed, SLOOK: sum.Qualified,
		Attainment: sum.Attainment(), Refused: sum.Refused, Expired: sum.Expired, Moves: st.Moves,
		MissTTFT: sum.Misses[event.CheckTTFT], MissTPOT: sum.Misses[event.CheckTPOT],
		SimSeconds: st.End.Seconds()}, nil
}
