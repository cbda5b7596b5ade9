package core

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// An exact sum is the exact sum of its samples rounded once to the nearest
// float64, whatever order samples were added and removed in: checked
// against math/big on random samples of mixed signs and magnitudes.
func TestExactSumsRoundOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 2000; trial++ {
		var s exact
		want := new(big.Float).SetPrec(2000)
		n := 1 + rng.IntN(50)
		for i := 0; i < n; i++ {
			x := math.Ldexp(rng.Float64(), rng.IntN(80)-40)
			if rng.IntN(3) == 0 {
				x = -x
			}
			if rng.IntN(10) == 0 {
				x = math.Round(x * 1e3) // whole numbers too
			}
			s = s.plus(exactOf(x))
			want.Add(want, new(big.Float).SetFloat64(x))
			if rng.IntN(4) == 0 { // add and take back a sample
				y := rng.NormFloat64() * 1e6
				s = s.plus(exactOf(y)).minus(exactOf(y))
			}
		}
		w, _ := want.Float64() // nearest, ties to even
		if got := s.float(); got != w {
			t.Fatalf("trial %d: sum %v, want %v", trial, got, w)
		}
	}
	for _, x := range []float64{0, 1, -1, 0.1, 1e-3, 2.5e-7, 1 << 60, -3.75} {
		if got := exactOf(x).float(); got != x {
			t.Errorf("exactOf(%v).float() = %v", x, got)
		}
	}
}

// A summed window's totals since any instant equal the sums over the
// samples at or after it, through pruning and compaction.
func TestSummedWindowSince(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var w summedWindow[arrivalSample, arrivalTotals]
	// The samples the window should hold, kept plainly.
	type sample struct {
		at event.Time
		a  arrivalSample
	}
	var held []sample
	now := event.Time(0)
	for i := 0; i < 20000; i++ {
		// Quiet stretches now and then, so the window empties and its
		// blocks are released and reused.
		if rng.IntN(3000) == 0 {
			now += 40 * event.Second
		}
		now += event.Time(rng.IntN(int(event.Second / 50)))
		a := arrivalSample{prefill: rng.ExpFloat64() * 0.2, input: 1 + rng.IntN(4000)}
		w.add(now, a)
		held = append(held, sample{now, a})
		w.prune(now - 30*event.Second)
		for len(held) > 0 && held[0].at < now-30*event.Second {
			held = held[1:]
		}
		if w.cum.len() != len(held) {
			t.Fatalf("step %d: %d samples held, want %d", i, w.cum.len(), len(held))
		}
		if i%97 != 0 {
			continue
		}
		since := now - event.Time(rng.IntN(int(40*event.Second)))
		var n int
		var sum, sq exact
		for _, h := range held {
			if h.at >= since {
				n++
				sum, sq = sum.plus(exactOf(h.a.prefill)), sq.plus(exactOf(h.a.prefill*h.a.prefill))
			}
		}
		got := w.since(since)
		if got.n != n || got.prefill != sum || got.prefillSq != sq {
			t.Fatalf("step %d: since %v: %d arrivals, sums %v %v; want %d, %v %v", i, since, got.n,
				got.prefill.float(), got.prefillSq.float(), n, sum.float(), sq.float())
		}
	}
}

// repeatAdd has the bits of the plain left-to-right loop.
func TestRepeatAddMatchesLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	xs := []float64{0, 1, 0.1, 1.0 / 3, 2.5e-7, 0.069, 0.96, 1e300}
	for i := 0; i < 60; i++ {
		xs = append(xs, math.Ldexp(rng.Float64(), rng.IntN(40)-30), -rng.Float64())
	}
	for _, x := range xs {
		s := 0.0
		for n := 0; n <= 70000; n++ {
			if n <= 3000 || n%4099 == 0 {
				if got := repeatAdd(x, n); got != s && !(math.IsInf(got, 0) && math.IsInf(s, 0)) {
					t.Fatalf("repeatAdd(%v, %d) = %v, want %v", x, n, got, s)
				}
			}
			s += x
		}
	}
}
