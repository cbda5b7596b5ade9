package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/narwhal-bench/narwhal-bench/timing"
)

// prefillReport is the prefill curve's samples, R² over all of them, and
// each length's median against the fit and the fleet file's profile.
func prefillReport(all, medians []timing.Sample, lens []int, fit, current timing.Profile) *curveReport {
	f := func(x float64) float64 { return fit.Prefill(int(math.Round(x))) }
	r := &curveReport{R2: rSquared(all, f)}
	for _, s := range all {
		r.Samples = append(r.Samples, sampleJSON{X: s.X, Y: s.Y})
	}
	for i, m := range medians {
		r.Points = append(r.Points, point(lens[i], m, f(m.X), current.Prefill(int(math.Round(m.X)))))
	}
	r.MaxResidual = maxResidual(r.Points)
	return r
}

// decodeReport is the decode curve's samples, R² over those the fit
// used (keep), and each concurrency's mean context and gap over them
// against the fit and the fleet file's profile.
func decodeReport(waves []wave, keep []bool, fit, current timing.Profile) *curveReport {
	f := func(x float64) float64 { return fit.Interval(int64(math.Round(x))) }
	r := &curveReport{}
	var used []timing.Sample
	i := 0
	for _, w := range waves {
		var mx, my, n float64
		for _, s := range w.samples {
			r.Samples = append(r.Samples, sampleJSON{X: s.X, Y: s.Y})
			if keep[i] {
				used = append(used, s)
				mx += s.X
				my += s.Y
				n++
			} else {
				r.Outliers++
			}
			i++
		}
		if n == 0 {
			continue
		}
		m := timing.Sample{X: mx / n, Y: my / n}
		r.Points = append(r.Points, point(w.conc, m, f(m.X), current.Interval(int64(math.Round(m.X)))))
	}
	r.R2 = rSquared(used, f)
	r.MaxResidual = maxResidual(r.Points)
	return r
}

func point(sweep int, m timing.Sample, fit, current float64) pointReport {
	var vs *float64
	if current > 0 {
		v := (fit - current) / current
		vs = &v
	}
	return pointReport{Sweep: sweep, X: m.X, Measured: m.Y, Fit: fit, Current: current, VsCurrent: vs}
}

// rSquared is 1 - SSres/SStot of f over the samples; nil when there are
// none or they do not vary.
func rSquared(s []timing.Sample, f func(float64) float64) *float64 {
	if len(s) == 0 {
		return nil
	}
	var mean float64
	for _, p := range s {
		mean += p.Y
	}
	mean /= float64(len(s))
	var res, tot float64
	for _, p := range s {
		d := p.Y - f(p.X)
		res += d * d
		tot += (p.Y - mean) * (p.Y - mean)
	}
	if tot == 0 {
		return nil
	}
	r := 1 - res/tot
	return &r
}

func maxResidual(ps []pointReport) float64 {
	worst := 0.0
	for _, p := range ps {
		if p.Measured > 0 {
			worst = math.Max(worst, math.Abs(p.Measured-p.Fit)/p.Measured)
		}
	}
	return worst
}

// noisyResidual is the largest residual of a sweep point past which the
// output says the fit is poor.
const noisyResidual = 0.2

// fitWarnings says what is wrong with a fit, and what to do: coefficients
// the fleet file refuses (it would not load), coefficients it accepts
// that bend the curves outside the sweep, and sweep points the fit
// misses by much.
func fitWarnings(fit timing.Profile, ep *engineProfile) []string {
	var out []string
	if err := fit.Validate(); err != nil {
		for _, l := range strings.Split(err.Error(), "\n") {
			out = append(out, "the fleet file refuses this fit: "+l)
		}
	}
	if fit.Slope < 0 {
		out = append(out, "slope < 0: the decode gaps did not grow with the context; sweep wider contexts (larger --decode-concurrency values, a longer --decode-prompt), make sure nothing else uses the engine, or, if its iterations really do not depend on the context, write slope: 0 by hand")
	}
	if fit.Intercept < 0 {
		out = append(out, "intercept < 0: the decode line crosses zero inside the contexts it would price; sweep smaller contexts too (--decode-concurrency 1, a shorter --decode-prompt) or write intercept: 0 by hand and check I(ctx) above")
	}
	if fit.A < 0 {
		where := "for every prompt"
		if fit.B > 0 {
			where = fmt.Sprintf("beyond %.0f tokens, where it peaks", -fit.B/(2*fit.A))
		}
		out = append(out, fmt.Sprintf("a < 0: prefill grows less than linearly over the swept lengths, and T(n) falls %s, so prompts longer than the sweep are underpriced: sweep the longest prompts the engine serves (--prefill-lens), or refit with a: 0", where))
	}
	if fit.C < 0 {
		out = append(out, "c < 0: T(n) is 0 for the shortest prompts (the fleet file prices max(0, T(n))); sweep shorter prompts too (--prefill-lens from 64 or so)")
	}
	if r := ep.Prefill; r != nil && r.MaxResidual > noisyResidual {
		out = append(out, fmt.Sprintf("the prefill fit misses a length's median by %.0f%%: the engine's times are noisy or it was not idle; rerun with more --prefill-repeats", 100*r.MaxResidual))
	}
	if r := ep.Decode; r != nil && r.MaxResidual > noisyResidual {
		out = append(out, fmt.Sprintf("the decode fit misses a concurrency's mean by %.0f%%: the engine's times are noisy or it was not idle; rerun with more --decode-tokens", 100*r.MaxResidual))
	}
	return out
}
