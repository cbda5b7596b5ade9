package core

import (
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// A hybrid stint that the rehearsal ended while passes were seeing a
// change of mix leaves no count behind: the next stint leaves only after
// Confirmations passes of its own see one (issue 10, thirty-first round).
func TestHybridStintCountsItsOwnMixPasses(t *testing.T) {
	v := &View{inst: make([]Instance, 6), now: 100 * event.Second}
	for i := range v.inst {
		v.inst[i].Role = event.RoleDecode
		if i < 4 {
			v.inst[i].Role = event.RolePrefill
		}
	}
	a := &Adaptive{Cfg: DefaultAdaptive}
	a.aggregate(v, 4, -3, DemandEstimate{}, "hybrid: test")
	if !a.agg || a.hyb != 3 {
		t.Fatalf("after the move to hybrid: agg %v hyb %d, want true 3", a.agg, a.hyb)
	}
	// Two passes saw a change of mix, then the rehearsal took the fleet
	// back to 4P2D.
	a.hybMixPasses = a.Cfg.Confirmations - 1
	v.now += 10 * event.Second
	a.aggregate(v, -1, 4, DemandEstimate{}, "rehearsal: back")
	if a.agg {
		t.Fatal("the rehearsal's move back left the fleet aggregated")
	}
	v.now += 60 * event.Second
	a.aggregate(v, 4, -3, DemandEstimate{}, "hybrid: again")
	if a.hybMixPasses != 0 {
		t.Errorf("a new hybrid stint starts with %d passes seen, want 0", a.hybMixPasses)
	}
}
