package timing

import (
	"errors"
	"fmt"
	"math"
)

// Profile is one instance's timing curves (Arrow §3.1).
//
// Prefill of an n-token prompt takes T(n) = max(0, A·n² + B·n + C) seconds.
// A decode iteration over a running batch that holds ctx resident context
// tokens takes I(ctx) = max(0, Slope·ctx + Intercept) seconds.
type Profile struct {
	A float64 `yaml:"a" json:"a"` // prefill quadratic coefficient, s/token²
	B float64 `yaml:"b" json:"b"` // prefill linear coefficient, s/token
	C float64 `yaml:"c" json:"c"` // prefill constant, s
	// Slope is the decode interval's growth per resident context token, s/token.
	Slope float64 `yaml:"slope" json:"slope"`
	// Intercept is the decode interval of an empty batch, s.
	Intercept float64 `yaml:"intercept" json:"intercept"`
}

// Reference is the Narwhal reference demo's profile (a=2e-8, b=6e-5,
// c=0.005, slope=3e-6, intercept=0.012).
var Reference = Profile{A: 2e-8, B: 6e-5, C: 0.005, Slope: 3e-6, Intercept: 0.012}

// Validate reports every coefficient that is not finite, and decode
// coefficients the simulator cannot advance in closed form.
func (p Profile) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"a", p.A}, {"b", p.B}, {"c", p.C}, {"slope", p.Slope}, {"intercept", p.Intercept}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			errs = append(errs, fmt.Errorf("%s: %v: expected a finite number", f.name, f.v))
		}
	}
	if p.Slope < 0 {
		errs = append(errs, fmt.Errorf("slope: %v: expected >= 0 (a decode iteration never gets faster as the batch grows)", p.Slope))
	}
	if p.Intercept < 0 {
		errs = append(errs, fmt.Errorf("intercept: %v: expected >= 0", p.Intercept))
	}
	if p.Slope == 0 && p.Intercept == 0 {
		errs = append(errs, errors.New("slope, intercept: both 0: expected a decode iteration to take some time"))
	}
	if p.Prefill(1) <= 0 && p.Prefill(100000) <= 0 {
		errs = append(errs, errors.New("a, b, c: prefill time is 0 for every prompt: expected positive prefill times"))
	}
	if t := p.Prefill(MaxProfileTokens); t > MaxSpan {
		errs = append(errs, fmt.Errorf("a, b, c: T(%d tokens) = %.4g s: expected at most %g s (1000 h); a prefill this slow overflows the simulated clock", MaxProfileTokens, t, MaxSpan))
	}
	if t := p.Interval(MaxProfileContext); t > MaxSpan {
		errs = append(errs, fmt.Errorf("slope, intercept: I(%d tokens) = %.4g s: expected at most %g s (1000 h); a decode iteration this slow overflows the simulated clock", MaxProfileContext, t, MaxSpan))
	}
	return errors.Join(errs...)
}

// Bounds of Validate: the longest prompt a trace may hold (traces'
// MaxTokens), a batch's largest resident context, and the longest span
// one prefill or decode iteration may take (a trace's longest duration,
// 1000 h).
const (
	MaxProfileTokens  = 10_000_000
	MaxProfileContext = 1_000_000_000
	MaxSpan           = 1000 * 3600.0
)

// Prefill returns T(n), the seconds to prefill an n-token prompt.
func (p Profile) Prefill(n int) float64 {
	x := float64(n)
	return math.Max(0, p.A*x*x+p.B*x+p.C)
}

// PrefillSpan returns the seconds to compute prompt tokens [from, to): the
// part of T(to) that tokens before from did not already pay. A prompt run
// from 0 costs exactly T(to), its profiled time, however it is chunked;
// a prompt whose first k tokens come from the prefix cache costs
// T(to) − T(k).
func (p Profile) PrefillSpan(from, to int) float64 {
	if to <= from {
		return 0
	}
	if from <= 0 {
		return p.Prefill(to)
	}
	return math.Max(0, p.Prefill(to)-p.Prefill(from))
}

// Interval returns I(ctx), the seconds of one decode iteration over a
// batch holding ctx resident context tokens.
func (p Profile) Interval(ctx int64) float64 {
	return math.Max(0, p.Slope*float64(ctx)+p.Intercept)
}

// MaxTokens returns MT(tpotSLO), the largest resident context (tokens) a
// decode batch may hold and still meet the TPOT SLO (Arrow §5.3). It is 0
// when even an empty batch misses the SLO and +Inf when the interval does
// not grow with the batch.
func (p Profile) MaxTokens(tpotSLO float64) float64 {
	if p.Intercept > tpotSLO {
		return 0
	}
	if p.Slope <= 0 {
		return math.Inf(1)
	}
	return math.Max(0, (tpotSLO-p.Intercept)/p.Slope)
}
