package report

import (
	"github.com/narwhal-bench/narwhal-bench/event"
)

// SLO is the pair of objectives a request is judged by.
type SLO struct {
	TTFT event.Time
	TPOT event.Time
}

// Check names the first qualification check a request failed.
type Check uint8

// Checks, in the order Qualify applies them.
const (
	CheckOK         Check = iota
	CheckNotDone          // refused, expired or failed
	CheckLength           // finished at its output cap
	CheckCancelled        // cancelled by the client
	CheckEmpty            // fewer than two output tokens (no TPOT to judge)
	CheckTTFT             // TTFT above its SLO
	CheckTPOT             // TPOT above its SLO
)

var checkNames = [...]string{"ok", "not_completed", "length", "cancelled", "too_short", "ttft", "tpot"}

func (c Check) String() string { return checkNames[c] }

// Qualify applies the project's qualification rule to one request: it
// finished naturally (not at the output cap, not cancelled), produced at
// least two tokens, its TTFT measured from the scheduled send time is at or
// below the TTFT SLO, and its TPOT (mean gap after the first token) is at or
// below the TPOT SLO. It returns CheckOK or the first check that failed.
func Qualify(r *event.Row, slo SLO) Check {
	switch {
	case r.Terminal != event.KindFinish:
		return CheckNotDone
	case r.Cause == event.CauseLength:
		return CheckLength
	case r.Cause == event.CauseCancel:
		return CheckCancelled
	case r.OutputTokens < 2:
		return CheckEmpty
	case r.TTFT() > slo.TTFT:
		return CheckTTFT
	case r.TPOT() > slo.TPOT:
		return CheckTPOT
	}
	return CheckOK
}

// Summary counts one run's outcomes.
type Summary struct {
	Offered   int
	Completed int // finished, naturally or at the cap
	Qualified int // passed Qualify
	Refused   int
	Expired   int
	Failed    int
	// Misses counts requests by the first check they failed.
	Misses [CheckTPOT + 1]int
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
func Summarize(rows []event.Row, slo SLO) Summary {
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
		c := Qualify(r, slo)
		s.Misses[c]++
		if c == CheckOK {
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
