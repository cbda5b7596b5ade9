package core

import (
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// AdmissionMode says whether the core gates arrivals on their priced TTFT.
type AdmissionMode uint8

// Admission modes.
const (
	// AdmitOpen places every arrival at once (the controller may still
	// refuse): work waits in the engines' queues. The default.
	AdmitOpen AdmissionMode = iota
	// AdmitQueue prices each arrival's TTFT on the instance the controller
	// picks (the resident prefill work there plus its own prefill, Arrow
	// §5.3's cost): within the budget it is placed; a prompt whose own
	// prefill alone breaks the budget is refused (cause prompt); otherwise
	// it waits, first come first served, in the core's admission queue
	// until its price fits or its deadline passes (expired, cause
	// queue_timeout).
	AdmitQueue
)

// Admission configures the core's admission gate.
type Admission struct {
	Mode AdmissionMode
	// Margin is the hysteresis on the budget: a placement is admitted when
	// its priced TTFT is at most TTFT SLO × (1 + Margin). Default 0.
	Margin float64
	// Deadline is the longest a request waits in the admission queue
	// (default: the TTFT SLO, past which it cannot meet the SLO anyway).
	Deadline event.Time
	// Depth bounds the queue; an arrival that finds it full is refused
	// (cause overload). 0 means no bound.
	Depth int
}

// ParseAdmissionMode reads "open" or "queue".
func ParseAdmissionMode(s string) (AdmissionMode, error) {
	switch s {
	case "", "open":
		return AdmitOpen, nil
	case "queue":
		return AdmitQueue, nil
	}
	return AdmitOpen, fmt.Errorf("admission %q: expected open or queue", s)
}

func (m AdmissionMode) String() string {
	if m == AdmitQueue {
		return "queue"
	}
	return "open"
}

// waiting is one request in the admission queue.
type waiting struct {
	r        Request
	deadline event.Time
}

// admission is the core's gate state.
type admission struct {
	cfg    Admission
	budget float64 // seconds
	queue  []waiting
	head   int
}

func (a *admission) len() int { return len(a.queue) - a.head }

func (a *admission) pop() {
	a.queue[a.head] = waiting{}
	a.head++
	if a.head > 1024 && 2*a.head > len(a.queue) {
		n := copy(a.queue, a.queue[a.head:])
		a.queue, a.head = a.queue[:n], 0
	}
}

// remove drops id from the queue; it reports whether it was there.
func (a *admission) remove(id event.RequestID) bool {
	for i := a.head; i < len(a.queue); i++ {
		if a.queue[i].r.ID == id {
			copy(a.queue[i:], a.queue[i+1:])
			a.queue[len(a.queue)-1] = waiting{}
			a.queue = a.queue[:len(a.queue)-1]
			return true
		}
	}
	return false
}

// nextDeadline is the queue head's deadline, or event.Never.
func (a *admission) nextDeadline() event.Time {
	if a.len() == 0 {
		return event.Never
	}
	return a.queue[a.head].deadline
}

// price is r's priced TTFT on inst (seconds): the resident prefill work
// there plus its own prefill net of a cached prefix, and its own part.
func (v *View) price(inst event.Instance, r Request) (priced, own float64) {
	in := &v.inst[inst]
	own = in.Profile.PrefillSpan(v.cachedOn(inst, r), r.InputTokens)
	return in.PrefillWork + own, own
}
