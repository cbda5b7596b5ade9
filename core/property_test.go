package core

import (
	"math/rand/v2"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

func fixtureCore(t *testing.T, n int) *Core {
	t.Helper()
	ps := make([]timing.Profile, n)
	for i := range ps {
		ps[i] = fixture
	}
	c, err := New(Config{Profiles: ps, SLO: event.SLO{TTFT: event.Second, TPOT: 50 * event.Millisecond}}, &Static{Prefill: n / 2})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Arrow §5.3: properties of the cost pairs, over random resident states.
func TestCostPairProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 2000; trial++ {
		c := fixtureCore(t, 2)
		in := &c.v.inst[0]
		in.PrefillCount = rng.IntN(5)
		in.PrefillTokens = int64(rng.IntN(20000))
		in.PrefillWork = rng.Float64() * 3
		in.DecodeCount = rng.IntN(5)
		in.DecodeTokens = int64(rng.IntN(20000))
		n := 1 + rng.IntN(16000)
		r := Request{InputTokens: n}
		longer := Request{InputTokens: n + 1 + rng.IntN(1000)}
		p, pl := c.v.PrefillCost(0, r), c.v.PrefillCost(0, longer)
		// Prefill cost[1] is monotone in the prompt length.
		if pl[1] < p[1] {
			t.Fatalf("prefill cost fell with a longer prompt: %v -> %v", p, pl)
		}
		// Resident prefill work never lowers the price.
		in.PrefillWork += rng.Float64()
		if q := c.v.PrefillCost(0, r); q[1] < p[1] {
			t.Fatalf("more resident prefill lowered the price: %v -> %v", p, q)
		}
		// Decode residents change prefill slot 0 only.
		before := c.v.PrefillCost(0, r)
		in.DecodeTokens += int64(1 + rng.IntN(1000))
		after := c.v.PrefillCost(0, r)
		if after[1] != before[1] || after[0] <= before[0] {
			t.Fatalf("decode residents changed prefill cost %v -> %v", before, after)
		}
		// Decode cost[1] is monotone in L(r); slot 0 is the prefill pressure.
		d, dl := c.v.DecodeCost(0, r), c.v.DecodeCost(0, longer)
		if dl[1] <= d[1] || dl[0] != d[0] || d[0] != float64(in.PrefillTokens) {
			t.Fatalf("decode cost %v -> %v with a longer request", d, dl)
		}
	}
}

// Arrow §5.3: an instance free of the other phase's pressure always wins,
// whatever the second slot says.
func TestCostLexicographic(t *testing.T) {
	a, b := Cost{0, 100}, Cost{1, 0}
	if !a.Less(b) || b.Less(a) {
		t.Fatal("slot 0 must dominate")
	}
	if !(Cost{1, 1}).Less(Cost{1, 2}) || (Cost{1, 2}).Less(Cost{1, 2}) {
		t.Fatal("slot 1 breaks ties, strictly")
	}
}

// The adaptive controller's projections move the right way with the split:
// more prefill engines never raise the TTFT ratio, and fewer decode engines
// never lower the TPOT ratio.
func TestScoreSplitMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 500; trial++ {
		c := fixtureCore(t, 8)
		c.v.now = event.Second * 100
		e := DemandEstimate{Arrivals: 100, Span: 20, Rate: 5, PrefillLoad: rng.Float64() * 10,
			MeanPrefill: 0.1 + rng.Float64(), DecodeSteps: rng.Float64() * 1e6}
		e.MeanPrefill2 = e.MeanPrefill * e.MeanPrefill * (1 + rng.Float64())
		c.v.inst[0].PrefillWork = rng.Float64() * 20
		c.v.inst[5].DecodeTokens = int64(rng.Float64() * 1e5)
		prev := ScoreSplit(c.View(), e, 1)
		for p := 2; p < 8; p++ {
			s := ScoreSplit(c.View(), e, p)
			if s.TTFT > prev.TTFT+1e-12 || s.TPOT < prev.TPOT-1e-12 {
				t.Fatalf("split %d: ttft %v -> %v, tpot %v -> %v", p, prev.TTFT, s.TTFT, prev.TPOT, s.TPOT)
			}
			prev = s
		}
		if s := ScoreSplit(c.View(), e, 0); s.Score() < 1e300 {
			t.Fatalf("an empty prefill pool must score infinite, got %v", s.Score())
		}
	}
}
