package core

import (
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// TestOpeningResumesASplit checks Config.Opening: the given roles replace
// the controller's opening split and are journaled as the opening roles,
// and a wrong length or role is refused.
func TestOpeningResumesASplit(t *testing.T) {
	profiles := []timing.Profile{fixture, fixture, fixture, fixture}
	slo := event.SLO{TTFT: event.Second, TPOT: event.Second / 10}
	want := []event.Role{event.RolePrefill, event.RolePrefill, event.RolePrefill, event.RoleDecode}
	c, err := New(Config{Profiles: profiles, SLO: slo, Opening: want}, &Adaptive{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.View().resumed {
		t.Error("adaptive on resumed roles: not marked resumed (its opening answer would apply)")
	}
	rd := c.Ready()
	for i, r := range want {
		if got := c.View().Instance(event.Instance(i)).Role; got != r {
			t.Errorf("instance %d: role %v, want %v", i, got, r)
		}
		if rec := rd.Records[i]; !rec.Opening() || rec.To != r {
			t.Errorf("opening record %d: %+v", i, rec)
		}
	}
	// Without Opening the controller chooses (adaptive: an even split).
	c, _ = New(Config{Profiles: profiles, SLO: slo}, &Adaptive{})
	if c.View().resumed {
		t.Error("adaptive on its own opening split: marked resumed")
	}
	if c.View().Count(event.RolePrefill) != 2 {
		t.Errorf("default opening: %d prefill, want 2", c.View().Count(event.RolePrefill))
	}
	if _, err := New(Config{Profiles: profiles, SLO: slo, Opening: want[:3]}, &Adaptive{}); err == nil {
		t.Error("3 roles for 4 instances accepted")
	}
	if _, err := New(Config{Profiles: profiles, SLO: slo, Opening: []event.Role{0, 1, 2, 9}}, &Adaptive{}); err == nil {
		t.Error("role 9 accepted")
	}
}
