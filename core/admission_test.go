package core

import (
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

func queueCore(t *testing.T, adm Admission) *Core {
	t.Helper()
	adm.Mode = AdmitQueue
	c, err := New(Config{Profiles: fixtureProfiles(2), SLO: event.SLO{TTFT: event.Second, TPOT: 50 * event.Millisecond},
		Admission: adm}, &Static{Prefill: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.Ready()
	return c
}

// The fixture prices a prompt of n tokens at 1e-8·n² + 1e-3·n seconds: 400
// tokens cost 0.4016 s of the 1 s TTFT budget.
func kinds(ds []Decision) map[DecisionKind][]event.RequestID {
	m := map[DecisionKind][]event.RequestID{}
	for _, d := range ds {
		m[d.Kind] = append(m[d.Kind], d.Req)
	}
	return m
}

// Under the queue gate an arrival whose priced TTFT fits is placed; the
// next ones wait in arrival order (none jumps the queue), and they are
// placed as resident prefill work finishes.
func TestAdmissionQueuesAndDrains(t *testing.T) {
	c := queueCore(t, Admission{})
	for id := event.RequestID(1); id <= 4; id++ {
		if err := c.Arrive(0, Request{ID: id, InputTokens: 400}); err != nil {
			t.Fatal(err)
		}
	}
	k := kinds(c.Ready().Decisions)
	// 0.40 + 0.40 fits 1 s; a third would price 1.2 s.
	if len(k[PlacePrefill]) != 2 || len(k[Queue]) != 2 || k[Queue][0] != 3 {
		t.Fatalf("decisions %v: expected 2 placed, 3 and 4 queued", k)
	}
	// A small prompt that would fit still waits behind the queue.
	if err := c.Arrive(event.Millisecond, Request{ID: 5, InputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	if k := kinds(c.Ready().Decisions); len(k[Queue]) != 1 {
		t.Fatalf("decisions %v: expected request 5 queued behind 3 and 4", k)
	}
	// Request 1's prefill finishes: 3 fits now, 4 does not yet.
	if err := c.PrefillDone(400*event.Millisecond, Request{ID: 1, InputTokens: 400, PrefillInst: 0}); err != nil {
		t.Fatal(err)
	}
	k = kinds(c.Ready().Decisions)
	if len(k[PlacePrefill]) != 1 || k[PlacePrefill][0] != 3 {
		t.Fatalf("decisions %v: expected request 3 placed from the queue", k)
	}
}

// A queued request whose deadline passes expires (queue_timeout); the core
// asks for a tick at the head's deadline.
func TestAdmissionDeadline(t *testing.T) {
	c := queueCore(t, Admission{Deadline: 500 * event.Millisecond})
	for id := event.RequestID(1); id <= 3; id++ {
		c.Arrive(0, Request{ID: id, InputTokens: 400})
	}
	rd := c.Ready()
	if rd.NextTick != 500*event.Millisecond {
		t.Fatalf("next tick %v: expected the queue head's deadline 500ms", rd.NextTick)
	}
	if err := c.Tick(500 * event.Millisecond); err != nil {
		t.Fatal(err)
	}
	ds := c.Ready().Decisions
	if len(ds) != 1 || ds[0].Kind != Expire || ds[0].Req != 3 || ds[0].Cause != event.CauseQueueTimeout {
		t.Fatalf("decisions %+v: expected request 3 expired (queue_timeout)", ds)
	}
}

// A prompt whose own prefill alone breaks the budget is refused at once
// (cause prompt): no queue drains that. A full queue refuses (overload).
// A cancelled waiter leaves the queue.
func TestAdmissionRefusals(t *testing.T) {
	c := queueCore(t, Admission{Depth: 1})
	c.Arrive(0, Request{ID: 1, InputTokens: 2000}) // 0.04 + 2.0 s > 1 s
	if ds := c.Ready().Decisions; len(ds) != 1 || ds[0].Kind != Refuse || ds[0].Cause != event.CausePrompt {
		t.Fatalf("decisions %+v: expected a prompt refusal", ds)
	}
	c.Arrive(0, Request{ID: 2, InputTokens: 400})
	c.Arrive(0, Request{ID: 3, InputTokens: 400})
	c.Arrive(0, Request{ID: 4, InputTokens: 400}) // queued (depth 1)
	c.Arrive(0, Request{ID: 5, InputTokens: 400}) // queue full
	k := kinds(c.Ready().Decisions)
	if len(k[Queue]) != 1 || len(k[Refuse]) != 1 || k[Refuse][0] != 5 {
		t.Fatalf("decisions %v: expected 4 queued and 5 refused", k)
	}
	if err := c.Cancel(event.Millisecond, Request{ID: 4}, StageQueued); err != nil {
		t.Fatal(err)
	}
	c.PrefillDone(2*event.Millisecond, Request{ID: 2, InputTokens: 400, PrefillInst: 0})
	if k := kinds(c.Ready().Decisions); len(k[PlacePrefill]) != 0 {
		t.Fatalf("decisions %v: the cancelled waiter was placed", k)
	}
}

// The open gate (the default) never queues.
func TestAdmissionOpen(t *testing.T) {
	c := fixtureCore(t, 2)
	for id := event.RequestID(1); id <= 10; id++ {
		c.Arrive(0, Request{ID: id, InputTokens: 2000})
	}
	if k := kinds(c.Ready().Decisions); len(k[PlacePrefill]) != 10 {
		t.Fatalf("decisions %v: the open gate placed fewer than 10", k)
	}
}
