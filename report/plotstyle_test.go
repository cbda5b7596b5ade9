package report

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// TestArmStylesDistinct: up to 16 arms (plus the oracle) each get their
// own colour and their own marker.
func TestArmStylesDistinct(t *testing.T) {
	r := &Report{}
	for i := 0; i < 16; i++ {
		r.Arms = append(r.Arms, ArmReport{Arm: fmt.Sprintf("static:%dP1D", i+1)})
	}
	r.Arms = append(r.Arms, ArmReport{Arm: OracleArm})
	colours := map[string]string{}
	glyphs := map[string]string{}
	for i, a := range r.Arms {
		ls, gs := r.armStyle(i)
		c := fmt.Sprint(ls.Color)
		g := fmt.Sprintf("%T%+v", gs.Shape, gs.Shape)
		if other, ok := colours[c]; ok {
			t.Errorf("%s and %s share colour %s", a.Arm, other, c)
		}
		if other, ok := glyphs[g]; ok && a.Arm != OracleArm {
			t.Errorf("%s and %s share marker %s", a.Arm, other, g)
		}
		colours[c], glyphs[g] = a.Arm, a.Arm
	}
	if !reflect.DeepEqual([]int{prefillCols(2), prefillCols(9), prefillCols(16)}, []int{2, 3, 4}) {
		t.Error("prefill panel columns")
	}
}

// TestHorizon: the per-arm time axes end at the last arrival plus a shown
// drain, not at the end of the longest drain tail.
func TestHorizon(t *testing.T) {
	r := &Report{Arms: []ArmReport{{Arm: "a"}, {Arm: "b"}},
		Runs:  []RunReport{{Arm: "a", Rate: 1}, {Arm: "b", Rate: 1}},
		plots: []runPlot{{lastArr: 90 * event.Second, end: 95 * event.Second}, {lastArr: 88 * event.Second, end: 520 * event.Second}}}
	last, end := r.horizon(1)
	if last != 90 || end != 100 {
		t.Fatalf("horizon = %v, %v; want 90 (last arrival), 100 (10 s of drain shown)", last, end)
	}
}
