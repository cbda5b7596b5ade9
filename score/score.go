package score

import (
	"math"
	"sort"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Summary counts one run's outcomes.
type Summary struct {
	Offered   int
	Completed int // finished, naturally or at the cap
	Qualified int // passed event.Qualify
	Refused   int
	Expired   int
	Failed    int
	// Preemptions counts KV-capacity preemptions over all requests.
	Preemptions int
	// Spilled counts the prompts burst spill placed on decode engines.
	Spilled int
	// Misses counts requests by the first check they failed.
	Misses [event.NumChecks]int
}

// Attainment is the share of offered requests that qualified (0 when
// nothing was offered).
func (s Summary) Attainment() float64 {
	if s.Offered == 0 {
		return 0
	}
	return float64(s.Qualified) / float64(s.Offered)
}

// Summarize scores rows, one per offered request.
func Summarize(rows []event.Row, slo event.SLO) Summary {
	var s Summary
	for i := range rows {
		s.Add(&rows[i], slo)
	}
	return s
}

// Add scores one more offered request's row, as Summarize does: a run's
// rows may be added as its requests end (event.StreamFold), in any order.
func (s *Summary) Add(r *event.Row, slo event.SLO) {
	s.Offered++
	switch r.Terminal {
	case event.KindFinish:
		s.Completed++
	case event.KindRefuse:
		s.Refused++
	case event.KindExpire:
		s.Expired++
	case event.KindFail:
		s.Failed++
	}
	s.Preemptions += int(r.Preemptions)
	if r.Spilled {
		s.Spilled++
	}
	c := event.Qualify(r, slo)
	s.Misses[c]++
	if c == event.CheckOK {
		s.Qualified++
	}
}

// AttainmentTarget is the share of offered requests that must qualify for a
// rate to count as sustained (DistServe, Arrow §6.1).
const AttainmentTarget = 0.90

// Sustained returns the sustained rate the standard way: the highest grid
// rate such that it and every lower rate meet target, and false when the
// lowest rate already fails. A rate that passes above a failing one does
// not count (a rebound past a collapse is noise, not capacity). rates need
// not be sorted; attainment is parallel to rates.
func Sustained(rates, attainment []float64, target float64) (float64, bool) {
	s := SustainedOf(rates, attainment, target)
	return s.Rate, s.OK
}

// SustainedRate is the sustained rate with what the grid can and cannot
// say about it.
type SustainedRate struct {
	// Rate is the highest grid rate such that it and every lower grid rate
	// meet the target; OK is false when the lowest rate fails.
	Rate float64
	OK   bool
	// GridTop is true when every grid rate passes: the sustained rate is
	// at least Rate, the grid's top, and the grid says nothing above it.
	GridTop bool
	// Crossing is where attainment crosses the target, interpolated
	// linearly between Rate and the first failing rate above it; NaN when
	// GridTop or !OK.
	Crossing float64
}

// SustainedOf computes the standard sustained rate and its crossing.
func SustainedOf(rates, attainment []float64, target float64) SustainedRate {
	idx := make([]int, len(rates))
	for i := range idx {
		idx[i] = i
	}
	// Several runs at one rate (a root of merged sweeps): the worst comes
	// first, so the rate passes only when every one of them does, whatever
	// order they were given in.
	sort.SliceStable(idx, func(a, b int) bool {
		if rates[idx[a]] != rates[idx[b]] {
			return rates[idx[a]] < rates[idx[b]]
		}
		return attainment[idx[a]] < attainment[idx[b]]
	})
	out := SustainedRate{Crossing: math.NaN()}
	for k, i := range idx {
		if attainment[i] >= target {
			out.Rate, out.OK = rates[i], true
			continue
		}
		if out.OK {
			prev := idx[k-1]
			a0, a1 := attainment[prev], attainment[i]
			out.Crossing = rates[prev] + (a0-target)/(a0-a1)*(rates[i]-rates[prev])
		}
		return out
	}
	out.GridTop = out.OK
	return out
}
