package sweep

import (
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// Options is a sweep as a user writes it, on the command line or in an
// experiment file; Resolve turns it into a Config.
type Options struct {
	Trace, TraceFormat string
	// Fleet defaults to the trace's, else "demo".
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
	Speedup     float64
	PrefixCache bool
	// Admission overrides the fleet's admission mode ("open" or "queue";
	// "" keeps the fleet's).
	Admission string
	Workers   int
	Version   string
}

// Resolve loads the trace and fleet and checks every option, naming the
// option and the value in its errors. notes are what the trace importers
// changed or ignored.
func Resolve(o Options) (cfg Config, notes []string, err error) {
	tr, err := traces.Open(o.Trace, o.TraceFormat)
	if err != nil {
		return cfg, nil, err
	}
	speedup := o.Speedup
	if speedup == 0 {
		speedup = 1
	}
	if !(speedup > 0) || speedup > 1e6 {
		return cfg, nil, fmt.Errorf("speedup: %v: expected a positive factor", o.Speedup)
	}
	fleetName := o.Fleet
	if fleetName == "" {
		fleetName = tr.Fleet
	}
	if fleetName == "" {
		fleetName = "demo"
	}
	fl, err := fleet.Load(fleetName)
	if err != nil {
		return cfg, nil, err
	}
	cfg = Config{Trace: tr, Fleet: fl, Seed: tr.Seed, Workers: o.Workers, Version: o.Version, PrefixCache: o.PrefixCache,
		Admission: fl.CoreAdmission()}
	if o.Admission != "" {
		if cfg.Admission.Mode, err = core.ParseAdmissionMode(o.Admission); err != nil {
			return cfg, nil, fmt.Errorf("--admission: %w", err)
		}
	}
	if o.Seed != nil {
		cfg.Seed = *o.Seed
	}
	cfg.SLO.TTFT, cfg.SLO.TPOT = event.Time(tr.SLO.TTFT), event.Time(tr.SLO.TPOT)
	for _, f := range []struct {
		name, v string
		dst     *event.Time
	}{{"ttft-slo", o.TTFT, &cfg.SLO.TTFT}, {"tpot-slo", o.TPOT, &cfg.SLO.TPOT}} {
		if f.v != "" {
			s, err := ParseDuration(f.v)
			if err != nil {
				return cfg, nil, fmt.Errorf("%s: %w", f.name, err)
			}
			*f.dst = s
		}
	}
	cfg.Arms = o.Arms
	if len(cfg.Arms) == 0 {
		cfg.Arms = append(core.StaticArms(fl.Size()), "aggregated")
	}
	for _, a := range cfg.Arms {
		if err := CheckArm(a, fl.Size()); err != nil {
			return cfg, nil, fmt.Errorf("arms: %w", err)
		}
	}
	if o.Rates != "" {
		if cfg.Rates, err = ParseRates(o.Rates, tr.MeanRate()); err != nil {
			return cfg, nil, fmt.Errorf("rates: %w", err)
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
	return cfg, tr.Notes(), nil
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
