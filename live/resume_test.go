package live

import (
	"context"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// A router resuming another's published state (serve --ha's takeover)
// keeps the engines that one had ejected out: down from its first
// instant (a health record at time 0), no placement there, and readmitted
// as any ejected engine is, once it answers as a new process, which the
// published process start time tells apart from the one that failed.
func TestResumeKeepsEjected(t *testing.T) {
	a := startRig(t, rigOpts{n: 4, arm: "static:1P3D", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) { c.SweepInterval = 50 * time.Millisecond }})
	waitFor(t, "every engine's start time read", func() bool {
		st, _ := a.router.State()
		for _, e := range st.Engines {
			if e.ProcessStart == 0 {
				return false
			}
		}
		return true
	})
	victim := a.stubs.Servers()[3]
	victim.Kill()
	waitFor(t, "the victim ejected", func() bool { st, _ := a.router.State(); return st.Engines[3].Down })
	published, _ := a.router.State()
	rs, err := ResumeFrom(published, a.router.cfg.Fleet.Names())
	if err != nil {
		t.Fatal(err)
	}

	ctrl, err := core.NewController("static:1P3D", 4)
	if err != nil {
		t.Fatal(err)
	}
	jr := &memJournal{}
	b, err := New(Config{Fleet: a.router.cfg.Fleet, URLs: a.router.cfg.URLs, Controller: ctrl, Model: "stub", Recorder: jr,
		ProbeInterval: 50 * time.Millisecond, Resume: rs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	if st, _ := b.State(); !st.Engines[3].Down || st.Engines[3].ProcessStart != published.Engines[3].ProcessStart {
		t.Fatalf("the new leader's first state: e3 %+v, expected down with the published start time", st.Engines[3])
	}
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the victim readmitted by the new leader", func() bool {
		st, _ := b.State()
		return !st.Engines[3].Down && st.Engines[3].Generation == published.Engines[3].Generation+1
	})
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	var health []string
	for _, rec := range jr.records() {
		if rec.Kind == event.KindHealth && rec.Inst == 3 {
			health = append(health, rec.Text)
			if len(health) == 1 && rec.At != 0 {
				t.Errorf("the resumed down record at %v, expected time 0", rec.At)
			}
		}
	}
	if len(health) != 2 || health[0] != "down" || health[1] != "up" {
		t.Errorf("the new leader's health records of e3: %v, expected down at 0, then up", health)
	}
}
