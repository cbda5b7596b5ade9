package core

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// Erlang C against values worked by hand: one server waits with
// probability ρ; two servers offered one erlang wait with probability 1/3.
func TestErlangC(t *testing.T) {
	for _, c := range []struct {
		p    int
		a, w float64
	}{{1, 0.5, 0.5}, {1, 0.9, 0.9}, {2, 1, 1.0 / 3}, {3, 0, 0}} {
		if got := erlangC(c.p, c.a); math.Abs(got-c.w) > 1e-12 {
			t.Errorf("erlangC(%d, %v) = %v, want %v", c.p, c.a, got, c.w)
		}
	}
	// More servers at the same utilisation wait less often.
	prev := 1.0
	for p := 1; p <= 64; p *= 2 {
		w := erlangC(p, 0.8*float64(p))
		if w >= prev {
			t.Fatalf("erlangC(%d, ρ=0.8) = %v, not below %v", p, w, prev)
		}
		prev = w
	}
}

// The prefill projection is one M/G/p queue, priced at the 90th
// percentile of the wait: with one prefill engine and Poisson arrivals an
// arrival waits with probability ρ, then exponentially with mean
// E[T²]/(2·E[T]·(1-ρ)) (its mean wait is Pollaczek-Khinchine's), so the
// wait's 90th percentile is that mean times ln(ρ/0.1); with more engines
// it is below p independent M/G/1 queues' at the same utilisation; below
// a 10% chance of waiting it is the prefill time alone.
func TestScoreSplitPrefillQueue(t *testing.T) {
	c := fixtureCore(t, 8)
	c.v.now = 100 * event.Second
	e := DemandEstimate{Arrivals: 100, Span: 20, Rate: 5, PrefillLoad: 0.7, MeanPrefill: 0.14, MeanPrefill2: 0.03}
	s := ScoreSplit(c.View(), e, 1)
	theta := e.MeanPrefill2 / (2 * e.MeanPrefill * (1 - 0.7))
	want := (e.MeanPrefill + theta*math.Log(0.7/0.1)) / c.v.ttftS
	if math.Abs(s.TTFTDemand-want) > 1e-12 {
		t.Fatalf("p=1: TTFT ratio %v, want %v", s.TTFTDemand, want)
	}
	e.PrefillLoad = 2.8 // ρ = 0.7 on four engines
	s = ScoreSplit(c.View(), e, 4)
	if s.TTFTDemand*c.v.ttftS >= e.MeanPrefill+theta*math.Log(0.7/0.1) {
		t.Fatalf("p=4: pooled TTFT %v s not below one engine's at the same utilisation", s.TTFTDemand*c.v.ttftS)
	}
	// Bursty arrivals price a longer wait on the same split.
	e.GapSCV, e.LongArrivals = 15, 400
	if b := ScoreSplit(c.View(), e, 4); b.TTFTDemand <= s.TTFTDemand {
		t.Fatalf("c_a² = 15 priced no longer wait: %v vs %v", b.TTFTDemand, s.TTFTDemand)
	}
	// A light load (Erlang C under 10%): the prefill time alone.
	e.GapSCV, e.LongArrivals = 0, 0
	e.PrefillLoad = 0.4
	if l := ScoreSplit(c.View(), e, 4); math.Abs(l.TTFTDemand-e.MeanPrefill/c.v.ttftS) > 1e-12 {
		t.Fatalf("light load: TTFT ratio %v, want the prefill time's %v", l.TTFTDemand, e.MeanPrefill/c.v.ttftS)
	}
}

// Clumps: arrivals in Poisson batches of b have gap SCV 2b-1, so a
// measured c_a² reads as clumps of (c_a² + 1)/2; Poisson's 1 as single
// arrivals, and nothing smoother than that as less than one.
func TestClumpSize(t *testing.T) {
	for _, c := range [][2]float64{{1, 1}, {15, 8}, {7, 4}, {199, 100}, {0.5, 1}} {
		if got := clumpSize(c[0]); got != c[1] {
			t.Errorf("clumpSize(%v) = %v, want %v", c[0], got, c[1])
		}
	}
}

// Bursty arrivals wait more often than Erlang C says: a clump of b
// arrivals finds p(1-ρ) engines free on average and the rest of it
// waits. Worked by hand: four engines at ρ = 0.5 have 2 free; batches of
// 8 (c_a² = 15) wait 1 - 2/8 = 75% of the time, clumps of 100
// (c_a² = 199) 98%; Poisson arrivals keep Erlang C, and clumps no larger
// than the free engines add nothing.
func TestWaitProbability(t *testing.T) {
	cw := erlangC(4, 2) // 4 engines, offered 2 erlangs: ρ = 0.5
	for _, c := range []struct {
		ca2, want float64
	}{{1, cw}, {15, 0.75}, {199, 0.98}, {3, cw}} {
		if got := waitProbability(4, 0.5, c.ca2, cw); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("c_a² %v: wait probability %v, want %v", c.ca2, got, c.want)
		}
	}
	// Past the free engines the probability only grows with the clumps.
	prev := 0.0
	for ca2 := 1.0; ca2 < 1000; ca2 *= 2 {
		w := waitProbability(4, 0.5, ca2, cw)
		if w < prev || w > 1 {
			t.Fatalf("c_a² %v: wait probability %v after %v", ca2, w, prev)
		}
		prev = w
	}
}

// Issue 10, twelfth round: a moderate mean load (Erlang C under 1 - 0.9,
// so Poisson arrivals price no wait) offered in batches of 8 prices a
// wait at the 90th percentile. The wait's mean stays Allen-Cunneen's:
// it waits with the batch view's probability π and then exponentially
// with the mean that keeps π·θ' = C·θ.
func TestScoreSplitClumpedWait(t *testing.T) {
	c := fixtureCore(t, 8)
	c.v.now = 100 * event.Second
	e := DemandEstimate{Arrivals: 100, Span: 20, Rate: 5, PrefillLoad: 1.6, MeanPrefill: 0.14, MeanPrefill2: 0.03}
	cw := erlangC(4, 1.6) // ρ = 0.4 on four engines
	if cw >= 0.1 {
		t.Fatalf("fixture: Erlang C %v, expected under 0.1", cw)
	}
	poisson := ScoreSplit(c.View(), e, 4).TTFTDemand
	if math.Abs(poisson-e.MeanPrefill/c.v.ttftS) > 1e-12 {
		t.Fatalf("Poisson arrivals: TTFT ratio %v, want the prefill time's %v", poisson, e.MeanPrefill/c.v.ttftS)
	}
	e.GapSCV, e.LongArrivals = 15, 400
	got := ScoreSplit(c.View(), e, 4).TTFTDemand
	cs2 := e.MeanPrefill2/(e.MeanPrefill*e.MeanPrefill) - 1
	theta := e.MeanPrefill * (15 + cs2) / (2 * 4 * (1 - 0.4)) // Allen-Cunneen's conditional mean
	pi := 1 - 4*(1-0.4)/8                                     // 2.4 engines free, batches of 8: 0.7
	want := (e.MeanPrefill + cw*theta/pi*math.Log(pi/0.1)) / c.v.ttftS
	if math.Abs(got-want) > 1e-9 {
		t.Fatalf("batches of 8: TTFT ratio %v, want %v", got, want)
	}
	// One engine more lowers it: the projection now says which split the
	// clumps favour.
	e.GapSCV = 15
	if five := ScoreSplit(c.View(), e, 5).TTFTDemand; five >= got {
		t.Fatalf("five prefill engines: TTFT ratio %v, not below four's %v", five, got)
	}
}

// Bursty arrivals count only when the measured gap SCV clears Poisson's 1
// by three standard errors.
func TestArrivalSCV(t *testing.T) {
	for _, c := range []struct {
		scv  float64
		n    int
		want float64
	}{
		{1.3, 100, 1},   // within Poisson noise at 100 gaps (3·sqrt(8/100) = 0.85)
		{2.0, 100, 2},   // clears it
		{2.0, 20, 1},    // 3·sqrt(8/20) = 1.9: not yet at 20 gaps
		{15, 60, 15},    // batches of mean 8
		{0.5, 1000, 1},  // smoother than Poisson: priced as Poisson
		{40, 2, 1},      // too few arrivals to say
		{4.0, 120, 4.0}, // gamma gaps, CV 2
	} {
		got := arrivalSCV(DemandEstimate{GapSCV: c.scv, LongArrivals: c.n})
		if got != c.want {
			t.Errorf("arrivalSCV(scv %v, n %d) = %v, want %v", c.scv, c.n, got, c.want)
		}
	}
}

// feed offers arrivals to a demand estimator: times in seconds, each
// prompt's fleet-mean prefill time given directly.
func feed(d *Demand, at []float64, prefill []float64) {
	idx := make([]int, len(at))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return at[idx[a]] < at[idx[b]] })
	for _, i := range idx {
		d.addArrival(event.Seconds(at[i]), prefill[i], 0)
	}
}

// The estimator's gap SCV: near 1 for Poisson arrivals, near 2k-1 for
// batches of geometric size with mean k, which clumpSize reads back as k.
func TestGapSCV(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var pois, batch Demand
	pois.Span, batch.Span = 1000*event.Second, 1000*event.Second
	var at, bt, x []float64
	now := 0.0
	for now < 900 {
		now += rng.ExpFloat64() / 4
		at = append(at, now)
	}
	now = 0
	for now < 900 {
		now += rng.ExpFloat64() * 8 / 4 // batches at a quarter of the rate
		k := 1
		for rng.Float64() > 1.0/8 {
			k++
		}
		for ; k > 0; k-- {
			bt = append(bt, now)
		}
	}
	for range max(len(at), len(bt)) {
		x = append(x, 0.1)
	}
	feed(&pois, at, x)
	feed(&batch, bt, x)
	end := event.Seconds(900)
	if p := pois.estimate(end, 0).GapSCV; math.Abs(p-1) > 0.2 {
		t.Errorf("Poisson gap SCV %v, want about 1", p)
	}
	b := batch.estimate(end, 0).GapSCV
	if b < 11 || b > 19 {
		t.Errorf("batches of mean 8: gap SCV %v, want about 15", b)
	}
	// The clumps read back from it: batches of about 8, so n arrivals
	// weigh about n/8 as evidence (a batch is one draw of the rate).
	if k := clumpSize(b); k < 6 || k > 10 {
		t.Errorf("batches of mean 8: gap SCV %v reads as clumps of %v", b, k)
	}
	if k := clumpSize(pois.estimate(end, 0).GapSCV); k > 1.1 {
		t.Errorf("Poisson arrivals read as clumps of %v", k)
	}
}

// A burst of a steady mix does not switch the blend to the short window
// when the arrivals are measured bursty, but the same count of arrivals
// does under Poisson dispersion; a change of mix switches it either way.
func TestBlendBurstAndMix(t *testing.T) {
	build := func(batchy bool, lastPrefill float64, burst int) DemandEstimate {
		var d Demand
		d.Span = 120 * event.Second
		var at, x []float64
		// 100 s of traffic at 4 req/s: even gaps (SCV 0), or batches of
		// 8 every 2 s (gap SCV about 7).
		for s := 0.0; s < 100; s += 0.25 {
			t := s
			if batchy {
				t = math.Floor(s/2) * 2
			}
			at = append(at, t)
			x = append(x, 0.5)
		}
		// The last 20 s: the same traffic plus a burst, or another mix.
		for s := 100.0; s < 120; s += 0.25 {
			t := s
			if batchy {
				t = math.Floor(s/2) * 2
			}
			at = append(at, t)
			x = append(x, lastPrefill)
		}
		for i := 0; i < burst; i++ {
			at = append(at, 110)
			x = append(x, lastPrefill)
		}
		feed(&d, at, x)
		return d.blend(120*event.Second, 20*event.Second)
	}
	if e := build(false, 0.5, 60); !e.ShortPrefill || e.mixShift {
		t.Errorf("60 extra arrivals under Poisson dispersion should count as a change of load, not of mix (short %v, mix %v)", e.ShortPrefill, e.mixShift)
	}
	if e := build(true, 0.5, 60); e.ShortPrefill {
		t.Errorf("60 extra arrivals among batches of 8 counted as a change (load %v)", e.PrefillLoad)
	}
	for _, batchy := range []bool{false, true} {
		e := build(batchy, 2.0, 0)
		if !e.ShortPrefill || !e.mixShift || e.MeanPrefill < 1.5 {
			t.Errorf("batchy %v: a fourfold change of mix not followed (mean %v, short %v, mix %v)", batchy, e.MeanPrefill, e.ShortPrefill, e.mixShift)
		}
		if e.PrefillSE <= 0 {
			t.Errorf("batchy %v: blended estimate without a standard error", batchy)
		}
	}
}

// A move whose gain reverses within one standard error of the offered
// prefill load is not robust; one that holds across it is.
func TestRobustMove(t *testing.T) {
	c := fixtureCore(t, 8)
	c.v.now = 100 * event.Second
	// Resident decode context makes the decode side bind at a light
	// prefill load: there 4P4D scores better than 5P3D.
	c.v.inst[5].DecodeTokens = 10000
	e := DemandEstimate{Arrivals: 100, Span: 20, Rate: 5, PrefillLoad: 3.5, MeanPrefill: 0.7, MeanPrefill2: 0.5}
	lo := e
	lo.PrefillLoad = 0.2
	if ScoreSplit(c.View(), lo, 5).Score() <= ScoreSplit(c.View(), lo, 4).Score() {
		t.Fatal("fixture: 5P must score worse than 4P at a light load")
	}
	if ScoreSplit(c.View(), e, 5).Score() >= ScoreSplit(c.View(), e, 4).Score() {
		t.Fatal("fixture: 5P must score better than 4P at 3.5")
	}
	e.PrefillSE = 0.1
	if !robust(c.View(), e, 4, 5) {
		t.Fatal("a move that helps across ±1 SE judged not robust")
	}
	e.PrefillSE = 3.3
	if robust(c.View(), e, 4, 5) {
		t.Fatal("a move that loses at the load's lower bound judged robust")
	}
}

// The decode side's noise counts as the prefill side's: a move to a
// split whose decode pool the decode work one standard error higher would
// saturate is not robust (issue 10, fourth round: past saturation the
// controller otherwise flip-flops between two splits, each at one pool's
// saturation).
func TestRobustMoveDecodeNoise(t *testing.T) {
	c := fixtureCore(t, 8)
	c.v.now = 100 * event.Second
	e := DemandEstimate{Arrivals: 100, Span: 20, Rate: 5, PrefillLoad: 3.5, MeanPrefill: 0.7, MeanPrefill2: 0.5, PrefillSE: 0.1}
	// Decode work that loads 5P3D's three decode engines to 85%.
	e.DecodeSteps = 0.85 * 3 / fixture.Slope
	if s5, s4 := ScoreSplit(c.View(), e, 5), ScoreSplit(c.View(), e, 4); s5.Score() >= s4.Score() {
		t.Fatalf("fixture: 5P (%+v) must score better than 4P (%+v)", s5, s4)
	}
	e.DecodeSE = 0.01 * e.DecodeSteps
	if !robust(c.View(), e, 4, 5) {
		t.Fatal("a move that helps across ±1 SE of the decode work judged not robust")
	}
	// One standard error more decode work saturates three decode engines
	// (0.85 × 1.2 > 0.99).
	e.DecodeSE = 0.2 * e.DecodeSteps
	if robust(c.View(), e, 4, 5) {
		t.Fatal("a move to a decode pool that one standard error more decode work saturates judged robust")
	}
	// The standard error is that of the ended requests' decode work:
	// sqrt(Σ steps²)/span over the window.
	var d Demand
	d.Span = 20 * event.Second
	v := c.View()
	for k := 1; k <= 4; k++ {
		v.now = event.Time(k) * event.Second
		d.finished(v, Request{InputTokens: 100 * k, OutputTokens: 10 * k, TTFT: event.Second, TPOT: event.Millisecond})
	}
	got := d.estimateSpan(5*event.Second, 0, 20*event.Second)
	var sum, sq float64
	for k := 1; k <= 4; k++ {
		x := float64(10*k) * (float64(100*k) + float64(10*k)/2)
		sum, sq = sum+x, sq+x*x
	}
	if math.Abs(got.DecodeSteps-sum/5) > 1e-9 || math.Abs(got.DecodeSE-math.Sqrt(sq)/5) > 1e-9 {
		t.Fatalf("decode work %v ± %v, want %v ± %v", got.DecodeSteps, got.DecodeSE, sum/5, math.Sqrt(sq)/5)
	}
}

// Bursty arrivals weigh less as evidence: the same 2 req/s offered in
// batches of 16 every 8 s keeps the adaptive controller in warm-up (its
// decisions say so) well after evenly spaced arrivals have ended it.
func TestBurstyWarmUp(t *testing.T) {
	warmUntil := func(batch int) event.Time {
		ctrl, err := NewController("adaptive", 4)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{Profiles: fixtureProfiles(4), SLO: event.SLO{TTFT: event.Second, TPOT: 50 * event.Millisecond}}, ctrl)
		if err != nil {
			t.Fatal(err)
		}
		id := event.RequestID(0)
		last := event.Time(0)
		gap := event.Second / 2 * event.Time(batch)
		for now := event.Time(0); now <= 120*event.Second; now += gap {
			for k := 0; k < batch; k++ {
				id++
				if err := c.Arrive(now, Request{ID: id, InputTokens: 300}); err != nil {
					t.Fatal(err)
				}
			}
			for tick := now; tick < now+gap; tick += event.Second {
				if err := c.Tick(tick); err != nil {
					t.Fatal(err)
				}
				for _, r := range c.Ready().Records {
					if r.Kind == event.KindDecision && strings.Contains(r.Text, "warm-up") {
						last = tick
					}
				}
			}
		}
		return last
	}
	even, bursty := warmUntil(1), warmUntil(16)
	if even > 10*event.Second {
		t.Fatalf("evenly spaced arrivals: warm-up until %v", even)
	}
	if bursty < 4*even || bursty < 30*event.Second {
		t.Fatalf("batches of 16: warm-up ended at %v, evenly spaced at %v", bursty, even)
	}
}

// The resident TPOT projection counts the context of the prompts being
// prefilled (issue 10): they reach the decode pool within about a TTFT
// with their prompts as context, so a burst of long prompts in the
// prefill queue prices a thinner decode pool before the contexts land.
func TestScoreSplitPendingContext(t *testing.T) {
	c := fixtureCore(t, 8)
	c.v.now = 100 * event.Second
	e := DemandEstimate{Arrivals: 100, Span: 20, Rate: 1, PrefillLoad: 0.5, MeanPrefill: 0.1, MeanPrefill2: 0.02}
	// 20,000 tokens resident in decode on two engines.
	for _, i := range []event.Instance{4, 5} {
		c.v.inst[i].DecodeCount, c.v.inst[i].DecodeTokens = 2, 10000
		c.v.touch(i)
	}
	resident := func(p int) float64 { return ScoreSplit(c.View(), e, p).TPOTResident }
	slope, icpt := fixture.Slope, fixture.Intercept
	want := func(ctx float64, d int) float64 { return (icpt + slope*ctx/float64(d)) / c.v.tpotS }
	if got := resident(4); math.Abs(got-want(20000, 4)) > 1e-12 {
		t.Fatalf("no prompt in prefill: TPOT ratio %v, want %v", got, want(20000, 4))
	}
	before := resident(5) - resident(4)
	// Six prompts of 8,000 tokens in the prefill queue.
	for _, i := range []event.Instance{0, 1, 2} {
		c.v.inst[i].PrefillCount, c.v.inst[i].PrefillTokens = 2, 16000
		c.v.inst[i].PrefillWork = 2 * fixture.Prefill(8000)
		c.v.touch(i)
	}
	if got := resident(4); math.Abs(got-want(68000, 4)) > 1e-12 {
		t.Fatalf("48,000 tokens in prefill: TPOT ratio %v, want %v (resident and pending context over 4 decode engines)", got, want(68000, 4))
	}
	if after := resident(5) - resident(4); after <= before {
		t.Fatalf("a decode engine fewer costs %v with the prompts in prefill, %v without: expected more", after, before)
	}
}

// decodeCore is fixtureCore's 4P4D with a decode intercept of 30 ms (a
// TPOT of 0.6 SLO with no context) and tokens of context resident on each
// of its four decode engines, at 100 s.
func decodeCore(t *testing.T, tokens int64) *Core {
	t.Helper()
	prof := fixture
	prof.Intercept = 0.03
	ps := make([]timing.Profile, 8)
	for i := range ps {
		ps[i] = prof
	}
	c, err := New(Config{Profiles: ps, SLO: event.SLO{TTFT: event.Second, TPOT: 50 * event.Millisecond}}, &Static{Prefill: 4})
	if err != nil {
		t.Fatal(err)
	}
	c.v.now = 100 * event.Second
	for _, i := range []event.Instance{4, 5, 6, 7} {
		c.v.inst[i].DecodeCount, c.v.inst[i].DecodeTokens = 2, tokens
		c.v.touch(i)
	}
	return c
}

// The delivered-attainment check (issue 10, fifth round): an SLO that
// fewer than 90% of the window's ended requests met, on a split projected
// under 1 for it, is projected at exactly 1 on that split, every split's
// projection of that SLO by the same factor, the other SLO untouched.
func TestAttainmentScales(t *testing.T) {
	c := decodeCore(t, 1200)
	e := DemandEstimate{Arrivals: 100, Span: 20, Rate: 5, PrefillLoad: 1.5, MeanPrefill: 0.3, MeanPrefill2: 0.1,
		Finishes: 50, TTFTOK: 0.95, TPOTOK: 0.6}
	plain := map[int]SplitScore{}
	for p := 3; p <= 5; p++ {
		plain[p] = ScoreSplit(c.View(), e, p)
	}
	if plain[4].TPOT >= 1 || plain[4].TTFT >= 1 {
		t.Fatalf("fixture: 4P4D must project both SLOs met, got %+v", plain[4])
	}
	s := e
	ttft, tpot := attainmentScales(c.View(), &s, 4, 0.9, 10)
	if ttft != 1 || math.Abs(tpot-1/plain[4].TPOT) > 1e-12 {
		t.Fatalf("factors (%v, %v), want (1, %v)", ttft, tpot, 1/plain[4].TPOT)
	}
	// The short window's endings speak only when there are enough of
	// them (min, 10), and only for the SLO they met: nine requests ended
	// meeting it, or ten still missing it, leave the check as it was.
	for _, recent := range [][3]float64{{9, 1, 1}, {10, 1, 0.8}} {
		r := e
		r.recentN, r.recentTTFT, r.recentTPOT = int(recent[0]), recent[1], recent[2]
		if _, got := attainmentScales(c.View(), &r, 4, 0.9, 10); got != tpot {
			t.Errorf("short window %v: tpot factor %v, want %v", recent, got, tpot)
		}
	}
	if got := ScoreSplit(c.View(), s, 4); math.Abs(got.TPOT-1) > 1e-12 || got.TTFT != plain[4].TTFT {
		t.Fatalf("current split after the check: %+v, want TPOT 1 and TTFT %v", got, plain[4].TTFT)
	}
	for _, p := range []int{3, 5} {
		got := ScoreSplit(c.View(), s, p)
		if math.Abs(got.TPOT-plain[p].TPOT*tpot) > 1e-12 || got.TTFT != plain[p].TTFT {
			t.Fatalf("%dP after the check: %+v, want TPOT %v × %v and TTFT %v", p, got, plain[p].TPOT, tpot, plain[p].TTFT)
		}
	}
	// No scaling: an SLO met by the target share, a projection already at
	// or above 1, the check off, or no request ended.
	for name, mod := range map[string]func(*DemandEstimate) float64{
		"attainment at the floor": func(e *DemandEstimate) float64 { e.TPOTOK = 0.9; return 0.9 },
		"check off":               func(e *DemandEstimate) float64 { return 0 },
		"nothing ended":           func(e *DemandEstimate) float64 { e.Finishes, e.TTFTOK, e.TPOTOK = 0, 0, 0; return 0.9 },
		// Issue 10, thirtieth round: ten or more requests ended in the
		// short window, and the target share of them met TPOT: the
		// misses the window counts have passed.
		"misses passed": func(e *DemandEstimate) float64 { e.recentN, e.recentTTFT, e.recentTPOT = 10, 1, 0.9; return 0.9 },
		"projection already broken": func(e *DemandEstimate) float64 {
			e.DecodeSteps = 4 / fixture.Slope // saturates four decode engines
			return 0.9
		},
	} {
		s := e
		floor := mod(&s)
		want := ScoreSplit(c.View(), s, 4)
		if ttft, tpot := attainmentScales(c.View(), &s, 4, floor, 10); ttft != 1 || tpot != 1 {
			t.Errorf("%s: factors (%v, %v), want none", name, ttft, tpot)
		}
		if got := ScoreSplit(c.View(), s, 4); got != want {
			t.Errorf("%s: score moved %+v -> %+v", name, want, got)
		}
	}
}

// Through a scoring pass: the decode side projects 0.9 of the TPOT SLO
// on 4P4D and 0.84 on 3P5D, a gain above the absolute margin but under
// the relative one, so the controller stays; with most of the ended
// requests missing the TPOT SLO the check puts 4P4D at 1, the move is a
// crossing (1 -> 0.93) and needs only the absolute margin.
func TestAttainmentCheckCrossing(t *testing.T) {
	decide := func(attainment float64) AdaptiveDecision {
		// (0.03 + slope × 4,800/4) / 0.05 = 0.9 on 4P4D, 0.84 on 3P5D.
		a, v := lightAdaptive(t, 1200)
		a.Cfg.Attainment = attainment
		a.Cfg.BurstZ = 0 // the scored path (both splits project TPOT under 1: the insurance would take it)
		// 14 of 20 ended requests missed the TPOT SLO.
		return passAfterEndings(t, a, v, func(k int) bool { return k%10 < 7 })
	}
	if d := decide(0); d.Choice != "stay" || !strings.Contains(d.Why, "below the margins") {
		t.Fatalf("check off: %s (%s), want stay below the margins", d.Choice, d.Why)
	}
	d := decide(DefaultAdaptive.Attainment)
	if d.Choice != "propose 3P5D" || !strings.Contains(d.Why, "score 1.000 -> 0.933") || !strings.Contains(d.Why, "delivered attainment (ttft 1.00, tpot 0.30)") {
		t.Fatalf("check on: %s (%s), want a proposal of 3P5D scored 1.000 -> 0.933, naming the attainment", d.Choice, d.Why)
	}
}

// A split that misses an SLO by both accounts (issue 10, seventh round):
// the resident decode context projects 1.16 of the TPOT SLO on 4P4D and
// 1.05 on 3P5D, a gain above the absolute margin but 9.7% of the score,
// under the relative margin, and 3P5D still breaks the SLO, so no
// crossing. With most ended requests meeting the TPOT SLO the controller
// stays; with most missing it, delivery agrees with the projection, and
// the move to a split projecting the TPOT lower and the TTFT unbroken
// needs only the absolute margin. Steady traffic at gamma CV 4 (seed 19
// at 6.6 req/s) sat on 4P4D for 300 s with every request missing its
// TPOT until this rule.
func TestConfirmedMissMove(t *testing.T) {
	decide := func(missed int) AdaptiveDecision {
		// (0.03 + slope × 2,240) / 0.05 = 1.16 on 4P4D; × 4/5 of the
		// context per engine on 3P5D: 1.048.
		a, v := lightAdaptive(t, 2240)
		return passAfterEndings(t, a, v, func(k int) bool { return k < missed })
	}
	if d := decide(0); d.Choice != "stay" || !strings.Contains(d.Why, "best neighbour 3P improves 1.160 -> 1.048, below the margins") {
		t.Fatalf("delivered: %s (%s), want stay below the margins, 1.160 -> 1.048", d.Choice, d.Why)
	}
	d := decide(14)
	if d.Choice != "propose 3P5D" || !strings.Contains(d.Why, "score 1.160 -> 1.048") || strings.Contains(d.Why, "delivered attainment") {
		t.Fatalf("missed by both accounts: %s (%s), want a proposal of 3P5D scored 1.160 -> 1.048, no projection scaled", d.Choice, d.Why)
	}
	if !strings.Contains(d.Why, "relative margin waived: tpot missed as delivered (0.30) and projected (1.16)") {
		t.Fatalf("missed by both accounts: why %q does not name the waiver", d.Why)
	}
}

// After a move, the delivered-attainment check counts only requests that
// arrived after it (issue 10, sixth round): the endings of requests the
// split before the move served in part say nothing about the split the
// fleet is on, and read as its misses they pushed a second move the same
// way (steady at gamma CV 5). The same twenty endings, the same demand:
// arrived after the move, the check scales the projections; arrived
// before it and ended after it, the check waits.
func TestAttainmentCheckAfterMove(t *testing.T) {
	decide := func(moveAt event.Time) AdaptiveDecision {
		a, v := lightAdaptive(t, 1200)
		a.Cfg.BurstZ = 0 // the scored path (the insurance would answer the remembered misses)
		a.moved, a.lastMove = true, moveAt
		endMissingTPOT(a, v, 90*event.Second)
		v.now = 100 * event.Second
		return passDecision(t, a, v)
	}
	if d := decide(80 * event.Second); d.Choice != "propose 3P5D" || !strings.Contains(d.Why, "delivered attainment (ttft 1.00, tpot 0.30)") {
		t.Fatalf("arrived after the move: %s (%s), want a proposal of 3P5D naming the attainment", d.Choice, d.Why)
	}
	if d := decide(89500 * event.Millisecond); d.Choice != "stay" || strings.Contains(d.Why, "delivered attainment") {
		t.Fatalf("arrived before the move: %s (%s), want stay without the check", d.Choice, d.Why)
	}
}

// A change of mix restarts the delivered-attainment check's evidence as a
// move does (issue 10, twenty-fourth round): the endings in the window
// are the old mix's requests, and their misses say little of what the
// split delivers to the new one. On the Azure traces the code phase's
// TTFT misses held the fleet ~100 s on a split failing the conversations'
// TPOT. The same twenty endings, 14 missing the TPOT SLO: with a steady
// mix the check scales the projections; when the pass sees the mix
// change, it waits; and requests that arrived after the change count
// again at the next pass.
func TestAttainmentCheckAfterMixChange(t *testing.T) {
	setup := func(shift bool) (*Adaptive, *View) {
		a, v := lightAdaptive(t, 1200)
		a.Cfg.BurstZ = 0 // the scored path
		if shift {
			// The last 4 s bring prompts four times as long as the minute's.
			for k := 0; k < 8; k++ {
				a.demand.addArrival(96*event.Second+event.Time(k)*500*event.Millisecond, 0.04, 40)
			}
		}
		endMissingTPOT(a, v, 90*event.Second)
		v.now = 100 * event.Second
		return a, v
	}
	a, v := setup(false)
	if d := passDecision(t, a, v); !strings.Contains(d.Why, "delivered attainment (ttft 1.00, tpot 0.30)") {
		t.Fatalf("steady mix: %s (%s), want the check to scale the projections", d.Choice, d.Why)
	}
	a, v = setup(true)
	d := passDecision(t, a, v)
	if !a.mixSeen {
		t.Fatalf("fixture: the pass at 100 s must see the change of mix")
	}
	if strings.Contains(d.Why, "delivered attainment") || a.mixFrom != 100*event.Second {
		t.Fatalf("change of mix: %s (%s, from %v), want the check to wait for the new mix's endings", d.Choice, d.Why, a.mixFrom)
	}
	// Twenty endings of requests that arrived after the change, the same
	// misses: the next pass (within Step, the same change) counts them.
	endMissingTPOT(a, v, 101*event.Second)
	v.now = 101500 * event.Millisecond
	if d := passDecision(t, a, v); !strings.Contains(d.Why, "delivered attainment (ttft 1.00, tpot 0.30)") || a.mixFrom != 100*event.Second {
		t.Fatalf("endings after the change: %s (%s, from %v), want the check to scale the projections from them", d.Choice, d.Why, a.mixFrom)
	}
}

// endMissingTPOT ends twenty light requests on a, one every 20 ms from
// at, 14 of them missing the TPOT SLO (80 ms a token, else 10 ms); each
// arrived about 0.95 s before its end.
func endMissingTPOT(a *Adaptive, v *View, at event.Time) {
	for k := 0; k < 20; k++ {
		v.now = at + event.Time(k)*20*event.Millisecond
		tpot := 10 * event.Millisecond
		if k%10 < 7 {
			tpot = 80 * event.Millisecond
		}
		a.Finished(v, Request{InputTokens: 10, OutputTokens: 2, TTFT: 900 * event.Millisecond, TPOT: tpot})
	}
}

// passAfterEndings ends twenty light requests, one every half second from
// 90 s, each missing the TPOT SLO (80 ms a token, else 10 ms) when
// missed(k), then runs one scoring pass at 100 s and returns its decision.
// lightAdaptive is an adaptive controller on decodeCore(t, tokens) (4P4D
// holding tokens of decode context per decode engine) whose demand holds
// one light prompt a second, evenly spaced, over the last 100 s.
func lightAdaptive(t *testing.T, tokens int64) (*Adaptive, *View) {
	t.Helper()
	c := decodeCore(t, tokens)
	a := &Adaptive{Cfg: DefaultAdaptive}
	a.demand.Span = a.Cfg.LongWindow
	for k := 0; k <= 100; k++ {
		a.demand.addArrival(event.Time(k)*event.Second, 0.01, 10)
	}
	return a, c.View()
}

func passAfterEndings(t *testing.T, a *Adaptive, v *View, missed func(k int) bool) AdaptiveDecision {
	t.Helper()
	for k := 0; k < 20; k++ {
		v.now = event.Seconds(90 + float64(k)/2)
		tpot := 10 * event.Millisecond
		if missed(k) {
			tpot = 80 * event.Millisecond
		}
		a.demand.finished(v, Request{InputTokens: 10, OutputTokens: 2, TTFT: 100 * event.Millisecond, TPOT: tpot})
	}
	v.now = 100 * event.Second
	return passDecision(t, a, v)
}

// passDecision runs one scoring pass of a and returns the one decision it
// records.
func passDecision(t *testing.T, a *Adaptive, v *View) AdaptiveDecision {
	t.Helper()
	n := len(v.records)
	a.pass(v)
	if len(v.records) != n+1 {
		t.Fatalf("pass recorded %d decisions", len(v.records)-n)
	}
	var d AdaptiveDecision
	if err := json.Unmarshal([]byte(v.records[n].Text), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// The opening split's answer to a delivered miss (AdaptiveConfig.
// OpeningShare; issue 10, eighteenth round). The fixture of
// TestAttainmentCheckCrossing (4P4D projecting TPOT at 0.9, 3P5D at
// 0.84; 14 of 20 ended requests missing TPOT, so the check puts 4P4D at
// 1 and 3P5D at 0.933), but the light prompts arrive in clumps of four
// every 4 s (gap SCV about 3): the margins widen by its root to 0.09 and
// 18%, and the gain of 0.067 is under them. On the opening split, with
// the remembered TPOT misses outnumbering the TTFT ones more than four to
// one, the move answering the delivered miss needs the absolute margin
// alone. Since the twenty-eighth round so does every crossing (a split
// at or above 1, here by the delivered check, to one under it): after a
// first move, with the misses split evenly, with the rule off, or on a
// resumed split, the same move is proposed as a plain crossing, without
// the opening's reason. Without the delivered miss (4P4D at 0.9 and 3P5D
// at 0.84, no crossing) the margins the pass applies are still the
// widened ones.
func TestOpeningAnswersADeliveredMiss(t *testing.T) {
	resumed := false
	decide := func(moved bool, ttftMisses, tpotMisses int, share float64, missed func(int) bool) AdaptiveDecision {
		c := decodeCore(t, 1200)
		a := &Adaptive{Cfg: DefaultAdaptive}
		a.Cfg.BurstZ = 0 // the scored path
		a.Cfg.OpeningShare = share
		c.View().resumed = resumed
		a.demand.Span = a.Cfg.LongWindow
		for k := 0; k < 100; k++ {
			a.demand.addArrival(event.Time(k/4*4)*event.Second, 0.01, 10)
		}
		if moved {
			a.moved, a.lastMove, a.lastDir = true, -200*event.Second, 1
		}
		for k := 0; k < max(ttftMisses, tpotMisses); k++ {
			a.mem.ended(event.Time(50+k)*event.Second, k < ttftMisses, k < tpotMisses)
		}
		return passAfterEndings(t, a, c.View(), missed)
	}
	seventy := func(k int) bool { return k%10 < 7 }
	d := decide(false, 3, 14, DefaultAdaptive.OpeningShare, seventy)
	if d.Choice != "propose 3P5D" || !strings.Contains(d.Why, "score 1.000 -> 0.933, confirmation 1 of 3") ||
		!strings.Contains(d.Why, "opening split: tpot met by 0.30 of the ended requests; misses in the last 600 s: 14 tpot, 3 ttft") {
		t.Fatalf("opening split, TPOT misses 14 to 3: %s (%s), want a proposal of 3P5D naming the opening's answer", d.Choice, d.Why)
	}
	for _, c := range []struct {
		name       string
		moved      bool
		ttft, tpot int
		share      float64
	}{
		{"after a first move", true, 3, 14, 4},
		{"misses 14 to 4", false, 4, 14, 4},
		{"rule off", false, 3, 14, 0},
	} {
		d := decide(c.moved, c.ttft, c.tpot, c.share, seventy)
		if d.Choice != "propose 3P5D" || !strings.Contains(d.Why, "score 1.000 -> 0.933, confirmation 1 of 3") ||
			strings.Contains(d.Why, "opening split") {
			t.Errorf("%s: %s (%s), want a crossing proposed by the absolute margin, not as the opening's answer", c.name, d.Choice, d.Why)
		}
		d = decide(c.moved, c.ttft, c.tpot, c.share, func(int) bool { return false })
		if d.Choice != "stay" || !strings.Contains(d.Why, "best neighbour 3P improves 0.900 -> 0.840, below the margins (0.09, 18%)") {
			t.Errorf("%s, no delivered miss: %s (%s), want stay below the widened margins", c.name, d.Choice, d.Why)
		}
	}
	// A split resumed from a leader was chosen on evidence: no opening
	// answer, but the crossing stands.
	resumed = true
	if d := decide(false, 3, 14, 4, seventy); d.Choice != "propose 3P5D" || strings.Contains(d.Why, "opening split") {
		t.Errorf("resumed split: %s (%s), want a crossing proposed without the opening's answer", d.Choice, d.Why)
	}
}

// prefillFirst is a Rehearser whose replays qualify more requests the
// more prefill engines a split has.
type prefillFirst struct{ calls int }

func (f *prefillFirst) Arrived(event.Time, Request) {}
func (f *prefillFirst) Finished(Request)            {}
func (f *prefillFirst) Qualified(_, _ event.Time, current int, others []int, _ func(int) int) (int, []int, int) {
	f.calls++
	c := make([]int, len(others))
	for i, q := range others {
		c[i] = 10 * q
	}
	return 10 * current, c, 100
}

// The rehearsal's guard yields to a confirmed miss (issue 10,
// twenty-eighth round). The rehearsal moved the fleet to 4P4D 90 s ago
// (past the thrash window, within the rehearsal's), and the pass
// proposes 3P5D, confirmed, on a decode load that projects 4P4D's TPOT
// at or over 1. The guard's replay rates 3P5D worse. When the requests
// that arrived since the move met TPOT (20 of 20) the guard holds the
// fleet; when 6 of 20 did, TPOT is missed as delivered and as
// projected, and the move goes, saying why.
func TestGuardYieldsToAConfirmedMiss(t *testing.T) {
	decide := func(tpotOK int) (AdaptiveDecision, int) {
		c := decodeCore(t, 1800)
		a := &Adaptive{Cfg: DefaultAdaptive}
		a.Cfg.BurstZ = 0 // the scored path
		a.demand.Span = a.Cfg.LongWindow
		for k := 0; k < 100; k++ {
			a.demand.addArrival(event.Time(k)*event.Second, 0.01, 10)
		}
		f := &prefillFirst{}
		a.Rehearser = f
		a.moved, a.lastMove, a.lastDir, a.byRehearsal = true, 10*event.Second, 1, true
		a.proposal, a.confirms = 3, 100
		a.since.n, a.since.ttftOK, a.since.tpotOK = 20, 20, tpotOK
		v := c.View()
		v.now = 100 * event.Second
		n := len(v.records)
		a.pass(v)
		var d AdaptiveDecision
		for _, r := range v.records[n:] {
			if err := json.Unmarshal([]byte(r.Text), &d); err == nil && d.Controller == "adaptive" {
				break
			}
		}
		return d, f.calls
	}
	d, calls := decide(20)
	if d.Choice != "stay" || !strings.Contains(d.Why, "undoes the rehearsal's move 90 s ago") || calls != 1 {
		t.Errorf("TPOT delivered: %s (%s), %d replays; want the guard to hold", d.Choice, d.Why, calls)
	}
	d, _ = decide(6)
	if d.Choice != "move 3P5D" || !strings.Contains(d.Why, "the rehearsal's guard yields: tpot missed as delivered (0.30)") {
		t.Errorf("TPOT missed: %s (%s); want the move, the guard yielding", d.Choice, d.Why)
	}
}
