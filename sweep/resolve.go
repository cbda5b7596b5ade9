package sweep

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/sim"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// Options is a sweep as a user writes it, on the command line or in an
// experiment file; Resolve turns it into a Config.
type Options struct {
	Trace, TraceFormat string
	// Fleet defaults to the trace's, else "demo" for a synthetic trace; an
	// imported trace without one is refused.
	Fleet string
	// TTFT and TPOT override the objectives (durations such as "2.1s").
	TTFT, TPOT string
	// Arms defaults to every static split and aggregated.
	Arms []string
	// Rates as ParseRates reads them; "" means the trace's own rate.
	Rates string
	// Seed overrides the trace's seed when non-nil.
	Seed *uint64
	// Speedup multiplies every rate (0 means 1).
	Speedup float64
	// ArrivalCV and BatchMean make the trace's arrivals bursty
	// (traces.Trace.WithBurst); 0 keeps them.
	ArrivalCV, BatchMean float64
	PrefixCache          bool
	// Admission overrides the fleet's admission mode ("open" or "queue";
	// "" keeps the fleet's).
	Admission string
	Workers   int
	Version   string
	// Refine is Config.Refine: bisections of each arm's sustained rate.
	Refine int
	// Cordons are maintenance windows, "NAME@START+DURATION" separated by
	// commas ("e3@60s+2m"): engine NAME of the fleet is cordoned from
	// START for DURATION (Config.Cordons). (Left out of JSON when empty:
	// run's combination keys, which hash the options, stay as they were.)
	Cordons string `json:",omitempty"`
}

// OptionError is bad input in one option of Options; Option is its name
// as a flag and an experiment-file field spell it ("trace", "rates",
// "ttft-slo", ...). Every error Resolve returns is one.
type OptionError struct {
	Option string
	// Item is the 1-based position of the bad element of a list option
	// (an experiment file names it, arms[Item-1]); 0 when none.
	Item int
	Err  error
}

func (e *OptionError) Error() string { return e.Option + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

func optErr(option string, err error) error { return &OptionError{Option: option, Err: err} }

// WithBurst is tr with the options arrival-cv and batch-mean
// (traces.Trace.WithBurst; 0 leaves each as the trace has it), checked:
// every error is an *OptionError naming the option.
func WithBurst(tr *traces.Trace, cv, batchMean float64) (*traces.Trace, error) {
	if cv < 0 || math.IsNaN(cv) {
		return nil, optErr("arrival-cv", fmt.Errorf("%v: expected a coefficient of variation > 0", cv))
	}
	if batchMean != 0 && !(batchMean >= 1) {
		return nil, optErr("batch-mean", fmt.Errorf("%v: expected a mean batch size >= 1", batchMean))
	}
	out, err := tr.WithBurst(cv, batchMean)
	if err != nil {
		name := "batch-mean"
		if cv != 0 {
			name = "arrival-cv"
		}
		return nil, optErr(name, err)
	}
	return out, nil
}

// Resolve loads the trace and fleet and checks every option. Every error is
// an *OptionError naming the option, with the value and what was expected.
// notes are what the trace importers changed or ignored.
func Resolve(o Options) (cfg Config, notes []string, err error) {
	tr, err := traces.Open(o.Trace, o.TraceFormat)
	if err != nil {
		return cfg, nil, optErr("trace", err)
	}
	if tr, err = WithBurst(tr, o.ArrivalCV, o.BatchMean); err != nil {
		return cfg, nil, err
	}
	speedup := o.Speedup
	if speedup == 0 {
		speedup = 1
	}
	if !(speedup > 0) || speedup > 1e6 {
		return cfg, nil, optErr("speedup", fmt.Errorf("%v: expected a factor > 0 and at most 1e6", o.Speedup))
	}
	if o.Workers < 0 {
		return cfg, nil, optErr("workers", fmt.Errorf("%d: expected 0 (one per CPU) or more", o.Workers))
	}
	if o.Refine < 0 || o.Refine > MaxRefine {
		return cfg, nil, optErr("refine", fmt.Errorf("%d: expected 0 (the grid alone) to %d bisections", o.Refine, MaxRefine))
	}
	fleetName := o.Fleet
	if fleetName == "" {
		fleetName = tr.Fleet
	}
	if fleetName == "" && tr.Spec == nil {
		// An imported trace's prompts may be far longer than the demo
		// fleet's profile was measured on (a 126K-token prompt would take
		// minutes): the user names the fleet.
		return cfg, nil, optErr("fleet", fmt.Errorf("trace %s is imported and names no fleet: expected a built-in fleet (%s) or a fleet YAML file whose profile fits its prompt lengths (sim's --fleet, an experiment file's fleet:)",
			tr.Name, strings.Join(fleet.Builtin(), ", ")))
	}
	if fleetName == "" {
		fleetName = "demo"
	}
	fl, err := fleet.Load(fleetName)
	if err != nil {
		return cfg, nil, optErr("fleet", err)
	}
	cfg = Config{Trace: tr, Fleet: fl, Seed: tr.Seed, Workers: o.Workers, Version: o.Version, PrefixCache: o.PrefixCache,
		Admission: fl.CoreAdmission(), Refine: o.Refine}
	if o.Admission != "" {
		if cfg.Admission.Mode, err = core.ParseAdmissionMode(o.Admission); err != nil {
			return cfg, nil, fmt.Errorf("--admission: %w", err)
		}
	}
	if o.Seed != nil {
		cfg.Seed = *o.Seed
	}
	if o.Cordons != "" {
		if cfg.Cordons, cfg.CordonSpec, err = ParseCordons(o.Cordons, fl.Names()); err != nil {
			return cfg, nil, optErr("cordon", err)
		}
		for _, a := range o.Arms {
			if a == "oracle" || a == "phase-oracle" {
				// A cordon's cover move makes a step that repeats a split
				// a move again, which the bound's search does not model.
				return cfg, nil, optErr("cordon", fmt.Errorf("with the hindsight arm %s: its search does not model maintenance windows, so it would not bound the others under them: expected online arms only", a))
			}
		}
	}
	cfg.SLO.TTFT, cfg.SLO.TPOT = event.Time(tr.SLO.TTFT), event.Time(tr.SLO.TPOT)
	for _, f := range []struct {
		name, v string
		dst     *event.Time
	}{{"ttft-slo", o.TTFT, &cfg.SLO.TTFT}, {"tpot-slo", o.TPOT, &cfg.SLO.TPOT}} {
		if f.v != "" {
			s, err := ParseDuration(f.v)
			if err != nil {
				return cfg, nil, optErr(f.name, err)
			}
			*f.dst = s
		}
	}
	cfg.Arms = o.Arms
	if len(cfg.Arms) == 0 {
		cfg.Arms = append(DefaultStaticArms(fl.Size()), "aggregated")
	}
	seen := map[string]bool{}
	for i, a := range cfg.Arms {
		if err := CheckArm(a, fl.Size()); err != nil {
			return cfg, nil, &OptionError{Option: "arms", Item: i + 1, Err: err}
		}
		if seen[a] {
			return cfg, nil, &OptionError{Option: "arms", Item: i + 1, Err: fmt.Errorf("%s given twice: expected each arm once", a)}
		}
		seen[a] = true
	}
	base := tr.MeanRate()
	if !(base > 0) {
		return cfg, nil, optErr("trace", fmt.Errorf("%s: mean rate %v: expected a trace with arrivals", tr.Name, base))
	}
	if o.Rates != "" {
		if cfg.Rates, err = ParseRates(o.Rates, base); err != nil {
			return cfg, nil, optErr("rates", err)
		}
		seenRate := map[float64]bool{}
		for _, r := range cfg.Rates {
			if seenRate[r] {
				return cfg, nil, optErr("rates", fmt.Errorf("%v req/s given twice: expected each rate once", r))
			}
			seenRate[r] = true
		}
	}
	if speedup != 1 {
		if len(cfg.Rates) == 0 {
			cfg.Rates = []float64{tr.MeanRate()}
		}
		for i := range cfg.Rates {
			cfg.Rates[i] *= speedup
		}
	}
	seenRate := map[float64]bool{}
	for i, r := range cfg.Rates {
		cfg.Rates[i] = CanonRate(r)
		if seenRate[cfg.Rates[i]] {
			return cfg, nil, optErr("rates", fmt.Errorf("%v req/s given twice (after rounding to %d significant digits): expected each rate once", cfg.Rates[i], RateDigits))
		}
		seenRate[cfg.Rates[i]] = true
	}
	// A rate may generate at most traces.MaxRequests or, when the trace
	// itself expects more at its own rate, that many (give or take the
	// rounding of rates; runs stream their requests, so only time bounds
	// them): a mistyped rate is refused before it starts a run that never
	// ends. The oracle's searches hold the whole trace, so with them
	// MaxRequests binds.
	limit := traces.MaxRequests
	if tr.Spec != nil && !seen["oracle"] && !seen["phase-oracle"] {
		limit = int(min(max(float64(limit), math.Ceil(tr.Spec.ExpectedRequests(1)*(1+1e-5))), traces.MaxStreamRequests))
	}
	for _, r := range cfg.Rates {
		if err := checkScale(tr, r, base, limit); err != nil {
			name := "rates"
			if o.Rates == "" {
				name = "speedup"
			}
			return cfg, nil, optErr(name, err)
		}
	}
	notes = tr.Notes()
	if seen["oracle"] || seen["phase-oracle"] {
		// The searches replay the trace many times over, holding it whole:
		// at production scale they take far longer than the other arms,
		// with no output until a run ends. Said before they start.
		most := 0.0
		for _, r := range cfg.Rates {
			n := float64(tr.Imported())
			if tr.Spec != nil {
				n = tr.Spec.ExpectedRequests(r / base)
			}
			most = max(most, n)
		}
		if most > OracleNoteRequests || fl.Size() > 256 {
			notes = append(notes, fmt.Sprintf("the oracle's searches replay the trace many times, holding it whole: about %.3g requests at the highest rate on %d engines may take tens of minutes to hours and gigabytes (docs/sim.md's figures: 460,000 requests on fleet1024, 85 s and 683 MB)", most, fl.Size()))
		}
	}
	return cfg, notes, nil
}

// OracleNoteRequests is the requests at one rate above which a sweep with
// the oracle says, before it starts, how long its searches may take.
const OracleNoteRequests = 2_000_000

// checkScale refuses a rate the trace cannot be generated at, in the
// user's terms (the rate, the trace's mean rate), before any run starts.
// limit is the most requests the sweep may generate at one rate.
func checkScale(tr *traces.Trace, rate, base float64, limit int) error {
	scale := rate / base
	if tr.Spec != nil {
		if n := tr.Spec.ExpectedRequests(scale); !(n <= float64(limit)) {
			return fmt.Errorf("%.4g req/s (%.4gx the trace's mean rate of %.4g req/s) would generate about %.4g requests: expected at most %d (a lower rate; or, for a streamed run, a trace file whose own rates are that high, which may expect up to %d: docs/trace-format.md)",
				rate, scale, base, n, limit, traces.MaxStreamRequests)
		} else if n < 1 {
			// A run offering nothing would print 0% and "none", as if
			// every request had missed.
			return fmt.Errorf("%.4g req/s (%.4gx the trace's mean rate of %.4g req/s) would offer about %.3g requests: expected a rate that offers at least one (%.3g req/s or more)",
				rate, scale, base, n, base/tr.Spec.ExpectedRequests(1))
		}
		return nil
	}
	if tr.Bounds(scale) == nil {
		return fmt.Errorf("%.4g req/s (%.4gx the trace's mean rate of %.4g req/s): the trace cannot be played that fast or slow: expected a rate closer to its own", rate, scale, base)
	}
	return nil
}

// ParseDuration reads a positive Go duration with a unit ("2.1s", "45ms")
// in seconds; a bare number is refused, as in every file narwhal-bench
// reads.
func ParseDuration(s string) (event.Time, error) {
	d, err := event.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: expected a positive duration such as 2.1s or 45ms", s)
	}
	return d, nil
}

// maxWindow bounds a window's start and length (1000 h, the simulated
// clock's span, timing.MaxSpan).
const maxWindow = 1000 * 3600 * event.Second

// ParseCordons reads maintenance windows, "NAME@START+DURATION" separated
// by commas, naming engines of names, and returns them with their
// canonical spelling (durations in seconds), which run metadata carries.
func ParseCordons(spec string, names []string) ([]sim.Cordon, string, error) {
	var ws []sim.Cordon
	var canon []string
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		name, times, ok := strings.Cut(item, "@")
		start, dur, ok2 := strings.Cut(times, "+")
		if !ok || !ok2 || name == "" {
			return nil, "", fmt.Errorf("%q (window %d): expected NAME@START+DURATION, such as e3@60s+2m", item, i+1)
		}
		inst := slices.Index(names, name)
		if inst < 0 {
			return nil, "", fmt.Errorf("%q (window %d): no engine %q in the fleet: expected one of %s", item, i+1, name, strings.Join(names, ", "))
		}
		from, err := event.ParseDuration(start)
		switch {
		case err != nil:
			return nil, "", fmt.Errorf("%q (window %d): start %q: %v", item, i+1, start, err)
		case from < 0 || from > maxWindow:
			return nil, "", fmt.Errorf("%q (window %d): start %q: expected a duration from 0 to 1000h, such as 60s", item, i+1, start)
		}
		d, err := event.ParseDuration(dur)
		switch {
		case err != nil:
			return nil, "", fmt.Errorf("%q (window %d): duration %q: %v", item, i+1, dur, err)
		case d <= 0 || d > maxWindow:
			return nil, "", fmt.Errorf("%q (window %d): duration %q: expected a duration above 0 and at most 1000h, such as 2m", item, i+1, dur)
		}
		w := sim.Cordon{Inst: event.Instance(inst), From: from, Until: from + d}
		for j, o := range ws {
			if o.Inst == w.Inst && w.From < o.Until && o.From < w.Until {
				return nil, "", fmt.Errorf("%q (window %d) overlaps window %d on %s: expected one window at a time per engine", item, i+1, j+1, name)
			}
		}
		ws = append(ws, w)
	}
	// In time order, then by engine: one set of windows, one spelling
	// (and one config hash), however it was listed.
	slices.SortStableFunc(ws, func(a, b sim.Cordon) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.Inst, b.Inst)) })
	for _, w := range ws {
		canon = append(canon, fmt.Sprintf("%s@%gs+%gs", names[w.Inst], w.From.Seconds(), (w.Until-w.From).Seconds()))
	}
	return ws, strings.Join(canon, ","), nil
}
