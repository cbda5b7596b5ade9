package sweep

import (
	"runtime"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/sim"
)

// Every driver's adaptive arm gets the simulator as its rehearsal model
// (the live router's replaying at once); other arms, and an adaptive controller with the rehearsal off, do not.
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
	} else if h := a.Rehearser.(*sim.Rehearser); h.Parallel > 1 {
		t.Errorf("adaptive in a sweep: replays %d at once, want one after another (sweeps run runs at once)", h.Parallel)
	}
	// The live router's replays run at once, up to GOMAXPROCS.
	lv, err := core.NewController("adaptive", fl.Size())
	if err != nil {
		t.Fatal(err)
	}
	AttachLiveRehearser(lv, cfg)
	if h, ok := lv.(*core.Adaptive).Rehearser.(*sim.Rehearser); !ok || h.Parallel != runtime.GOMAXPROCS(0) {
		t.Errorf("live adaptive: rehearser %T, want *sim.Rehearser replaying GOMAXPROCS (%d) at once", lv.(*core.Adaptive).Rehearser, runtime.GOMAXPROCS(0))
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
