package score

import (
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
	s := Summary{Offered: len(rows)}
	for i := range rows {
		r := &rows[i]
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
		c := event.Qualify(r, slo)
		s.Misses[c]++
		if c == event.CheckOK {
			s.Qualified++
		}
	}
	return s
}

// AttainmentTarget is the share of offered requests that must qualify for a
// rate to count as sustained (DistServe, Arrow §6.1).
const AttainmentTarget = 0.90

// Sustained returns the highest rate whose attainment is at least target,
// and false when no rate reaches it. rates and attainment are parallel.
func Sustained(rates, attainment []float64, target float64) (float64, bool) {
	best, ok := 0.0, false
	for i, r := range rates {
		if attainment[i] >= target && (!ok || r > best) {
			best, ok = r, true
		}
	}
	return best, ok
}
