package core

import (
	"math"
	"math/bits"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Running sums that do not drift (issue 12): the demand estimator's window
// totals and the fleet's resident totals are kept as running sums, updated
// as samples come and go, instead of being re-added on every reading. A
// float64 running sum would depend on the order of additions and
// subtractions and drift; these are exact, so a total is the exact sum of
// its samples, rounded once when read, whatever the history.

// exactFrac is the fixed point of exact: one unit is 2^-exactFrac.
const exactFrac = 100

// exactMax bounds the magnitude of one sample (2^90): beyond it a sample
// is clamped.
const exactMax = 1 << 90

// exact is a 192-bit two's-complement fixed-point number, counting units
// of 2^-100: every float64 from 2^-47 to 2^90 in magnitude is held exactly
// (smaller ones are truncated toward zero below 2^-100), and sums of up to
// 2^100 such samples neither round nor overflow.
type exact [3]uint64

// exactOf converts x exactly (see exact); NaN converts to 0 and
// magnitudes above exactMax, infinities included, to ±exactMax.
func exactOf(x float64) exact {
	if x == 0 || x != x {
		return exact{}
	}
	neg := x < 0
	ax := math.Min(math.Abs(x), exactMax)
	frac, e := math.Frexp(ax)         // ax = frac·2^e, frac in [0.5, 1)
	m := uint64(math.Ldexp(frac, 53)) // ax = m·2^(e-53), exactly
	sh := e - 53 + exactFrac          // the value is m·2^sh units
	if sh < 0 {
		if sh <= -64 {
			return exact{}
		}
		m, sh = m>>uint(-sh), 0
	}
	var r exact
	w, b := sh/64, uint(sh%64)
	r[w] = m << b
	if b > 0 && w+1 < len(r) {
		r[w+1] = m >> (64 - b)
	}
	if neg {
		r = exact{}.minus(r)
	}
	return r
}

func (a exact) plus(b exact) exact {
	var r exact
	var c uint64
	r[0], c = bits.Add64(a[0], b[0], 0)
	r[1], c = bits.Add64(a[1], b[1], c)
	r[2], _ = bits.Add64(a[2], b[2], c)
	return r
}

func (a exact) minus(b exact) exact {
	var r exact
	var c uint64
	r[0], c = bits.Sub64(a[0], b[0], 0)
	r[1], c = bits.Sub64(a[1], b[1], c)
	r[2], _ = bits.Sub64(a[2], b[2], c)
	return r
}

// float is a rounded to the nearest float64 (ties to even).
func (a exact) float() float64 {
	neg := a[2]>>63 != 0
	if neg {
		a = exact{}.minus(a)
	}
	n := 0 // bit length
	for w := len(a) - 1; w >= 0; w-- {
		if a[w] != 0 {
			n = 64*w + bits.Len64(a[w])
			break
		}
	}
	var f float64
	switch {
	case n == 0:
		return 0
	case n <= 64:
		f = math.Ldexp(float64(a[0]), -exactFrac)
	default:
		// The top 64 bits, with every bit below them folded into the
		// lowest (a sticky bit 11 places under float64's last, so the
		// conversion rounds as the whole number would).
		s := n - 64
		w, b := s/64, uint(s%64)
		top := a[w] >> b
		if b > 0 && w+1 < len(a) {
			top |= a[w+1] << (64 - b)
		}
		sticky := a[w]&(1<<b-1) != 0
		for i := 0; i < w; i++ {
			sticky = sticky || a[i] != 0
		}
		if sticky {
			top |= 1
		}
		f = math.Ldexp(float64(top), s-exactFrac)
	}
	if neg {
		return -f
	}
	return f
}

// totals is what a summedWindow keeps running sums of.
type totals[S any] interface {
	plus(S) S
	minus(S) S
}

// summedWindow is a window whose samples also keep running totals: the
// totals of the samples since any instant cost a binary search instead of
// a pass over the window. It keeps, per sample, only its time and the
// totals of every sample added before it (a sample's own totals are the
// difference of two of those).
type summedWindow[T interface{ totals() S }, S totals[S]] struct {
	// cum holds each sample's time with the totals of every sample added
	// before it; tot those of every sample added.
	cum window[S]
	tot S
}

func (w *summedWindow[T, S]) add(t event.Time, v T) {
	w.cum.add(t, w.tot)
	w.tot = w.tot.plus(v.totals())
}

// prune drops samples older than since.
func (w *summedWindow[T, S]) prune(since event.Time) { w.cum.prune(since) }

// before returns the totals of every sample added before sample k
// (head <= k <= tail).
func (w *summedWindow[T, S]) before(k int) S {
	if k == w.cum.tail {
		return w.tot
	}
	return w.cum.value(k)
}

// sinceIndex returns the totals of the samples at or after t and the
// number of the first of them (tail when none).
func (w *summedWindow[T, S]) sinceIndex(t event.Time) (S, int) {
	i := w.cum.search(t)
	if i == w.cum.tail {
		var zero S
		return zero, i
	}
	return w.tot.minus(w.cum.value(i)), i
}

// since returns the totals of the samples at or after t.
func (w *summedWindow[T, S]) since(t event.Time) S {
	s, _ := w.sinceIndex(t)
	return s
}

// The demand windows' totals (demand.go).

// arrivalTotals are running totals of arrivals: how many, and the exact
// sums of their prefill times, squared prefill times and squared gaps.
type arrivalTotals struct {
	n                         int
	prefill, prefillSq, gapSq exact
}

func (a arrivalSample) totals() arrivalTotals {
	return arrivalTotals{n: 1, prefill: exactOf(a.prefill), prefillSq: exactOf(a.prefill * a.prefill), gapSq: exactOf(a.gap2)}
}

func (a arrivalTotals) plus(b arrivalTotals) arrivalTotals {
	return arrivalTotals{a.n + b.n, a.prefill.plus(b.prefill), a.prefillSq.plus(b.prefillSq), a.gapSq.plus(b.gapSq)}
}

func (a arrivalTotals) minus(b arrivalTotals) arrivalTotals {
	return arrivalTotals{a.n - b.n, a.prefill.minus(b.prefill), a.prefillSq.minus(b.prefillSq), a.gapSq.minus(b.gapSq)}
}

// finishTotals are running totals of endings: how many, twice their token
// steps (an integer: tokenSteps is a whole number of half tokens), and how
// many met each SLO.
type finishTotals struct {
	n, ttftOK, tpotOK int
	steps2            int64
	stepsSq           exact // Σ tokenSteps²
	ctx2              int64 // twice Σ (input + output/2): the contexts held
}

func (f finishSample) totals() finishTotals {
	t := finishTotals{n: 1, steps2: int64(2 * f.tokenSteps), stepsSq: exactOf(f.tokenSteps * f.tokenSteps), ctx2: f.ctx2}
	if f.ttftOK {
		t.ttftOK = 1
	}
	if f.tpotOK {
		t.tpotOK = 1
	}
	return t
}

func (a finishTotals) plus(b finishTotals) finishTotals {
	return finishTotals{a.n + b.n, a.ttftOK + b.ttftOK, a.tpotOK + b.tpotOK, a.steps2 + b.steps2, a.stepsSq.plus(b.stepsSq), a.ctx2 + b.ctx2}
}

func (a finishTotals) minus(b finishTotals) finishTotals {
	return finishTotals{a.n - b.n, a.ttftOK - b.ttftOK, a.tpotOK - b.tpotOK, a.steps2 - b.steps2, a.stepsSq.minus(b.stepsSq), a.ctx2 - b.ctx2}
}

// fleetTotals are the fleet's resident totals, kept for ScoreSplit so
// that reading them costs O(instances changed since the last reading), not
// a pass over the fleet: View.touch marks an instance changed (O(1), all a
// placement pays), and a reading re-counts the marked ones.
type fleetTotals struct {
	work     exact // Σ PrefillWork
	resident int64 // Σ DecodeTokens
	pending  int64 // Σ PrefillTokens: prompts whose prefill has not finished
	holders  int   // instances with DecodeTokens > 0
	// of is each instance's part as last counted; dirty lists the
	// instances changed since, marked in of.
	of    []instPart
	dirty []int32
	// Mean decode slope and intercept over the fleet's profiles (which
	// never change after New), summed in index order once.
	slope, icpt float64
	meansOK     bool
}

type instPart struct {
	work     exact
	resident int64
	pending  int64
	dirty    bool
}

// mark notes that instance i's counters changed.
func (f *fleetTotals) mark(n int, i event.Instance) {
	if f.of == nil {
		f.of = make([]instPart, n)
	}
	if p := &f.of[i]; !p.dirty {
		p.dirty = true
		f.dirty = append(f.dirty, int32(i))
	}
}

// sync re-counts the instances changed since the last sync.
func (f *fleetTotals) sync(inst []Instance) {
	for _, i := range f.dirty {
		in, old := &inst[i], &f.of[i]
		w := exactOf(in.PrefillWork)
		f.work = f.work.minus(old.work).plus(w)
		f.resident += in.DecodeTokens - old.resident
		f.pending += in.PrefillTokens - old.pending
		if old.resident > 0 {
			f.holders--
		}
		if in.DecodeTokens > 0 {
			f.holders++
		}
		*old = instPart{work: w, resident: in.DecodeTokens, pending: in.PrefillTokens}
	}
	f.dirty = f.dirty[:0]
}

// means returns the fleet's mean decode slope and intercept.
func (f *fleetTotals) means(inst []Instance) (slope, icpt float64) {
	if !f.meansOK {
		for i := range inst {
			f.slope += inst[i].Profile.Slope
			f.icpt += inst[i].Profile.Intercept
		}
		f.slope /= float64(len(inst))
		f.icpt /= float64(len(inst))
		f.meansOK = true
	}
	return f.slope, f.icpt
}

// repeatAdd returns x+x+...+x, n terms added left to right in float64,
// with the same bits as that loop, in O(log n) steps: while the running
// sum stays in one binade its grid is fixed, and adding x adds the same
// multiple of the grid every time (once a tie's rounding has settled the
// last bit's parity, after at most one step), so the loop can jump ahead
// by whole multiples of that increment.
func repeatAdd(x float64, n int) float64 {
	switch {
	case n <= 0:
		return 0
	case math.IsInf(x, 0) || x != x:
		return x
	case x < 0: // rounding to nearest is symmetric
		return -repeatAdd(-x, n)
	}
	s := 0.0
	prevInc, prevE := math.NaN(), 0 // the last step's increment and start binade
	for k := 0; k < n; {
		_, e := math.Frexp(s)
		next := s + x
		inc := next - s // exact: both on next's grid
		s, k = next, k+1
		if _, e2 := math.Frexp(s); inc != prevInc || e != prevE || e2 != e || s == 0 {
			prevInc, prevE = inc, e
			continue
		}
		// Two steps in a row in this binade added the same increment: so
		// does every step until the sum nears the binade's top, where the
		// grid doubles; jump to two steps short of it.
		room := (math.Ldexp(1, e) - s) / inc
		j := min(int(room)-2, n-k)
		if inc == 0 {
			j = n - k
		}
		if j > 0 {
			s += float64(j) * inc // exact: a grid point of the binade
			k += j
		}
		prevInc = math.NaN()
	}
	return s
}
