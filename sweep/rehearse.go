package sweep

import (
	"runtime"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/sim"
)

// AttachRehearser gives an adaptive controller its rehearsal model: the
// simulator on cfg's fleet (sim.Rehearser; core.RehearsalConfig). Every
// driver that runs the adaptive arm attaches it, so the arm is one
// controller in a sweep, the bound's rivals, a replay and the live router.
// Other controllers are returned as they are.
func AttachRehearser(ctrl core.Controller, cfg sim.Config) core.Controller {
	if a, ok := ctrl.(*core.Adaptive); ok && a.Cfg.Rehearsal.Step > 0 && a.Rehearser == nil {
		a.Rehearser = sim.NewRehearser(cfg, a.Cfg.Rehearsal)
	}
	return ctrl
}

// AttachLiveRehearser is AttachRehearser for the live router: a
// rehearsal's replays run at once, up to GOMAXPROCS of them
// (sim.Rehearser's Parallel), since the router's owner goroutine, which
// places every request, waits for the rehearsal. The decisions are the
// serial replays' (TestParallelRehearsalMatchesSerial).
func AttachLiveRehearser(ctrl core.Controller, cfg sim.Config) core.Controller {
	AttachRehearser(ctrl, cfg)
	if a, ok := ctrl.(*core.Adaptive); ok {
		if h, ok := a.Rehearser.(*sim.Rehearser); ok {
			h.Parallel = runtime.GOMAXPROCS(0)
		}
	}
	return ctrl
}

// newController is core.NewController with the rehearsal attached.
func newController(arm string, cfg sim.Config) (core.Controller, error) {
	ctrl, err := core.NewController(arm, len(cfg.Profiles))
	if err != nil {
		return nil, err
	}
	return AttachRehearser(ctrl, cfg), nil
}
