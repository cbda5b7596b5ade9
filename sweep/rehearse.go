package sweep

import (
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

// newController is core.NewController with the rehearsal attached.
func newController(arm string, cfg sim.Config) (core.Controller, error) {
	ctrl, err := core.NewController(arm, len(cfg.Profiles))
	if err != nil {
		return nil, err
	}
	return AttachRehearser(ctrl, cfg), nil
}
