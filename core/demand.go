package core

import (
	"math"
	"sort"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// window is a time-ordered queue of samples kept for a fixed span, held
// in fixed-size blocks: adding a sample never copies the ones held (a
// 120 s window on a large fleet holds hundreds of thousands), and the
// blocks pruning empties are reused, so a window in steady state does
// not allocate. Samples are numbered in the order added; the live ones
// are [head, tail).
type window[T any] struct {
	blocks     []*block[T] // blocks[k] holds samples from (b0+k)·blockLen
	b0         int
	head, tail int
	free       []*block[T] // emptied blocks, for reuse
}

// blockLen is the samples per block, a power of two.
const (
	blockBits = 9
	blockLen  = 1 << blockBits
)

type block[T any] struct {
	at  [blockLen]event.Time
	val [blockLen]T
}

func (w *window[T]) add(t event.Time, v T) {
	j := w.tail & (blockLen - 1)
	if j == 0 {
		var b *block[T]
		if n := len(w.free); n > 0 {
			b, w.free = w.free[n-1], w.free[:n-1]
		} else {
			b = new(block[T])
		}
		if len(w.blocks) == 0 {
			w.b0 = w.tail >> blockBits
		}
		w.blocks = append(w.blocks, b)
	}
	b := w.blocks[len(w.blocks)-1]
	b.at[j], b.val[j] = t, v
	w.tail++
}

// time and value are sample k's (head <= k < tail).
func (w *window[T]) time(k int) event.Time {
	return w.blocks[k>>blockBits-w.b0].at[k&(blockLen-1)]
}

func (w *window[T]) value(k int) T {
	return w.blocks[k>>blockBits-w.b0].val[k&(blockLen-1)]
}

// prune drops samples older than since, releasing the blocks left empty.
func (w *window[T]) prune(since event.Time) {
	for w.head < w.tail && w.time(w.head) < since {
		w.head++
	}
	for len(w.blocks) > 0 && w.b0 < w.head>>blockBits {
		w.free = append(w.free, w.blocks[0])
		w.blocks[0] = nil
		w.blocks = w.blocks[1:]
		w.b0++
	}
}

func (w *window[T]) len() int { return w.tail - w.head }

// search returns the first live sample at or after t (tail when none).
func (w *window[T]) search(t event.Time) int {
	return w.head + sort.Search(w.tail-w.head, func(k int) bool { return w.time(w.head+k) >= t })
}

func (w *window[T]) each(f func(t event.Time, v T)) {
	for k := w.head; k < w.tail; k++ {
		b := w.blocks[k>>blockBits-w.b0]
		f(b.at[k&(blockLen-1)], b.val[k&(blockLen-1)])
	}
}

// arrivalSample is one offered request's prompt.
type arrivalSample struct {
	prefill float64 // fleet-mean T(input), s
	input   int
	gap2    float64 // squared gap since the previous arrival, s² (0 for the first)
}

// finishSample is one ended request's decode footprint and outcome.
type finishSample struct {
	output int
	// tokenSteps is output·(input + output/2): the context-token·iterations
	// the request held a decode batch for (Little's law for decode).
	tokenSteps float64
	// ctx2 is twice the mean context the request held: 2·input + output.
	ctx2   int64
	ttftOK bool
	tpotOK bool
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
	// lastArrival is the latest arrival's time, once seen.
	lastArrival event.Time
	seen        bool
}

func (d *Demand) arrived(c *View, r Request) {
	d.addArrival(c.now, d.fleetPrefill(c, r.InputTokens), r.InputTokens)
}

// addArrival adds one arrival at t, with its squared gap since the one
// before (the arrivals' dispersion, GapSCV).
func (d *Demand) addArrival(t event.Time, prefill float64, input int) {
	a := arrivalSample{prefill: prefill, input: input}
	if d.seen {
		g := (t - d.lastArrival).Seconds()
		a.gap2 = g * g
	}
	d.seen, d.lastArrival = true, t
	d.arrivals.add(t, a)
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
		ctx2:       2*int64(r.InputTokens) + int64(out),
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
	// DecodeSE is DecodeSteps' standard error: sqrt(Σ steps²)/span, as
	// for a compound-Poisson count of endings.
	DecodeSE float64
	// TTFTOK and TPOTOK are the shares of ended requests meeting each SLO.
	TTFTOK, TPOTOK float64
	// ShortPrefill reports that a blended estimate took the prefill work
	// from the short window (a change was detected).
	ShortPrefill bool
	// GapSCV is the squared coefficient of variation of the gaps between
	// arrivals in the window (1 for Poisson arrivals; 0 with under three
	// arrivals). Blend uses it as the arrivals' index of dispersion.
	GapSCV float64
	// LongArrivals is the arrivals GapSCV was measured on.
	LongArrivals int
	// PrefillSE is the standard error of PrefillLoad in a blended
	// estimate, the arrivals' dispersion included (0 when not blended).
	PrefillSE float64

	prefillVar float64 // squared standard error of PrefillLoad
	// decodeCtx is the rate of context the ended requests held, Σ
	// (input + output/2) per second: DecodeSteps / decodeCtx is the
	// context-weighted mean of their decode steps.
	decodeCtx   float64
	decodeScale float64 // robust's: scales the decode work ScoreSplit projects (0: 1)
	// The delivered-attainment check's factors on the projected TTFT and
	// TPOT ratios (0: 1); see AdaptiveConfig.Attainment.
	ttftScale, tpotScale float64
	// The long window's mix, in a blended estimate: mean prefill time and
	// its square per arrival, and decode work per ended request.
	longMean, longMean2, longDecode float64
	// mixShift: the prompts' mean prefill time in the short window (or its
	// quarter) differs from the long window's (a change of mix).
	mixShift bool
	// short is the short window's mix in a blended estimate (the
	// estimate's own otherwise, see mixNow).
	short promptMix
	// recentN is how many requests ended in the short window, in a
	// blended estimate, and recentTTFT and recentTPOT the shares of them
	// meeting each SLO (see ttftMissed).
	recentN                int
	recentTTFT, recentTPOT float64
}

// ttftMissed reports whether fewer than floor of the ended requests the
// estimate counts met the TTFT SLO, and the short window's endings, when
// at least min of them, missed it too. A miss the short window no longer
// shows has passed: at the start of a chatdoc document phase the first
// documents' streams miss TPOT beside the chat phase's last answers, the
// endings since the change of mix carried those misses for two minutes,
// and the fleet gave a prefill engine to decode 90 s into the phase and
// took it back 30 s later (issue 10, thirtieth round).
func (e DemandEstimate) ttftMissed(floor float64, min int) bool {
	return e.TTFTOK < floor && !(e.recentN >= min && e.recentTTFT >= floor)
}

// tpotMissed is ttftMissed for the TPOT SLO.
func (e DemandEstimate) tpotMissed(floor float64, min int) bool {
	return e.TPOTOK < floor && !(e.recentN >= min && e.recentTPOT >= floor)
}

// promptMix is a window's mix: the mean prefill time per arrival, its
// mean square, and the arrivals it was measured on.
type promptMix struct {
	mean, mean2 float64
	n           int
}

// mixNow is the mix of the estimate's short window.
func (e DemandEstimate) mixNow() promptMix {
	if e.short.n > 0 {
		return e.short
	}
	return mixOf(e)
}

// mixOf is an estimate's own mix.
func mixOf(e DemandEstimate) promptMix { return promptMix{e.MeanPrefill, e.MeanPrefill2, e.Arrivals} }

// mixMoved reports that b's mean prefill time differs from a's by more
// than three of b's standard errors and by more than mixFloor of a's: a
// change of mix (the prompts), not noise; a mean of independent draws
// whatever the arrival process.
func mixMoved(a, b promptMix) bool {
	if b.n < 2 || a.n == 0 {
		return false
	}
	v := math.Max(0, b.mean2-b.mean*b.mean)
	diff := math.Abs(a.mean - b.mean)
	return diff > 3*math.Sqrt(v/float64(b.n)) && diff > mixFloor*a.mean
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
	a, first := d.arrivals.sinceIndex(since)
	e.Arrivals = a.n
	if k := float64(a.n - 1); k >= 2 {
		// The gaps between the span's arrivals: their sum telescopes to
		// last - first; their squares are the totals less the first
		// arrival's own gap (to one before the span).
		last := d.arrivals.cum.time(d.arrivals.cum.tail - 1)
		if gap := (last - d.arrivals.cum.time(first)).Seconds(); gap > 0 {
			m := gap / k
			// The totals from the one after first on: the span's less
			// first's own gap, exactly.
			gap2 := d.arrivals.tot.gapSq.minus(d.arrivals.before(first + 1).gapSq).float()
			e.GapSCV = (gap2/k - m*m) / (m * m)
		}
	}
	e.LongArrivals = e.Arrivals
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
	e.decodeCtx = float64(f.ctx2) / 2 / span
	e.DecodeSE = math.Sqrt(math.Max(0, f.stepsSq.float())) / span
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
// errors of the short one (a real change of traffic, not noise), and on to
// a quarter of the short span when that differs from the short one the same
// way (the change is recent); decode work always comes from the short span.
//
// The standard error is that of a compound count whose index of dispersion
// is the long span's gap SCV (at least 1): sqrt(Σx²)/span for Poisson
// arrivals, wider by about sqrt(2k-1) for batches of mean k and by c for
// gamma gaps of CV c. A burst then moves the estimate only as far as the
// arrivals' own measured variance allows, while a change of mix (prompts
// many times longer) still clears it within a few arrivals.
func (d *Demand) blend(now, short event.Time) DemandEstimate {
	l := d.estimateSpan(now, 0, d.Span)
	s := d.estimateSpan(now, 0, short)
	e := l
	e.longMean, e.longMean2 = l.MeanPrefill, l.MeanPrefill2
	if l.Finishes > 0 {
		e.longDecode = l.DecodeSteps * l.Span / float64(l.Finishes)
	}
	disp := math.Max(1, l.GapSCV)
	e.PrefillSE = math.Sqrt(disp * l.prefillVar)
	moved := func(a, b DemandEstimate) bool {
		return math.Abs(b.PrefillLoad-a.PrefillLoad) > 3*math.Sqrt(disp*b.prefillVar)
	}
	q := d.estimateSpan(now, 0, short/4)
	e.short = mixOf(s)
	e.recentN, e.recentTTFT, e.recentTPOT = s.Finishes, s.TTFTOK, s.TPOTOK
	e.mixShift = mixMoved(mixOf(l), mixOf(s)) || mixMoved(mixOf(l), mixOf(q))
	if moved(l, s) {
		use := s
		if moved(s, q) {
			use = q
		}
		e.Arrivals, e.Rate, e.PrefillLoad, e.MeanPrefill, e.MeanPrefill2 = use.Arrivals, use.Rate, use.PrefillLoad, use.MeanPrefill, use.MeanPrefill2
		e.PrefillSE = math.Sqrt(disp * use.prefillVar)
		e.ShortPrefill = true
	} else if e.mixShift {
		// The load has not moved by the test above, but the prompts have:
		// their mean prefill time is a mean of independent draws whatever
		// the arrival process, so a change of mix shows in it long before
		// the load's wider test (in the quarter window first, while the
		// short one still mixes both). The new mix at the long window's
		// rate.
		use := s
		if mixMoved(mixOf(s), mixOf(q)) || !mixMoved(mixOf(l), mixOf(s)) {
			use = q
		}
		e.Arrivals, e.MeanPrefill, e.MeanPrefill2 = use.Arrivals, use.MeanPrefill, use.MeanPrefill2
		e.PrefillLoad = l.Rate * use.MeanPrefill
		if l.PrefillLoad > 0 {
			e.PrefillSE *= e.PrefillLoad / l.PrefillLoad // the long rate's relative error
		}
		e.ShortPrefill = true
	}
	// Decode demand always comes from the short window: it is measured on
	// requests that ended, so it already lags a change, and a long window
	// would hold a finished phase's decode demand for minutes.
	e.DecodeSteps, e.DecodeSE, e.decodeCtx = s.DecodeSteps, s.DecodeSE, s.decodeCtx
	return e
}

// mixFloor is the least relative change of the mean prefill time per
// request that blend takes for a change of mix.
const mixFloor = 0.25
