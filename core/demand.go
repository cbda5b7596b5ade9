package core

import (
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// window is a time-ordered queue of samples kept for a fixed span.
type window[T any] struct {
	at   []event.Time
	val  []T
	head int
}

func (w *window[T]) add(t event.Time, v T) {
	w.at = append(w.at, t)
	w.val = append(w.val, v)
}

// prune drops samples older than since and compacts now and then.
func (w *window[T]) prune(since event.Time) {
	for w.head < len(w.at) && w.at[w.head] < since {
		w.head++
	}
	if w.head > 1024 && w.head*2 > len(w.at) {
		n := copy(w.at, w.at[w.head:])
		copy(w.val, w.val[w.head:])
		w.at, w.val, w.head = w.at[:n], w.val[:n], 0
	}
}

func (w *window[T]) len() int { return len(w.at) - w.head }

func (w *window[T]) each(f func(t event.Time, v T)) {
	for i := w.head; i < len(w.at); i++ {
		f(w.at[i], w.val[i])
	}
}

// arrivalSample is one offered request's prompt.
type arrivalSample struct {
	prefill float64 // fleet-mean T(input), s
	input   int
}

// finishSample is one ended request's decode footprint and outcome.
type finishSample struct {
	output int
	// tokenSteps is output·(input + output/2): the context-token·iterations
	// the request held a decode batch for (Little's law for decode).
	tokenSteps float64
	ttftOK     bool
	tpotOK     bool
}

// Demand estimates offered work from a window of arrivals and endings.
// Both drivers feed it the same facts, so it is the same in simulation
// and live.
type Demand struct {
	Span event.Time
	// The windows keep running totals, so a reading costs a binary search
	// per span, not a pass over the window.
	arrivals summedWindow[arrivalSample, arrivalTotals]
	finishes summedWindow[finishSample, finishTotals]
	// meanT caches the fleet-mean T(n) by prompt length (fleetPrefill),
	// -1 where not known yet (T(n) is never negative); lengths from
	// meanTCap up are not cached.
	meanT []float64
	same  int8 // 0 unknown, 1 every instance has one profile, 2 not
}

func (d *Demand) arrived(c *View, r Request) {
	d.arrivals.add(c.now, arrivalSample{prefill: d.fleetPrefill(c, r.InputTokens), input: r.InputTokens})
}

// meanTCap bounds the prompt lengths fleetPrefill caches (a slice indexed
// by length: 1M lengths, 8 MiB at most).
const meanTCap = 1 << 20

// fleetPrefill is the fleet-mean T(n). Profiles never change after New,
// so on a large fleet it is computed once per prompt length and kept (the
// same sum in the same order: the same bits); a small fleet sums directly.
func (d *Demand) fleetPrefill(c *View, n int) float64 {
	if len(c.inst) >= 16 && n >= 0 && n < len(d.meanT) && d.meanT[n] >= 0 {
		return d.meanT[n]
	}
	var t float64
	if d.same == 0 {
		d.same = 1
		for i := range c.inst {
			if c.inst[i].Profile != c.inst[0].Profile {
				d.same = 2
			}
		}
	}
	if d.same == 1 {
		// One profile: the same additions of the same T(n), in
		// O(log instances) (repeatAdd: the loop's bits).
		t = repeatAdd(c.inst[0].Profile.Prefill(n), len(c.inst))
	} else {
		for i := range c.inst {
			t += c.inst[i].Profile.Prefill(n)
		}
	}
	t /= float64(len(c.inst))
	if len(c.inst) >= 16 && n >= 0 && n < meanTCap {
		for len(d.meanT) <= n {
			d.meanT = append(d.meanT, -1)
		}
		d.meanT[n] = t
	}
	return t
}

func (d *Demand) finished(c *View, r Request) {
	out := r.OutputTokens
	d.finishes.add(c.now, finishSample{
		output:     out,
		tokenSteps: float64(out) * (float64(r.InputTokens) + float64(out)/2),
		ttftOK:     r.TTFT != event.Never && r.TTFT <= c.slo.TTFT,
		tpotOK:     r.TPOT == event.Never || r.TPOT <= c.slo.TPOT,
	})
}

// DemandEstimate is one reading of the estimator.
type DemandEstimate struct {
	Arrivals int     // arrivals in the window
	Finishes int     // endings in the window
	Span     float64 // seconds the window covers
	Rate     float64 // arrivals per second
	// PrefillLoad is offered prefill work: instance-seconds per second.
	PrefillLoad float64
	// MeanPrefill and MeanPrefill2 are E[T] and E[T²] over arrivals, s, s².
	MeanPrefill, MeanPrefill2 float64
	// DecodeSteps is the rate of context-token·iterations ended requests
	// needed: Σ output·(input+output/2) per second. Resident decode context
	// is DecodeSteps times the decode interval (Little's law).
	DecodeSteps float64
	// TTFTOK and TPOTOK are the shares of ended requests meeting each SLO.
	TTFTOK, TPOTOK float64
	// ShortPrefill reports that a blended estimate took the prefill work
	// from the short window (a change was detected).
	ShortPrefill bool

	prefillVar float64 // squared standard error of PrefillLoad
}

func (d *Demand) estimate(now event.Time, start event.Time) DemandEstimate {
	return d.estimateSpan(now, start, d.Span)
}

// estimateSpan estimates over the last span (at most d.Span) before now.
func (d *Demand) estimateSpan(now, start, spanT event.Time) DemandEstimate {
	d.arrivals.prune(now - d.Span)
	d.finishes.prune(now - d.Span)
	since := now - spanT
	span := min(spanT, now-start).Seconds()
	if span <= 0 {
		span = 1
	}
	e := DemandEstimate{Span: span}
	// Exact sums over the span, each rounded once.
	a := d.arrivals.since(since)
	e.Arrivals = a.n
	e.PrefillLoad = a.prefill.float()
	e.MeanPrefill2 = a.prefillSq.float()
	e.prefillVar = e.MeanPrefill2
	if e.Arrivals > 0 {
		e.MeanPrefill = e.PrefillLoad / float64(e.Arrivals)
		e.MeanPrefill2 /= float64(e.Arrivals)
	}
	e.PrefillLoad /= span
	e.Rate = float64(e.Arrivals) / span
	f := d.finishes.since(since)
	e.Finishes = f.n
	ttft, tpot := f.ttftOK, f.tpotOK
	e.DecodeSteps = float64(f.steps2) / 2
	e.DecodeSteps /= span
	// A compound-Poisson sum's variance is the sum of squared marks; as a
	// rate over span its standard error is sqrt(Σx²)/span.
	e.prefillVar /= span * span
	if e.Finishes > 0 {
		e.TTFTOK = float64(ttft) / float64(e.Finishes)
		e.TPOTOK = float64(tpot) / float64(e.Finishes)
	}
	return e
}

// blend estimates offered prefill work over the long span, switching to
// the short span's estimate when the two differ by more than three standard
// errors of the short one (a real change of traffic, not Poisson noise), and
// on to a quarter of the short span when that differs from the short one
// the same way (the change is recent); decode work always comes from the
// short span.
func (d *Demand) blend(now, short event.Time) DemandEstimate {
	l := d.estimateSpan(now, 0, d.Span)
	s := d.estimateSpan(now, 0, short)
	e := l
	if math.Abs(s.PrefillLoad-l.PrefillLoad) > 3*math.Sqrt(s.prefillVar) {
		use := s
		// A change inside the short window: a quarter of it holds only the
		// new traffic sooner; use it when it differs again.
		if q := d.estimateSpan(now, 0, short/4); math.Abs(q.PrefillLoad-s.PrefillLoad) > 3*math.Sqrt(q.prefillVar) {
			use = q
		}
		e.Arrivals, e.Rate, e.PrefillLoad, e.MeanPrefill, e.MeanPrefill2 = use.Arrivals, use.Rate, use.PrefillLoad, use.MeanPrefill, use.MeanPrefill2
		e.ShortPrefill = true
	}
	// Decode demand always comes from the short window: it is measured on
	// requests that ended, so it already lags a change, and a long window
	// would hold a finished phase's decode demand for minutes.
	e.DecodeSteps = s.DecodeSteps
	return e
}
