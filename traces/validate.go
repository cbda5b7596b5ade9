package traces

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate checks every rule of the schema and reports every violation,
// joined with errors.Join. Each names the field path, the offending value
// and what was expected. Violations are listed in schema order: top-level
// fields, then classes by name, then phases by index.
func (s *Spec) Validate() error {
	return errors.Join(s.validate()...)
}

// validator collects violations.
type validator struct {
	errs []error
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, &fieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

const nameRule = "expected letters, digits, '_', '-' or '.', starting with a letter or digit, at most 64 characters"

// isName reports whether s is a valid trace, fleet, class or phase name.
func isName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, r := range s {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '_' && r != '-' && r != '.') {
			return false
		}
	}
	return true
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func (s *Spec) validate() []error {
	v := &validator{}
	switch {
	case s.Name == "":
		v.fail("name", `missing: expected a trace name such as "demo"`)
	case !isName(s.Name):
		v.fail("name", "%q: %s", s.Name, nameRule)
	}
	if s.Fleet != "" && !isName(s.Fleet) {
		v.fail("fleet", "%q: %s", s.Fleet, nameRule)
	}
	if s.SLO.TTFT < 0 {
		v.fail("slo.ttft", "%v: expected a duration >= 0", s.SLO.TTFT)
	}
	if s.SLO.TPOT < 0 {
		v.fail("slo.tpot", "%v: expected a duration >= 0", s.SLO.TPOT)
	}
	v.arrival("arrival", s.Arrival)
	s.validateBaseRate(v)

	names := s.classNames()
	if len(names) == 0 {
		v.fail("classes", "missing: expected at least one class")
	}
	for _, name := range names {
		path := joinPath("classes", name)
		if !isName(name) {
			v.fail(path, "invalid class name %q: %s", name, nameRule)
		}
		c := s.Classes[name]
		v.dist(path+".input", c.Input)
		v.dist(path+".output", c.Output)
		if c.OutputCap < 0 {
			v.fail(path+".output_cap", "%d: expected a token count >= 0 (0 = no cap)", c.OutputCap)
		}
		if c.Prefix != nil {
			if sc := c.Prefix.Scope; sc != "" && sc != "trace" && sc != "phase" {
				v.fail(path+".prefix.scope", "%q: expected trace or phase", sc)
			}
			if c.Prefix.Groups < 1 || c.Prefix.Groups > MaxPrefixGroups {
				v.fail(path+".prefix.groups", "%d: expected a group count between 1 and %d", c.Prefix.Groups, MaxPrefixGroups)
			}
			v.dist(path+".prefix.tokens", c.Prefix.Tokens)
		}
	}

	if len(s.Phases) == 0 {
		v.fail("phases", "missing: expected at least one phase")
	}
	var total time.Duration
	durationsOK := true
	for i := range s.Phases {
		if !s.validatePhase(v, i, names) {
			durationsOK = false
			continue
		}
		total += s.Phases[i].Duration
		if total > MaxDuration {
			durationsOK = false
			v.fail("phases", "total duration exceeds %v at phases[%d]: expected at most %v in all", MaxDuration, i, MaxDuration)
			break
		}
	}
	if len(v.errs) == 0 && durationsOK {
		if n := s.ExpectedRequests(1); !(n <= MaxStreamRequests) {
			v.fail("phases", "about %.4g requests expected at scale 1: expected at most %d", n, MaxStreamRequests)
		} else if n == 0 {
			v.fail("phases", "no phase has arrivals (every rate is 0): expected at least one phase with a rate > 0, requests or counts")
		}
	}
	return v.errs
}

func (s *Spec) classNames() []string {
	names := make([]string, 0, len(s.Classes))
	for name := range s.Classes {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (s *Spec) validateBaseRate(v *validator) {
	user := -1
	for i, p := range s.Phases {
		if p.RateMultiplier != nil {
			user = i
			break
		}
	}
	switch {
	case !finite(s.BaseRate) || s.BaseRate < 0:
		v.fail("base_rate", "%s: expected a rate > 0 (requests per second)", formatFloat(s.BaseRate))
	case user >= 0 && s.BaseRate == 0:
		v.fail("base_rate", "missing: expected a rate > 0 (requests per second) because phases[%d] uses rate_multiplier", user)
	case user < 0 && s.BaseRate != 0:
		v.fail("base_rate", "%s: not used by any phase: expected base_rate only together with rate_multiplier", formatFloat(s.BaseRate))
	}
}

func (v *validator) arrival(path string, a Arrival) {
	switch a.Process {
	case "", ProcessPoisson, ProcessUniform:
		if a.Burstiness != 0 {
			v.fail(path+".burstiness", "%s: only used by process gamma: expected no burstiness for process %s",
				formatFloat(a.Burstiness), orDefault(a.Process, ProcessPoisson))
		}
		if a.CV != 0 {
			v.fail(path+".cv", "%s: only used by process gamma: expected no cv for process %s",
				formatFloat(a.CV), orDefault(a.Process, ProcessPoisson))
		}
	case ProcessGamma:
		if a.CV != 0 {
			if a.Burstiness != 0 {
				v.fail(path+".cv", "%s: expected cv or burstiness, not both (shape k = 1/cv^2)", formatFloat(a.CV))
			} else if k := 1 / (a.CV * a.CV); !(a.CV > 0) || !(k >= MinBurstiness && k <= MaxBurstiness) {
				v.fail(path+".cv", "%s: expected a coefficient of variation between %.4g and %.4g", formatFloat(a.CV),
					1/math.Sqrt(MaxBurstiness), 1/math.Sqrt(MinBurstiness))
			}
		} else if a.Burstiness == 0 {
			v.fail(path+".burstiness", "missing: expected the gamma shape k between %g and %g (1 = Poisson, < 1 burstier), or cv, the gaps' coefficient of variation", MinBurstiness, MaxBurstiness)
		} else if !(a.Burstiness >= MinBurstiness && a.Burstiness <= MaxBurstiness) {
			v.fail(path+".burstiness", "%s: expected the gamma shape k between %g and %g (1 = Poisson, < 1 burstier)",
				formatFloat(a.Burstiness), MinBurstiness, MaxBurstiness)
		}
	default:
		v.fail(path+".process", "%q: expected one of poisson, uniform, gamma", a.Process)
	}
	if a.BatchMean != 0 && !(a.BatchMean >= 1 && a.BatchMean <= 1000) {
		v.fail(path+".batch_mean", "%s: expected a mean batch size between 1 and 1000", formatFloat(a.BatchMean))
	}
	if a.BatchMean != 0 && path != "arrival" {
		v.fail(path+".batch_mean", "%s: batches are drawn over the whole trace: expected batch_mean in the trace's arrival only", formatFloat(a.BatchMean))
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// validatePhase checks phase i; it reports false when the phase duration is
// unusable.
func (s *Spec) validatePhase(v *validator, i int, classes []string) bool {
	p := &s.Phases[i]
	path := "phases[" + strconv.Itoa(i) + "]"
	if p.Name != "" && !isName(p.Name) {
		v.fail(path+".name", "%q: %s", p.Name, nameRule)
	}
	durOK := true
	switch {
	case p.Duration == 0:
		v.fail(path+".duration", `missing or 0s: expected a duration > 0 such as "30s"`)
		durOK = false
	case p.Duration < 0 || p.Duration > MaxDuration:
		v.fail(path+".duration", "%v: expected a duration > 0 and at most %v", p.Duration, MaxDuration)
		durOK = false
	}
	if p.Arrival != nil {
		v.arrival(path+".arrival", *p.Arrival)
	}

	var given []string
	if p.Rate != nil {
		given = append(given, "rate")
	}
	if p.RateMultiplier != nil {
		given = append(given, "rate_multiplier")
	}
	if p.Requests != nil {
		given = append(given, "requests")
	}
	if p.Counts != nil {
		given = append(given, "counts")
	}
	switch len(given) {
	case 0:
		v.fail(path, "none of rate, rate_multiplier, requests, counts given: expected exactly one of them")
	case 1:
	default:
		v.fail(path, "%s given together: expected exactly one of rate, rate_multiplier, requests, counts", strings.Join(given, " and "))
	}

	idle := false
	if p.Rate != nil {
		if !finite(*p.Rate) || *p.Rate < 0 {
			v.fail(path+".rate", "%s: expected a rate >= 0 (requests per second)", formatFloat(*p.Rate))
		}
		idle = *p.Rate == 0
	}
	if p.RateMultiplier != nil {
		if !finite(*p.RateMultiplier) || *p.RateMultiplier < 0 {
			v.fail(path+".rate_multiplier", "%s: expected a multiplier >= 0 of base_rate", formatFloat(*p.RateMultiplier))
		}
		idle = *p.RateMultiplier == 0
	}
	if p.Requests != nil {
		if *p.Requests < 0 || *p.Requests > MaxRequests {
			v.fail(path+".requests", "%d: expected a request count between 0 and %d", *p.Requests, MaxRequests)
		}
		idle = *p.Requests == 0
	}
	if p.Counts != nil {
		if p.Mix != nil {
			v.fail(path+".mix", "given together with counts: expected either counts, or mix with rate, rate_multiplier or requests")
		}
		for _, name := range sortedKeys(p.Counts) {
			cp := joinPath(path+".counts", name)
			if _, ok := s.Classes[name]; !ok {
				v.fail(cp, "unknown class %q: expected one of %s", name, strings.Join(classes, ", "))
			}
			if n := p.Counts[name]; n < 0 || n > MaxRequests {
				v.fail(cp, "%d: expected a request count between 0 and %d", n, MaxRequests)
			}
		}
		return durOK
	}
	if p.Mix == nil {
		if !idle && len(given) == 1 {
			v.fail(path+".mix", "missing: expected relative class weights such as {%s: 1}", firstOr(classes, "chat"))
		}
		return durOK
	}
	sum := 0.0
	for _, name := range sortedKeys(p.Mix) {
		mp := joinPath(path+".mix", name)
		if _, ok := s.Classes[name]; !ok {
			v.fail(mp, "unknown class %q: expected one of %s", name, strings.Join(classes, ", "))
		}
		w := p.Mix[name]
		if !finite(w) || w < 0 {
			v.fail(mp, "%s: expected a weight >= 0", formatFloat(w))
			continue
		}
		sum += w
	}
	switch {
	case len(p.Mix) == 0:
		v.fail(path+".mix", "empty: expected at least one class with a positive weight")
	case sum == 0:
		v.fail(path+".mix", "all weights are 0: expected at least one positive weight")
	case math.IsInf(sum, 0):
		v.fail(path+".mix", "weights sum to +Inf: expected a finite sum")
	}
	return durOK
}

func firstOr(names []string, def string) string {
	if len(names) > 0 {
		return names[0]
	}
	return def
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// distParams lists the parameters each distribution uses, in schema order.
var distParams = map[string][]string{
	DistFixed:     {"value"},
	DistUniform:   {"min", "max"},
	DistNormal:    {"mean", "stddev", "min", "max"},
	DistLognormal: {"median", "sigma", "min", "max"},
	DistEmpirical: {"values", "weights"},
}

func (v *validator) dist(path string, d Dist) {
	params, ok := distParams[d.Kind]
	if !ok {
		if d.Kind == "" {
			v.fail(path+".dist", "missing: expected one of fixed, uniform, normal, lognormal, empirical")
		} else {
			v.fail(path+".dist", "%q: expected one of fixed, uniform, normal, lognormal, empirical", d.Kind)
		}
		return
	}
	present := []struct {
		name string
		set  bool
	}{
		{"value", d.Value != nil},
		{"min", d.Min != nil},
		{"max", d.Max != nil},
		{"mean", d.Mean != nil},
		{"stddev", d.Stddev != nil},
		{"median", d.Median != nil},
		{"sigma", d.Sigma != nil},
		{"values", d.Values != nil},
		{"weights", d.Weights != nil},
	}
	for _, p := range present {
		if p.set && !slices.Contains(params, p.name) {
			v.fail(path+"."+p.name, "not used by dist %s: expected only %s", d.Kind, strings.Join(params, ", "))
		}
	}
	switch d.Kind {
	case DistFixed:
		v.length(path+".value", d.Value, true)
	case DistUniform:
		v.bounds(path, d.Min, true, d.Max)
	case DistNormal:
		switch {
		case d.Mean == nil:
			v.fail(path+".mean", "missing: expected a number")
		case !finite(*d.Mean):
			v.fail(path+".mean", "%s: expected a finite number", formatFloat(*d.Mean))
		}
		v.positive(path+".stddev", d.Stddev)
		v.bounds(path, d.Min, false, d.Max)
	case DistLognormal:
		v.positive(path+".median", d.Median)
		v.positive(path+".sigma", d.Sigma)
		v.bounds(path, d.Min, false, d.Max)
	case DistEmpirical:
		if len(d.Values) == 0 {
			v.fail(path+".values", "missing or empty: expected a list of lengths such as [128, 512, 2048]")
		}
		for i, x := range d.Values {
			if x < 1 || x > MaxTokens {
				v.fail(path+".values["+strconv.Itoa(i)+"]", "%d: expected a length between 1 and %d", x, MaxTokens)
			}
		}
		if d.Weights == nil {
			return
		}
		if len(d.Weights) != len(d.Values) {
			v.fail(path+".weights", "%d weights for %d values: expected one weight per value", len(d.Weights), len(d.Values))
		}
		sum := 0.0
		for i, w := range d.Weights {
			if !finite(w) || w < 0 {
				v.fail(path+".weights["+strconv.Itoa(i)+"]", "%s: expected a weight >= 0", formatFloat(w))
				continue
			}
			sum += w
		}
		if len(d.Weights) > 0 && sum == 0 {
			v.fail(path+".weights", "all weights are 0: expected at least one positive weight")
		} else if math.IsInf(sum, 0) {
			v.fail(path+".weights", "weights sum to +Inf: expected a finite sum")
		}
	}
}

// length checks an optional or required token length.
func (v *validator) length(path string, x *int, required bool) bool {
	if x == nil {
		if required {
			v.fail(path, "missing: expected a length between 1 and %d", MaxTokens)
		}
		return !required
	}
	if *x < 1 || *x > MaxTokens {
		v.fail(path, "%d: expected a length between 1 and %d", *x, MaxTokens)
		return false
	}
	return true
}

// bounds checks min and max of a distribution; min defaults to 1 unless
// minRequired.
func (v *validator) bounds(path string, lo *int, minRequired bool, hi *int) {
	okLo := v.length(path+".min", lo, minRequired)
	okHi := v.length(path+".max", hi, true)
	if okLo && okHi {
		l := 1
		if lo != nil {
			l = *lo
		}
		if *hi < l {
			v.fail(path, "max %d < min %d: expected max >= min", *hi, l)
		}
	}
}

func (v *validator) positive(path string, x *float64) {
	switch {
	case x == nil:
		v.fail(path, "missing: expected a number > 0")
	case !finite(*x) || *x <= 0:
		v.fail(path, "%s: expected a number > 0", formatFloat(*x))
	}
}
