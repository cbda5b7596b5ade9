package core

import (
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

func baselineCore(t *testing.T, ctrl Controller) *Core {
	t.Helper()
	ps := make([]timing.Profile, 4)
	for i := range ps {
		ps[i] = fixture
	}
	c, err := New(Config{Profiles: ps, SLO: event.SLO{TTFT: event.Second, TPOT: 50 * event.Millisecond}}, ctrl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The Ray model starts one replica per deployment with the other GPUs idle,
// adds a replica only after the desire held the upscale delay, and the new
// replica serves only after its startup delay.
func TestRayStartupAndDelays(t *testing.T) {
	r := &Ray{Cfg: DefaultRay}
	c := baselineCore(t, r)
	if c.v.Count(event.RolePrefill) != 1 || c.v.Count(event.RoleDecode) != 1 || c.v.Count(event.RoleNone) != 2 {
		t.Fatalf("opening roles: %dP %dD %d idle", c.v.Count(event.RolePrefill), c.v.Count(event.RoleDecode), c.v.Count(event.RoleNone))
	}
	// Ten prompts resident on the prefill replica: 10 ongoing, desire 5.
	for id := 1; id <= 10; id++ {
		c.Arrive(0, Request{ID: event.RequestID(id), InputTokens: 100})
	}
	c.Ready()
	for t0 := event.Time(10); t0 <= 30; t0 += 10 {
		c.Tick(t0 * event.Second)
		if c.v.Count(event.RolePrefill) != 1 {
			t.Fatalf("upscaled at %ds, before the 30 s upscale delay", t0)
		}
	}
	c.Tick(40 * event.Second)
	if c.v.Count(event.RolePrefill) != 3 { // desire 5, two idle GPUs: both start at once
		t.Fatalf("no upscale to the desired count after the delay: %d prefill replicas", c.v.Count(event.RolePrefill))
	}
	var started event.Instance = event.NoInstance
	for i, in := range c.v.Instances() {
		if in.Role == event.RolePrefill && !in.Online(c.Now()) {
			started = event.Instance(i)
		}
	}
	if started == event.NoInstance || c.v.Instances()[started].OfflineUntil != 40*event.Second+DefaultStartupDelay {
		t.Fatalf("the new replica must start %v later", DefaultStartupDelay)
	}
}

// Ray: when every replica holds max_ongoing_requests, a request fails with
// HTTP 503 (a failure, not a refusal).
func TestRayOverloadFails(t *testing.T) {
	cfg := DefaultRay
	cfg.MaxOngoing = 2 // a cap set by the user (the builder's default is none)
	c := baselineCore(t, &Ray{Cfg: cfg})
	var fails int
	for id := 1; id <= 3; id++ {
		c.Arrive(0, Request{ID: event.RequestID(id), InputTokens: 100})
		for _, d := range c.Ready().Decisions {
			if d.Kind == Fail && d.Cause == event.CauseUnavailable {
				fails++
			}
		}
	}
	if fails != 1 {
		t.Fatalf("%d failures, want the third request to fail with 503", fails)
	}
}

// Dynamo: a request is refused (HTTP 529) when the least loaded prefill
// worker already holds BusyTTFT SLOs of prefill work.
func TestDynamoRefuses(t *testing.T) {
	c := baselineCore(t, &Dynamo{Cfg: DefaultDynamo})
	refused := 0
	for id := 1; id <= 12; id++ { // T(900) ≈ 0.9 s each, two prefill workers
		c.Arrive(0, Request{ID: event.RequestID(id), InputTokens: 900})
		for _, d := range c.Ready().Decisions {
			if d.Kind == Refuse {
				if d.Cause != event.CauseOverload {
					t.Fatalf("refusal cause %v, want overload (529)", d.Cause)
				}
				refused++
			}
		}
	}
	if refused == 0 || refused > 8 {
		t.Fatalf("%d refused of 12", refused)
	}
}

// Dynamo moves workers, it does not relabel: a moved engine serves nothing
// for the startup delay.
func TestDynamoMoveStartsWorker(t *testing.T) {
	d := &Dynamo{Cfg: DefaultDynamo}
	c := baselineCore(t, d)
	c.advance(10 * event.Second)
	c.v.startWorkers(3, d.Cfg.StartupDelay, "test")
	if c.v.Count(event.RolePrefill) != 3 {
		t.Fatalf("%d prefill workers, want 3", c.v.Count(event.RolePrefill))
	}
	for _, in := range c.v.Instances() {
		if in.Moved && in.OfflineUntil != 10*event.Second+DefaultStartupDelay {
			t.Fatalf("moved worker online at %v", in.OfflineUntil)
		}
	}
}

// Ray goes straight to the desired replica count once the upscale delay
// has held, not one replica per delay.
func TestRayScalesToDesired(t *testing.T) {
	r := &Ray{Cfg: DefaultRay}
	c := baselineCore(t, r)
	for id := 1; id <= 40; id++ { // 40 ongoing prefills: desire 20, capped by the 2 idle GPUs
		c.Arrive(0, Request{ID: event.RequestID(id), InputTokens: 100})
	}
	c.Ready()
	for t0 := event.Time(10); t0 <= 40; t0 += 10 {
		c.Tick(t0 * event.Second)
	}
	if c.v.Count(event.RolePrefill) != 3 || c.v.Count(event.RoleNone) != 0 {
		t.Fatalf("after the delay: %d prefill, %d idle: want every idle GPU started at once", c.v.Count(event.RolePrefill), c.v.Count(event.RoleNone))
	}
}

// Dynamo never stops the last serving worker of a role, and removes a
// worker that is still starting before a serving one.
func TestDynamoKeepsLastServingWorker(t *testing.T) {
	d := &Dynamo{Cfg: DefaultDynamo}
	c := baselineCore(t, d) // 2P2D
	c.advance(10 * event.Second)
	c.v.startWorkers(3, d.Cfg.StartupDelay, "test") // 3P1D, one prefill starting
	c.advance(20 * event.Second)
	c.v.startWorkers(1, d.Cfg.StartupDelay, "test") // back down: the starting one goes first
	var serving int
	for _, in := range c.v.Instances() {
		if in.Role == event.RolePrefill && in.Online(c.Now()) {
			serving++
		}
	}
	if serving != 1 || c.v.Count(event.RolePrefill) != 1 {
		t.Fatalf("%d prefill, %d serving: want 1 serving prefill worker kept", c.v.Count(event.RolePrefill), serving)
	}
	// Now one prefill serves and the pool is 1P3D with two decode workers
	// starting: asking for 3P must not stop the only serving decode worker.
	c.v.startWorkers(3, d.Cfg.StartupDelay, "test")
	if c.v.onlineCount(event.RoleDecode) < 1 {
		t.Fatal("the last serving decode worker was stopped")
	}
}

// The baselines' sensitivity arms (docs/baselines.md): each key sets its
// parameter and nothing else; a value out of range is refused, naming the
// arm, the key and what was expected, never taken silently as a default or
// wrapped.
func TestBaselineParameters(t *testing.T) {
	build := func(arm string) (Controller, error) { return NewController(arm, 8) }
	ok := []struct {
		arm   string
		check func(c Controller) bool
	}{
		{"dynamo:start=30s", func(c Controller) bool {
			d := c.(*Dynamo).Cfg
			want := DefaultDynamo
			want.StartupDelay = 30 * event.Second
			return d == want
		}},
		{"dynamo:busy=0/interval=60s", func(c Controller) bool {
			d := c.(*Dynamo).Cfg
			return d.BusyTTFT == 0 && d.Interval == 60*event.Second && d.StartupDelay == DefaultDynamo.StartupDelay
		}},
		{"ray:start=0s/target=8", func(c Controller) bool {
			r := c.(*Ray).Cfg
			return r.StartupDelay == 0 && r.TargetOngoing == 8 && r.MaxOngoing == DefaultRay.MaxOngoing && r.UpscaleDelay == DefaultRay.UpscaleDelay
		}},
		{"ray:maxongoing=64/upscale=0s", func(c Controller) bool {
			r := c.(*Ray).Cfg
			return r.MaxOngoing == 64 && r.UpscaleDelay == 0 && r.TargetOngoing == DefaultRay.TargetOngoing
		}},
		{"ray:maxongoing=1e9", func(c Controller) bool { return c.(*Ray).Cfg.MaxOngoing == 1e9 }},
	}
	for _, c := range ok {
		ctl, err := build(c.arm)
		if err != nil || !c.check(ctl) {
			t.Errorf("%s: %v %+v", c.arm, err, ctl)
		}
	}
	for arm, want := range map[string]string{
		"ray:maxongoing=1e30": `arm "ray:maxongoing=1e30": maxongoing: "1e30": expected a whole number from 0 (no cap) to 1e9`,
		"ray:maxongoing=2.7":  `maxongoing: "2.7": expected a whole number`,
		"ray:maxongoing=-1":   `maxongoing: "-1": expected a number of 0 or more`,
		"ray:target=0":        `target: "0": expected a number of at least 0.001`,
		"ray:target=1e-300":   `target: "1e-300": expected a number of at least 0.001`,
		"dynamo:interval=0s":  `interval: "0s": expected a duration > 0`,
		"dynamo:start=-5s":    `start: "-5s": expected a duration of 0 or more`,
		"dynamo:target=3":     `unknown key "target": expected one of start, busy, interval`,
		"ray:busy=1":          `unknown key "busy": expected one of start, target, maxongoing, upscale`,
		"ray:start":           `"start": expected KEY=VALUE`,
		"dynamo:busy=NaN":     `busy: "NaN": expected a number of 0 or more`,
		"ray:upscale=forever": `arm "ray:upscale=forever": upscale:`,
	} {
		if _, err := build(arm); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v: expected an error holding %q", arm, err, want)
		}
	}
}

// An arm that moves engines between the phases is refused on one engine
// when it is read (it failed at its run's start), naming the arm.
func TestMovingArmsNeedTwo(t *testing.T) {
	for _, arm := range []string{"adaptive", "arrow", "planner", "coldswap", "dynamo", "ray", "ray:start=0s"} {
		if _, err := NewController(arm, 1); err == nil || !strings.Contains(err.Error(), `arm "`+arm+`": 1 instance: expected at least 2`) {
			t.Errorf("%s on one engine: %v", arm, err)
		}
	}
	if _, err := NewController("aggregated", 1); err != nil {
		t.Errorf("aggregated on one engine: %v", err)
	}
}
