package sweep

import (
	"fmt"
	"math"
	"slices"

	"github.com/narwhal-bench/narwhal-bench/score"
)

// MaxRefine is the most bisection steps Config.Refine may ask for: eight
// halve a grid step 256 times, finer than a simulated run resolves.
const MaxRefine = 8

// refine bisects, Refine times, the grid step above each arm's sustained
// rate: the step from the arm's last passing rate (its sustained rate) to
// the first failing one. Each step runs the arm once more, at the middle
// of what is left of its bracket, and keeps the half where attainment
// crosses the target. Arms whose brackets share a middle run in one
// sub-sweep (the same trace and seed, so the oracle, when it is one of
// them, bounds the others there as on the grid). An arm that passes at
// the grid's top, or fails at its lowest rate, is not refined. The runs
// go to res.Refined, in the order they ran; SetSustained counts them.
func (res *Result) refine(cfg Config) error {
	type bracket struct{ lo, hi float64 }
	open := map[string]*bracket{}
	for _, arm := range res.Arms {
		s := res.Sustained[arm]
		if s == nil || res.SustainedGridTop[arm] {
			continue
		}
		// The first grid rate above the sustained one fails (else it
		// would be the sustained rate); the grid may be given in any order.
		hi := math.Inf(1)
		for _, r := range res.Rates {
			if r > *s {
				hi = min(hi, r)
			}
		}
		if math.IsInf(hi, 1) {
			return fmt.Errorf("sweep: refine: %s's sustained rate %v is the grid's top, yet not marked so", arm, *s)
		}
		open[arm] = &bracket{lo: *s, hi: hi}
	}
	for step := 0; step < cfg.Refine; step++ {
		byMid := map[float64][]string{}
		var mids []float64
		for _, arm := range res.Arms {
			b := open[arm]
			if b == nil {
				continue
			}
			mid := CanonRate((b.lo + b.hi) / 2)
			if !(mid > b.lo && mid < b.hi) { // the bracket is as fine as a rate is
				delete(open, arm)
				continue
			}
			if byMid[mid] == nil {
				mids = append(mids, mid)
			}
			byMid[mid] = append(byMid[mid], arm)
		}
		slices.Sort(mids)
		for _, mid := range mids {
			sub := cfg
			sub.Refine, sub.Rates, sub.Arms, sub.Progress = 0, []float64{mid}, byMid[mid], nil
			r, err := Execute(sub)
			if err != nil {
				return fmt.Errorf("refining at %v req/s: %w", mid, err)
			}
			for _, run := range r.Runs {
				res.Refined = append(res.Refined, run)
				res.Requests += run.Offered
				if b := open[run.Arm]; run.Attainment >= score.AttainmentTarget {
					b.lo = mid
				} else {
					b.hi = mid
				}
			}
		}
	}
	res.Refine = cfg.Refine
	return nil
}
