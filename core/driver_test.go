package core

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// A fact stamped before the previous one is an error (never a panic), and
// it changes nothing: the clock stays where it was.
func TestClockNeverGoesBack(t *testing.T) {
	c := fixtureCore(t, 2)
	if err := c.Tick(event.Second); err != nil {
		t.Fatal(err)
	}
	facts := map[string]func() error{
		"tick":         func() error { return c.Tick(0) },
		"arrive":       func() error { return c.Arrive(0, Request{ID: 1, InputTokens: 10}) },
		"prefill done": func() error { return c.PrefillDone(0, Request{ID: 1, InputTokens: 10}) },
		"finished":     func() error { return c.Finished(0, 1, Request{ID: 1, InputTokens: 10}) },
		"cancel":       func() error { return c.Cancel(0, Request{ID: 1}, StageQueued) },
		"engine down":  func() error { return c.EngineDown(0, 0, event.CauseEngineDown) },
		"engine up":    func() error { return c.EngineUp(0, 0, 2) },
		"observe":      func() error { return c.Observe(0, 0, Observation{}) },
	}
	for name, f := range facts {
		if err := f(); !errors.Is(err, ErrClockBack) {
			t.Errorf("%s at 0 after 1s: err %v, expected ErrClockBack", name, err)
		}
		if c.Now() != event.Second {
			t.Fatalf("%s moved the clock to %v", name, c.Now())
		}
	}
	if rd := c.Ready(); len(rd.Decisions) != 0 {
		t.Fatalf("refused facts made decisions: %+v", rd.Decisions)
	}
}

// Facts naming an instance outside the fleet are errors.
func TestFactsCheckInstances(t *testing.T) {
	c := fixtureCore(t, 2)
	for name, err := range map[string]error{
		"prefill done": c.PrefillDone(0, Request{ID: 1, PrefillInst: 5}),
		"finished":     c.Finished(0, -2, Request{ID: 1}),
		"cancel":       c.Cancel(0, Request{ID: 1, DecodeInst: 2}, StageDecode),
		"down":         c.EngineDown(0, 9, event.CauseEngineDown),
		"up":           c.EngineUp(0, 9, 1),
		"observe":      c.Observe(0, 2, Observation{}),
		"stage":        c.Cancel(0, Request{ID: 1}, Stage(7)),
	} {
		if err == nil {
			t.Errorf("%s: no error for a bad instance or stage", name)
		}
	}
}

// A request cancelled or expired at any stage releases exactly what it
// held: afterwards the fleet holds no resident work, whatever the stage.
func TestCancelReleasesResidentWork(t *testing.T) {
	for _, stage := range []Stage{StageQueued, StagePrefill, StageDecode} {
		c := fixtureCore(t, 2) // static 1P1D: instance 0 prefills, 1 decodes
		r := Request{ID: 1, InputTokens: 500}
		if err := c.Arrive(0, r); err != nil {
			t.Fatal(err)
		}
		rd := c.Ready()
		if len(rd.Decisions) != 1 || rd.Decisions[0].Kind != PlacePrefill {
			t.Fatalf("arrive: %+v", rd.Decisions)
		}
		r.PrefillInst = rd.Decisions[0].Inst
		switch stage {
		case StageQueued:
			// A queued request holds nothing: its cancel leaves the
			// counts alone.
			before := c.View().Instance(r.PrefillInst)
			if err := c.Cancel(event.Second, r, StageQueued); err != nil {
				t.Fatal(err)
			}
			if after := c.View().Instance(r.PrefillInst); after.PrefillCount != before.PrefillCount {
				t.Fatalf("queued cancel changed the prefill count %d -> %d", before.PrefillCount, after.PrefillCount)
			}
			continue
		case StagePrefill:
			if err := c.Cancel(event.Second, r, StagePrefill); err != nil {
				t.Fatal(err)
			}
		case StageDecode:
			if err := c.PrefillDone(event.Second, r); err != nil {
				t.Fatal(err)
			}
			rd = c.Ready()
			if len(rd.Decisions) != 1 || rd.Decisions[0].Kind != PlaceDecode {
				t.Fatalf("prefill done: %+v", rd.Decisions)
			}
			r.DecodeInst, r.ContextTokens = rd.Decisions[0].Inst, 520
			if err := c.Cancel(2*event.Second, r, StageDecode); err != nil {
				t.Fatal(err)
			}
		}
		for i, in := range c.View().Instances() {
			if in.PrefillCount != 0 || in.PrefillTokens != 0 || in.PrefillWork != 0 || in.DecodeCount != 0 || in.DecodeTokens != 0 {
				t.Errorf("stage %d: instance %d still holds work after cancel: %+v", stage, i, in)
			}
		}
	}
}

// An engine reported down takes no placements until it is up again, under
// a new process generation; both changes are journaled as health records.
func TestEngineDownAndUp(t *testing.T) {
	c := fixtureCore(t, 4) // static 2P2D
	c.Ready()
	if err := c.EngineDown(event.Second, 0, event.CauseEngineDown); err != nil {
		t.Fatal(err)
	}
	rd := c.Ready()
	if len(rd.Records) != 1 || rd.Records[0].Kind != event.KindHealth || rd.Records[0].Cause != event.CauseEngineDown {
		t.Fatalf("down: records %+v", rd.Records)
	}
	for id := event.RequestID(1); id <= 6; id++ {
		if err := c.Arrive(event.Second, Request{ID: id, InputTokens: 100}); err != nil {
			t.Fatal(err)
		}
		for _, d := range c.Ready().Decisions {
			if d.Inst == 0 {
				t.Fatalf("request %d placed on a down engine", id)
			}
		}
	}
	if err := c.EngineUp(2*event.Second, 0, 7); err != nil {
		t.Fatal(err)
	}
	rd = c.Ready()
	if len(rd.Records) != 1 || rd.Records[0].Cause != event.CauseEngineUp || rd.Records[0].Tokens != 7 {
		t.Fatalf("up: records %+v", rd.Records)
	}
	in := c.View().Instance(0)
	if in.Down || in.Generation != 7 || !in.Online(c.Now()) {
		t.Fatalf("after up: %+v", in)
	}
	// The same generation again is no news.
	if err := c.EngineUp(3*event.Second, 0, 7); err != nil {
		t.Fatal(err)
	}
	if rd := c.Ready(); len(rd.Records) != 0 {
		t.Fatalf("repeated up journaled again: %+v", rd.Records)
	}
}

// A move that takes time says when the engine serves again (ReadyAt), and
// the engine takes no placements before then (the cold-swap arm).
func TestMoveReadyAt(t *testing.T) {
	p := NewColdSwap()
	c, err := New(Config{Profiles: fixtureProfiles(4), SLO: event.SLO{TTFT: event.Second, TPOT: 50 * event.Millisecond}}, p)
	if err != nil {
		t.Fatal(err)
	}
	c.Ready()
	v := c.View()
	if !v.Move(0, event.RoleDecode, 30*event.Second, event.CauseOperator, "test") && v.Instance(0).Role != event.RoleDecode {
		t.Fatal("move refused")
	}
	rd := c.Ready()
	var mv *Decision
	for i := range rd.Decisions {
		if rd.Decisions[i].Kind == Move {
			mv = &rd.Decisions[i]
		}
	}
	if mv == nil || mv.ReadyAt != 30*event.Second {
		t.Fatalf("move decision %+v: expected ReadyAt 30s", rd.Decisions)
	}
	if in := v.Instance(0); in.Online(29*event.Second) || !in.Online(30*event.Second) {
		t.Fatal("the moved engine must be offline until ReadyAt and online from it")
	}
}

// Every controller's decision record is valid JSON naming the controller.
func TestDecisionPayloadsAreJSON(t *testing.T) {
	for _, arm := range []string{"adaptive", "arrow", "planner", "coldswap", "dynamo", "ray"} {
		ctrl, err := NewController(arm, 4)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{Profiles: fixtureProfiles(4), SLO: event.SLO{TTFT: event.Second, TPOT: 50 * event.Millisecond}}, ctrl)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		id := event.RequestID(0)
		for now := event.Time(0); now <= 400*event.Second; now += event.Second / 4 {
			id++
			if err := c.Arrive(now, Request{ID: id, InputTokens: 300}); err != nil {
				t.Fatal(err)
			}
			if err := c.Tick(now); err != nil {
				t.Fatal(err)
			}
			for _, r := range c.Ready().Records {
				if r.Kind != event.KindDecision {
					continue
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(r.Text), &m); err != nil {
					t.Fatalf("%s: decision %q: %v", arm, r.Text, err)
				}
				if m["controller"] == nil {
					t.Fatalf("%s: decision %q names no controller", arm, r.Text)
				}
				seen++
			}
		}
		if seen == 0 {
			t.Errorf("%s: no decision recorded in 400 s", arm)
		}
	}
}

func fixtureProfiles(n int) []timing.Profile {
	ps := make([]timing.Profile, n)
	for i := range ps {
		ps[i] = fixture
	}
	return ps
}
