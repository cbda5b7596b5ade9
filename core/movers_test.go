package core

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// pickMovers chooses what rounds of pickMover, each followed by the move,
// choose, in the same order: on random fleets with ties, pinned and
// offline instances.
func TestPickMoversMatchesRounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		n := 2 + rng.IntN(60)
		fleet := func() *View {
			v := &View{inst: make([]Instance, n), now: 100}
			return v
		}
		a := fleet()
		for i := range a.inst {
			in := &a.inst[i]
			in.Role = []event.Role{event.RolePrefill, event.RoleDecode, event.RoleMixed}[rng.IntN(3)]
			in.PrefillWork = float64(rng.IntN(4)) / 4
			in.DecodeTokens = int64(rng.IntN(4))
			in.DecodeCount, in.PrefillCount = rng.IntN(2), rng.IntN(2)
			in.Pinned = rng.IntN(8) == 0
			if rng.IntN(8) == 0 {
				in.OfflineUntil = 200
			}
		}
		b := fleet()
		copy(b.inst, a.inst)
		to := []event.Role{event.RolePrefill, event.RoleDecode}[rng.IntN(2)]
		k := rng.IntN(n + 2)
		var want []event.Instance
		for len(want) < k {
			m := pickMover(a, to)
			if m == event.NoInstance {
				break
			}
			a.Move(m, to, a.now, event.CauseController, "test")
			want = append(want, m)
		}
		if got := pickMovers(b, to, k); !slices.Equal(got, want) {
			t.Fatalf("trial %d: %d movers toward %v: got %v, want %v", trial, k, to, got, want)
		}
	}
}
