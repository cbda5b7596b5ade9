package sweep

import (
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/fleet"
)

// Every driver's adaptive arm gets the simulator as its rehearsal model;
// other arms, and an adaptive controller with the rehearsal off, do not.
func TestAttachRehearser(t *testing.T) {
	fl, err := fleet.Load("eval8")
	if err != nil {
		t.Fatal(err)
	}
	cfg := SimConfig(fl, fl.CoreSLO(), false)
	ctrl, err := newController("adaptive", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a := ctrl.(*core.Adaptive); a.Rehearser == nil {
		t.Error("adaptive: no rehearser attached")
	}
	off := &core.Adaptive{Cfg: core.DefaultAdaptive}
	off.Cfg.Rehearsal.Step = 0
	if AttachRehearser(off, cfg); off.Rehearser != nil {
		t.Error("rehearsal off: a rehearser attached")
	}
	st, err := newController("static:4P4D/alg1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*core.Static); !ok {
		t.Errorf("static arm became %T", st)
	}
}
