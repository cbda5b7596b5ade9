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
