package core

import (
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

func faultCore(t *testing.T, arm string, n int) *Core {
	t.Helper()
	ctrl, err := NewController(arm, n)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Profiles: fixtureProfiles(n), SLO: event.SLO{TTFT: event.Second, TPOT: 50 * event.Millisecond}}, ctrl)
	if err != nil {
		t.Fatal(err)
	}
	c.Ready()
	return c
}

// downView is a fleet of n engines under arm with the engines down taken
// down at time 1, its view's clock at 2, for moves tried directly.
func downView(t *testing.T, arm string, n int, down ...event.Instance) *View {
	t.Helper()
	c := faultCore(t, arm, n)
	for _, i := range down {
		if err := c.EngineDown(1, i, event.CauseEngineDown); err != nil {
			t.Fatal(err)
		}
	}
	c.Ready()
	v := c.View()
	v.now = 2
	return v
}

// The last online engine of a role going down moves another engine into
// the role (cause engine_down) when the other phase can spare one, and
// journals why not otherwise; with nothing online, arrivals fail
// unavailable instead of being sent to a dead engine.
func TestCoverRole(t *testing.T) {
	c := faultCore(t, "static:1P3D", 4)
	if err := c.EngineDown(1, 0, event.CauseEngineDown); err != nil {
		t.Fatal(err)
	}
	rd := c.Ready()
	moved := false
	for _, r := range rd.Records {
		if r.Kind == event.KindRoleMove && r.To == event.RolePrefill && r.Cause == event.CauseEngineDown {
			moved = true
		}
	}
	if !moved || c.View().Count(event.RolePrefill) != 2 {
		t.Fatalf("records %+v: expected a decode engine moved to prefill", rd.Records)
	}
	// 1P1D: nothing can move; the decision says so.
	c = faultCore(t, "static:1P1D", 2)
	c.EngineDown(1, 1, event.CauseEngineDown)
	rd = c.Ready()
	if len(rd.Records) != 2 || !strings.Contains(rd.Records[1].Text, "serve both phases") {
		t.Fatalf("records %+v: expected the down record and a cover decision", rd.Records)
	}
	c.EngineDown(2, 0, event.CauseEngineDown)
	c.Ready()
	c.Arrive(3, Request{ID: 1, InputTokens: 100})
	rd = c.Ready()
	if len(rd.Decisions) != 1 || rd.Decisions[0].Kind != Fail || rd.Decisions[0].Cause != event.CauseUnavailable {
		t.Fatalf("decisions %+v: expected the arrival failed unavailable with every engine down", rd.Decisions)
	}
}

// The engine moved to cover a down engine's role goes back when that
// engine returns, so a static split is its own again after a fault or a
// maintenance window (cause engine_up); not when the donor has gone down
// itself or been moved since, which leaves its role to whoever moved it.
func TestUncover(t *testing.T) {
	moves := func(rs []event.Record) []event.Record {
		var out []event.Record
		for _, r := range rs {
			if r.Kind == event.KindRoleMove {
				out = append(out, r)
			}
		}
		return out
	}
	c := faultCore(t, "static:1P3D", 4)
	c.EngineDown(1, 0, event.CauseEngineDown)
	m := moves(c.Ready().Records)
	if len(m) != 1 || m[0].To != event.RolePrefill {
		t.Fatalf("moves %+v: expected one decode engine moved to prefill", m)
	}
	donor := m[0].Inst
	if err := c.EngineUp(5, 0, 1); err != nil {
		t.Fatal(err)
	}
	rd := c.Ready()
	m = moves(rd.Records)
	if len(m) != 1 || m[0].Inst != donor || m[0].From != event.RolePrefill || m[0].To != event.RoleDecode || m[0].Cause != event.CauseEngineUp {
		t.Fatalf("moves %+v: expected instance %d back to decode, cause engine_up", m, donor)
	}
	if !strings.Contains(m[0].Text, "instance 0 is back") {
		t.Fatalf("move text %q: expected it to name the engine back", m[0].Text)
	}
	if c.View().Count(event.RolePrefill) != 1 || c.View().Count(event.RoleDecode) != 3 {
		t.Fatal("the split is not 1P3D again")
	}
	gotMove := false
	for _, d := range rd.Decisions {
		gotMove = gotMove || (d.Kind == Move && d.Inst == donor && d.To == event.RoleDecode)
	}
	if !gotMove {
		t.Fatalf("decisions %+v: expected the driver asked to move instance %d", rd.Decisions, donor)
	}
	// A second return (a new generation) moves nothing: the cover is spent.
	c.EngineUp(6, 0, 2)
	if m := moves(c.Ready().Records); len(m) != 0 {
		t.Fatalf("moves %+v on a second return: expected none", m)
	}

	// The donor went down too (covered in turn): instance 0 returning
	// leaves the down donor's role alone; the donor returning sends its
	// own cover back, so one extra prefill engine remains.
	c = faultCore(t, "static:1P3D", 4)
	c.EngineDown(1, 0, event.CauseEngineDown)
	donor = moves(c.Ready().Records)[0].Inst
	c.EngineDown(2, donor, event.CauseEngineDown)
	m = moves(c.Ready().Records)
	if len(m) != 1 || m[0].To != event.RolePrefill {
		t.Fatalf("moves %+v: expected the down donor covered by another decode engine", m)
	}
	second := m[0].Inst
	c.EngineUp(3, 0, 1)
	if m := moves(c.Ready().Records); len(m) != 0 {
		t.Fatalf("moves %+v: expected none while the donor is down", m)
	}
	c.EngineUp(4, donor, 1)
	m = moves(c.Ready().Records)
	if len(m) != 1 || m[0].Inst != second || m[0].To != event.RoleDecode {
		t.Fatalf("moves %+v: expected instance %d back to decode", m, second)
	}

	// SetCover (a resumed router's) wants a down engine and a donor in
	// its role.
	if err := c.SetCover(0, second); err == nil || !strings.Contains(err.Error(), "expected a down engine") {
		t.Errorf("set cover on an engine up: %v", err)
	}

	// The down engine itself moved out of the covered role while down
	// (the dynamo and ray models take idle engines first): the pairing is
	// no longer one (Covers says so), and its return moves nothing.
	c = faultCore(t, "static:1P3D", 4)
	c.EngineDown(1, 0, event.CauseEngineDown)
	donor = moves(c.Ready().Records)[0].Inst
	if got, ok := c.View().Covers(donor); !ok || got != 0 {
		t.Fatalf("Covers(%d) = %d %t: expected instance 0", donor, got, ok)
	}
	v := c.View()
	v.now = 2
	if !v.Move(0, event.RoleDecode, 2, event.CauseController, "test") {
		t.Fatal("refused moving the down engine")
	}
	c.Ready()
	if got, ok := c.View().Covers(donor); ok {
		t.Errorf("Covers(%d) = %d after the down engine left the role: expected none", donor, got)
	}
	c.EngineUp(3, 0, 1)
	if m := moves(c.Ready().Records); len(m) != 0 {
		t.Fatalf("moves %+v: expected none for an engine moved while down", m)
	}

	// Moved since by someone else (here to mixed, which still serves
	// prefill): its role is theirs; nothing moves on the return.
	c = faultCore(t, "static:1P3D", 4)
	c.EngineDown(1, 0, event.CauseEngineDown)
	donor = moves(c.Ready().Records)[0].Inst
	v = c.View()
	v.now = 2
	if !v.Move(donor, event.RoleMixed, 2, event.CauseController, "test") {
		t.Fatal("refused the move to mixed")
	}
	c.Ready()
	c.EngineUp(3, 0, 1)
	if m := moves(c.Ready().Records); len(m) != 0 {
		t.Fatalf("moves %+v: expected none for a donor moved since", m)
	}
}

// Replace releases the failed leg, journals a retry decision and places a
// fresh prefill elsewhere; the decode that follows avoids the failed
// engine too; with no other engine the request fails unavailable.
func TestReplace(t *testing.T) {
	c := faultCore(t, "static:2P2D", 4)
	c.Arrive(1, Request{ID: 1, InputTokens: 100})
	rd := c.Ready()
	first := rd.Decisions[0].Inst
	if err := c.Replace(2, Request{ID: 1, InputTokens: 100, PrefillInst: first}, StagePrefill, first, event.CauseBadGateway); err != nil {
		t.Fatal(err)
	}
	rd = c.Ready()
	if len(rd.Records) != 1 || !strings.Contains(rd.Records[0].Text, `"retry":1`) || len(rd.Decisions) != 1 ||
		rd.Decisions[0].Kind != PlacePrefill || rd.Decisions[0].Inst == first {
		t.Fatalf("records %+v decisions %+v: expected a retry decision and a prefill elsewhere", rd.Records, rd.Decisions)
	}
	second := rd.Decisions[0].Inst
	if in := c.View().Instance(first); in.PrefillCount != 0 {
		t.Fatalf("the failed engine still holds %d prefills", in.PrefillCount)
	}
	c.PrefillDone(3, Request{ID: 1, InputTokens: 100, PrefillInst: second})
	rd = c.Ready()
	dec := rd.Decisions[0].Inst
	// The decode fails before its first byte: a fresh prefill, and the
	// next decode avoids dec.
	c.Replace(4, Request{ID: 1, InputTokens: 100, PrefillInst: second, DecodeInst: dec, ContextTokens: 101}, StageDecode, dec, event.CauseEngineDown)
	rd = c.Ready()
	p := rd.Decisions[0].Inst
	c.PrefillDone(5, Request{ID: 1, InputTokens: 100, PrefillInst: p})
	rd = c.Ready()
	if rd.Decisions[0].Kind != PlaceDecode || rd.Decisions[0].Inst == dec {
		t.Fatalf("decisions %+v: expected the decode placed away from %d", rd.Decisions, dec)
	}
	// One engine, failed: nowhere else to go.
	c = faultCore(t, "aggregated", 1)
	c.Arrive(1, Request{ID: 1, InputTokens: 10})
	c.Ready()
	c.Replace(2, Request{ID: 1, InputTokens: 10, PrefillInst: 0}, StagePrefill, 0, event.CauseEngineError)
	rd = c.Ready()
	if len(rd.Decisions) != 1 || rd.Decisions[0].Kind != Fail || rd.Decisions[0].Cause != event.CauseUnavailable {
		t.Fatalf("decisions %+v: expected a failure, unavailable", rd.Decisions)
	}
}

// While engines are down, no controller move takes the last online
// engine of a role: the split it scores counts the down engines in their
// roles, so it would leave the role with none that answers (a review saw
// adaptive move the one online decode engine, the cover of two down ones,
// back to prefill). With every engine up the same move is taken.
func TestNoMoveEmptiesARole(t *testing.T) {
	c := faultCore(t, "static:2P2D", 4)
	c.EngineDown(1, 2, event.CauseEngineDown)
	c.EngineDown(2, 3, event.CauseEngineDown)
	c.Ready()
	v := c.View()
	cover := event.NoInstance
	for i := 0; i < 2; i++ {
		if v.inst[i].Role == event.RoleDecode {
			cover = event.Instance(i)
		}
	}
	if cover == event.NoInstance {
		t.Fatal("no prefill engine covered the down decode engines")
	}
	v.now = 3
	if v.Move(cover, event.RolePrefill, 3, event.CauseController, "test") {
		t.Fatal("moved the last online decode engine while both others are down")
	}
	if n := len(c.Ready().Records); n != 0 {
		t.Fatalf("%d records for a move refused: expected none", n)
	}
	// Once one decode engine is back, the cover may go.
	c.EngineUp(4, 2, 1)
	c.Ready()
	v.now = 5
	if !v.Move(cover, event.RolePrefill, 5, event.CauseController, "test") {
		t.Fatal("refused a move with another decode engine online")
	}
}

// The guard counts mixed engines as serving both phases, and lets an
// engine go to mixed, which still serves its phase.
func TestNoMoveEmptiesARoleMixed(t *testing.T) {
	v := downView(t, "static:2P2D", 4, 3)
	// Engine 2, the one decode engine online: to mixed is allowed.
	if !v.Move(2, event.RoleMixed, 2, event.CauseController, "test") {
		t.Fatal("refused a move to mixed, which still serves decode")
	}
	// Now engine 2 (mixed) serves decode: engine 0 may leave prefill for
	// decode as long as engine 1 still serves prefill.
	if !v.Move(0, event.RoleDecode, 2, event.CauseController, "test") {
		t.Fatal("refused a move with another prefill engine online")
	}
	// Engine 1 is the last prefill engine but mixed engine 2 serves
	// prefill too: allowed.
	if !v.Move(1, event.RoleDecode, 2, event.CauseController, "test") {
		t.Fatal("refused a move while a mixed engine serves the phase")
	}
}

// An engine leaving mixed serving is held to the guard for each phase it
// stops serving: all-mixed with two engines down, the two online ones may
// not both go to prefill (decode would have no engine up).
func TestNoMoveEmptiesARoleFromMixed(t *testing.T) {
	v := downView(t, "aggregated", 4, 2, 3)
	if !v.Move(0, event.RolePrefill, 2, event.CauseController, "test") {
		t.Fatal("refused a move while the other mixed engine serves decode")
	}
	if v.Move(1, event.RolePrefill, 2, event.CauseController, "test") {
		t.Fatal("moved the last online engine serving decode to prefill")
	}
	if v.inst[1].Role != event.RoleMixed {
		t.Fatal("engine 1 is no longer mixed")
	}
}
