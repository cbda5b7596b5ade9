package core

import (
	"math"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// steadyTTFT is the steady-state TTFT ratio of p prefill engines under e
// with Poisson arrivals, worked from Allen-Cunneen by hand: an arrival
// waits with Erlang C's probability, then exponentially with mean
// (1 + c_s²)·E[T]/(2p(1-rho)); priced at the 90th percentile.
func steadyTTFT(e DemandEstimate, p int, ttftS float64) float64 {
	rho := e.PrefillLoad / float64(p)
	cw := erlangC(p, e.PrefillLoad)
	v := e.MeanPrefill + e.MeanPrefill2/e.MeanPrefill - e.MeanPrefill
	theta := v / (2 * float64(p) * (1 - rho))
	wait := 0.0
	if cw > 0.1 {
		wait = theta * math.Log(cw/0.1)
	}
	return (e.MeanPrefill + wait) / ttftS
}

// hzTTFT is the horizon projection worked by hand: the queue's work per
// engine (backlog, plus rho-1 a second past saturation), and 1.645
// standard deviations of the work arriving in the horizon, spread over p.
func hzTTFT(e DemandEstimate, p int, backlog, b, ttftS float64) float64 {
	rho := e.PrefillLoad / float64(p)
	fluid := math.Max(0, backlog/float64(p)+(rho-1)*horizon)
	sd := math.Sqrt(e.Rate * horizon * (e.MeanPrefill2 + (b-1)*e.MeanPrefill*e.MeanPrefill))
	return (e.MeanPrefill + fluid + 1.645*sd/float64(p)) / ttftS
}

// Issue 10, thirteenth round: the prefill projection is the lower of the
// steady state's and what the horizon can build. At a moderate load the
// steady state is reached and stays the projection; near saturation it
// is not, and the horizon's bound prices the wait.
func TestTTFTHorizon(t *testing.T) {
	c := fixtureCore(t, 8)
	c.v.now = 100 * event.Second
	ttftS := c.v.ttftS
	// Prompts of 0.14 s mean (E[T²] 0.03) at 25 req/s on four engines.
	e := DemandEstimate{Arrivals: 500, Span: 20, Rate: 25, MeanPrefill: 0.14, MeanPrefill2: 0.03}
	e.PrefillLoad = e.Rate * e.MeanPrefill // 3.5 engine-seconds a second: rho 0.875

	moderate := ScoreSplit(c.View(), e, 4).TTFTDemand
	if want := steadyTTFT(e, 4, ttftS); math.Abs(moderate-want) > 1e-9 || want >= hzTTFT(e, 4, 0, 1, ttftS) {
		t.Fatalf("rho 0.875: TTFT ratio %v, want the steady state's %v (under the horizon's %v)", moderate, want, hzTTFT(e, 4, 0, 1, ttftS))
	}

	// rho 0.99 is at the formulas' cap: the steady wait there is what a
	// queue reaches after many minutes; within the horizon it is not.
	e.Rate = 0.99 * 4 / e.MeanPrefill
	e.PrefillLoad = e.Rate * e.MeanPrefill
	got := ScoreSplit(c.View(), e, 4).TTFTDemand
	want := hzTTFT(e, 4, 0, 1, ttftS)
	if math.Abs(got-want) > 1e-9 || want >= steadyTTFT(e, 4, ttftS) {
		t.Fatalf("rho 0.99: TTFT ratio %v, want the horizon's %v (under the steady state's %v)", got, want, steadyTTFT(e, 4, ttftS))
	}

	// Past saturation the queue grows by rho - 1 seconds a second, from
	// the work queued now: 12 s of work on four engines adds 3 s.
	e.Rate = 1.2 * 4 / e.MeanPrefill
	e.PrefillLoad = e.Rate * e.MeanPrefill
	for i := range 4 {
		c.v.inst[i].PrefillWork = 3
		c.v.touch(event.Instance(i))
	}
	got = ScoreSplit(c.View(), e, 4).TTFTDemand
	want = hzTTFT(e, 4, 12, 1, ttftS)
	if math.Abs(got-want) > 1e-9 {
		t.Fatalf("rho 1.2 with 12 s queued: TTFT ratio %v, want %v", got, want)
	}
	// The old steep line gave at least 100·(1.2 - 0.99) = 21 here, and
	// ranked an overload by its rate alone, not by the queue it builds.
	if got >= 21 {
		t.Fatalf("rho 1.2: TTFT ratio %v, still the steep line's", got)
	}
	// One engine more: 4.8 engine-seconds a second on five (rho 0.96) with
	// the same queue spread wider projects lower.
	if five := ScoreSplit(c.View(), e, 5).TTFTDemand; five >= got {
		t.Fatalf("five prefill engines: TTFT ratio %v, not below four's %v", five, got)
	}

	// Clumps of prompts arrive as one block of work: batches of mean 8
	// (gap SCV 15) widen the horizon's spread by (b-1)·E[T]².
	e.GapSCV, e.LongArrivals = 15, 400
	got = ScoreSplit(c.View(), e, 4).TTFTDemand
	if want := hzTTFT(e, 4, 12, 8, ttftS); math.Abs(got-want) > 1e-9 {
		t.Fatalf("batches of 8 past saturation: TTFT ratio %v, want %v", got, want)
	}
}

// Headroom bisects the projection in the load multiple k, so it must not
// fall as k grows, across the steady state's hand-over to the horizon's.
func TestTTFTDemandMonotone(t *testing.T) {
	c := fixtureCore(t, 8)
	c.v.now = 100 * event.Second
	for _, ca2 := range []float64{1, 15} {
		e := DemandEstimate{Arrivals: 500, Span: 20, Rate: 25, MeanPrefill: 0.14, MeanPrefill2: 0.03, GapSCV: ca2, LongArrivals: 400}
		e.PrefillLoad = e.Rate * e.MeanPrefill
		for p := 1; p < 8; p++ {
			m, ok := newSplitModel(c.View(), e, p)
			if !ok {
				t.Fatalf("split %d cannot be formed", p)
			}
			prev := 0.0
			for k := 0.0; k <= 4; k += 0.01 {
				r := m.ttftDemand(k)
				if r < prev-1e-12 || math.IsNaN(r) {
					t.Fatalf("c_a² %v, %d prefill engines: ratio %v at k %.2f after %v", ca2, p, r, k, prev)
				}
				prev = r
			}
		}
	}
}

// hzTPOT integrates the decode fluid by hand, with classical Runge-Kutta
// at 1 ms steps rather than the projection's 16 implicit ones: context r
// per engine arrives at w/life a second and leaves after life steps of
// 30 ms + 12.5 µs·r (decodeCore's engines); the ratio is the interval
// after the horizon over the 50 ms SLO.
func hzTPOT(w, r, life float64) float64 {
	f := func(r float64) float64 { return w/life - r/(life*(0.03+1.25e-5*r)) }
	const h = 1e-3
	for range int(horizon / h) {
		k1 := f(r)
		k2 := f(r + h/2*k1)
		k3 := f(r + h/2*k2)
		k4 := f(r + h*k3)
		r += h / 6 * (k1 + 2*k2 + 2*k3 + k4)
	}
	return (0.03 + 1.25e-5*r) / 0.05
}

// Issue 10, fourteenth round: while the traffic holds, the decode
// projection is the lower of the steady state's and what the horizon
// builds from the context the pool holds; while it changes, the steady
// state's alone.
func TestTPOTHorizon(t *testing.T) {
	// Outputs of 200 steps per token of context: DecodeSteps/decodeCtx.
	const life = 200.0
	est := func(rhoD float64) DemandEstimate {
		// rhoD = work·slope/d on four decode engines.
		work := rhoD * 4 / 1.25e-5
		return DemandEstimate{Arrivals: 500, Span: 20, Rate: 5, MeanPrefill: 0.1, MeanPrefill2: 0.02,
			PrefillLoad: 0.5, DecodeSteps: work, decodeCtx: work / life}
	}

	// At rho 0.5 the steady context is w·icpt/(1-rho) = 2400 tokens per
	// engine, an interval of 60 ms: a pool holding it stays there, and
	// both projections are 1.2.
	c := decodeCore(t, 2400)
	if got := ScoreSplit(c.View(), est(0.5), 4).TPOTDemand; math.Abs(got-1.2) > 1e-9 {
		t.Fatalf("rho 0.5 at the steady context: TPOT ratio %v, want 1.2", got)
	}

	// Past saturation (rho 1.2) the steady state's line gives
	// 0.03/0.01/0.05 + 100·0.21 = 81; within the horizon the context
	// grows from 2400 tokens to what the fluid reaches.
	e := est(1.2)
	got := ScoreSplit(c.View(), e, 4).TPOTDemand
	want := hzTPOT(1.2/1.25e-5, 2400, life)
	if math.Abs(got-want) > 0.03*want {
		t.Fatalf("rho 1.2: TPOT ratio %v, want the fluid's %v within 3%%", got, want)
	}
	if got <= 1.2 || got >= 10 {
		t.Fatalf("rho 1.2: TPOT ratio %v, want above the interval now (1.2) and far under the line's 81", got)
	}
	// One decode engine fewer carries the same work on three: higher.
	if three := ScoreSplit(c.View(), e, 5).TPOTDemand; three <= got {
		t.Fatalf("three decode engines: TPOT ratio %v, not above four's %v", three, got)
	}
	// More context held now, more at the horizon's end.
	if fuller := ScoreSplit(decodeCore(t, 6000).View(), e, 4).TPOTDemand; fuller <= got {
		t.Fatalf("6000 tokens held: TPOT ratio %v, not above 2400's %v", fuller, got)
	}

	// While the traffic changes, the decode work measured on ended
	// requests is the old traffic's: the steady state's line stands.
	for _, change := range []func(*DemandEstimate){
		func(e *DemandEstimate) { e.ShortPrefill = true },
		func(e *DemandEstimate) { e.mixShift = true },
		func(e *DemandEstimate) { e.decodeCtx = 0 }, // and before any request ended
	} {
		e := est(1.2)
		change(&e)
		if got := ScoreSplit(c.View(), e, 4).TPOTDemand; math.Abs(got-81) > 1e-6 {
			t.Fatalf("changing traffic at rho 1.2: TPOT ratio %v, want the steady line's 81", got)
		}
	}
}

// Headroom bisects the decode projection in k too: it must not fall as k
// grows, with the horizon and without, from an empty pool and a full one.
func TestTPOTDemandMonotone(t *testing.T) {
	for _, ctx := range []int64{0, 2400, 6000} {
		c := decodeCore(t, ctx)
		for _, changing := range []bool{false, true} {
			e := DemandEstimate{Arrivals: 500, Span: 20, Rate: 5, MeanPrefill: 0.1, MeanPrefill2: 0.02,
				PrefillLoad: 0.5, DecodeSteps: 1.6e5, decodeCtx: 800, ShortPrefill: changing}
			for p := 1; p < 8; p++ {
				m, ok := newSplitModel(c.View(), e, p)
				if !ok {
					t.Fatalf("split %d cannot be formed", p)
				}
				prev := 0.0
				for k := 0.0; k <= 4; k += 0.01 {
					r := m.tpotDemand(k)
					if r < prev-1e-12 || math.IsNaN(r) {
						t.Fatalf("context %d, changing %v, %d prefill engines: ratio %v at k %.2f after %v", ctx, changing, p, r, k, prev)
					}
					prev = r
				}
			}
		}
	}
}
