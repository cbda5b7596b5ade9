package sweep

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/internal/strictyaml"
)

// Experiment is an experiment file: one trace and fleet, the arms, rates,
// seeds and prefix-cache settings to cross. `narwhal-bench run` executes
// every (prefix cache, seed) combination as one sweep of arms × rates.
type Experiment struct {
	// Path is the file it was loaded from ("" when parsed from bytes).
	Path string `yaml:"-"`
	// Name names the experiment's output directory.
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Trace is a built-in trace, a file, or files joined with '+'.
	Trace string `yaml:"trace"`
	// TraceFormat forces spec, mooncake or azure (default: by extension).
	TraceFormat string `yaml:"trace_format"`
	// Fleet is a built-in fleet or a fleet file (default: the trace's).
	Fleet string `yaml:"fleet"`
	// SLO overrides the trace's and fleet's objectives (durations).
	SLO struct {
		TTFT string `yaml:"ttft,text"`
		TPOT string `yaml:"tpot,text"`
	} `yaml:"slo"`
	// Arms to run (see core.NewController), at least one.
	Arms []string `yaml:"arms"`
	// Rates, each as --rates takes it ("2.4", "1x", "0.5x..2x/0.25x");
	// default the trace's own rate.
	Rates []string `yaml:"rates,text"`
	// Seeds for the trace's draws (default the trace's seed).
	Seeds []uint64 `yaml:"seeds"`
	// PrefixCache lists the prefix-cache settings to run (default [false]).
	PrefixCache []bool `yaml:"prefix_cache"`
	// Cordons are maintenance windows every run plays, as sim --cordon
	// takes them ("e3@60s+2m,e4@300s+2m"); "" for none.
	Cordons string `yaml:"cordons"`
	// Published holds numbers a publication reports for this experiment,
	// printed beside ours: per arm, per prefix-cache setting ("on", "off"),
	// shares of offered requests in percent.
	Published *Published `yaml:"published"`
}

// Published is a publication's numbers for an experiment.
type Published struct {
	Source    string                        `yaml:"source"`
	Qualified map[string]map[string]float64 `yaml:"qualified"`
	Completed map[string]map[string]float64 `yaml:"completed"`
}

// Lookup returns the published share (percent) for arm at a prefix-cache
// setting, and whether there is one.
func (p *Published) Lookup(table map[string]map[string]float64, arm string, cache bool) (float64, bool) {
	if p == nil {
		return 0, false
	}
	key := "off"
	if cache {
		key = "on"
	}
	v, ok := table[arm][key]
	return v, ok
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// LoadExperiment reads and validates an experiment file strictly: unknown
// fields are errors, and every bad value names its field.
func LoadExperiment(path string) (exp *Experiment, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("experiment %s: %w", path, err)
	}
	e, err := ParseExperiment(data, filepath.Base(path))
	if e != nil {
		e.Path = path
	}
	return e, err
}

// ParseExperiment decodes an experiment strictly and validates it. It
// checks the shape only; arms, rates and files are checked when it runs
// (they need the fleet and trace).
func ParseExperiment(data []byte, source string) (exp *Experiment, err error) {
	defer func() {
		if r := recover(); r != nil {
			exp, err = nil, fmt.Errorf("experiment %s: unreadable YAML: %v", source, r)
		}
	}()
	var e Experiment
	if errs := strictyaml.Decode(data, &e); len(errs) > 0 {
		return nil, fmt.Errorf("experiment %s: %w", source, errors.Join(errs...))
	}
	var errs []error
	if !nameRE.MatchString(e.Name) {
		errs = append(errs, fmt.Errorf("name: %q: expected 1-64 letters, digits, '_', '-', '.'", e.Name))
	}
	seenSeed := map[uint64]bool{}
	for i, sd := range e.Seeds {
		if seenSeed[sd] {
			errs = append(errs, fmt.Errorf("seeds[%d]: %d given twice: expected each seed once (a repeated draw would count as two)", i, sd))
		}
		seenSeed[sd] = true
	}
	if strings.TrimSpace(e.Trace) == "" {
		errs = append(errs, errors.New("trace: missing: expected a built-in trace, a file, or files joined with +"))
	}
	switch e.TraceFormat {
	case "", "spec", "mooncake", "azure":
	default:
		errs = append(errs, fmt.Errorf("trace_format: %q: expected spec, mooncake or azure", e.TraceFormat))
	}
	if len(e.Arms) == 0 {
		errs = append(errs, errors.New("arms: none: expected at least one arm"))
	}
	seen := map[string]bool{}
	for i, a := range e.Arms {
		if seen[a] {
			errs = append(errs, fmt.Errorf("arms[%d]: %q twice: expected each arm once", i, a))
		}
		seen[a] = true
	}
	for i, r := range e.Rates {
		if _, err := ParseRates(r, 1); err != nil {
			errs = append(errs, fmt.Errorf("rates[%d]: %w", i, err))
		}
	}
	for _, f := range []struct{ name, v string }{{"slo.ttft", e.SLO.TTFT}, {"slo.tpot", e.SLO.TPOT}} {
		if f.v != "" {
			if _, err := ParseDuration(f.v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
			}
		}
	}
	if len(e.PrefixCache) > 2 || (len(e.PrefixCache) == 2 && e.PrefixCache[0] == e.PrefixCache[1]) {
		errs = append(errs, fmt.Errorf("prefix_cache: %v: expected [false], [true] or [false, true]", e.PrefixCache))
	}
	if p := e.Published; p != nil {
		for _, t := range []struct {
			name string
			m    map[string]map[string]float64
		}{{"qualified", p.Qualified}, {"completed", p.Completed}} {
			for _, arm := range slices.Sorted(maps.Keys(t.m)) {
				byCache := t.m[arm]
				if !seen[arm] {
					errs = append(errs, fmt.Errorf("published.%s.%s: not one of the arms: expected an arm the experiment runs (%s)", t.name, arm, strings.Join(e.Arms, ", ")))
				}
				for _, k := range slices.Sorted(maps.Keys(byCache)) {
					v := byCache[k]
					if (k != "on" && k != "off") || v < 0 || v > 100 {
						errs = append(errs, fmt.Errorf("published.%s.%s.%s: %v: expected on or off with a percentage", t.name, arm, k, v))
					}
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("experiment %s: %w", source, err)
	}
	if len(e.PrefixCache) == 0 {
		e.PrefixCache = []bool{false}
	}
	return &e, nil
}
