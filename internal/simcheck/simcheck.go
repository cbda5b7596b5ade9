// Package simcheck holds the simulator's run invariant checker, shared by
// sim's tests (every arm core builds) and sweep's (the hindsight arms,
// oracle and phase-oracle, whose schedules only a sweep chooses). It
// imports no simulator package, so sim's own tests can use it.
package simcheck

import (
	"encoding/json"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Checker asserts the simulator's invariants on every record and token of
// a run: the clock never goes back, sequence numbers are dense, every
// offered request ends exactly once, token k never comes before token
// k-1, the first token comes after the arrival, decode never starts
// before the first token exists; and the roles: a prompt is placed on an
// engine whose role then takes prompts (prefill or mixed), a burst-spilled
// prompt on a decode engine, and a decode leg on an engine whose role then
// takes decode (decode or mixed). Roles are labels for new placements only
// (Arrow §5.2, docs/sim.md "Roles are labels"): a request resident on an
// engine finishes there whatever the engine's role becomes, so a decode
// leg placed where its prompt ran (no KV moves: Inst == Peer) is allowed
// on an engine that was moved away from a decode-taking role after the
// prompt was placed there; never on one that held only prefill since.
// And a pool with no engine left falls back to the fleet (Arrow §5.5;
// core.coverRole, core's argmin): a leg placed outside its phase's roles
// is allowed only while no engine holding a role that takes that phase is
// up (health records) and not avoided by the request (a re-placed request
// avoids the engine its failed leg ran on until its decode is placed: a
// retry decision record).
//
// Feed it every record (it is an event.Recorder) and every token (Token,
// sim.Config.TokenHook), then call Finish.
type Checker struct {
	t      testing.TB
	last   event.Time
	seq    uint64
	Fold   event.Fold
	tokens map[event.RequestID][]event.Time
	first  map[event.RequestID]event.Time
	errs   int
	// Moves counts role moves (not opening roles) per instant.
	Moves map[event.Time]int
	// Preempts counts KindPreempt records.
	Preempts int
	// Spilled counts prompts admitted with cause spilled.
	Spilled int
	// roles is each engine's role now; prefillOn is where each request
	// not yet decoding had its prompt placed, and stayOK whether that
	// engine took decode then or has held a decode-taking role since
	// (the prompt's KV may then stay there for decode).
	roles     map[event.Instance]event.Role
	prefillOn map[event.RequestID]event.Instance
	stayOK    map[event.RequestID]bool
	// Stays counts decode legs placed where their prompt ran on an engine
	// whose role no longer takes decode (resident work finishing where it
	// is, Arrow §5.2).
	Stays int
	// SkipTokens leaves out the token checks (a driver without a token
	// hook).
	SkipTokens bool
	// down is each engine that a health record said went down (until one
	// says it is up); avoid the engine each re-placed request avoids.
	down  map[event.Instance]bool
	avoid map[event.RequestID]event.Instance
	// Fallbacks counts legs placed outside their phase's roles because no
	// engine of those roles was up (the pool fell back to the fleet).
	Fallbacks int
}

// New returns a checker reporting to t.
func New(t testing.TB) *Checker {
	return &Checker{t: t, tokens: map[event.RequestID][]event.Time{}, first: map[event.RequestID]event.Time{},
		Moves: map[event.Time]int{}, roles: map[event.Instance]event.Role{},
		prefillOn: map[event.RequestID]event.Instance{}, stayOK: map[event.RequestID]bool{},
		down: map[event.Instance]bool{}, avoid: map[event.RequestID]event.Instance{}}
}

// Errs is how many invariant violations the checker found.
func (c *Checker) Errs() int { return c.errs }

func (c *Checker) errorf(format string, args ...any) {
	c.errs++
	if c.errs <= 10 {
		c.t.Errorf(format, args...)
	}
}

func takesPrompts(r event.Role) bool { return r == event.RolePrefill || r == event.RoleMixed }
func takesDecode(r event.Role) bool  { return r == event.RoleDecode || r == event.RoleMixed }

// fellBack reports whether no engine whose role takes a phase (takes) is
// up and not avoided by req: the phase's pool is empty, and core places
// the leg on any engine up (Arrow §5.5).
func (c *Checker) fellBack(req event.RequestID, takes func(event.Role) bool) bool {
	a, avoided := c.avoid[req]
	for in, ro := range c.roles {
		if takes(ro) && !c.down[in] && (!avoided || in != a) {
			return false
		}
	}
	return true
}

// Record implements event.Recorder.
func (c *Checker) Record(r *event.Record) {
	if r.Seq != c.seq+1 {
		c.errorf("record seq %d after %d", r.Seq, c.seq)
	}
	c.seq = r.Seq
	if r.At < c.last {
		c.errorf("clock went back: %s at %v after %v", r.Kind, r.At, c.last)
	}
	c.last = r.At
	switch r.Kind {
	case event.KindRoleMove:
		c.roles[r.Inst] = r.To
		if !r.Opening() {
			c.Moves[r.At]++
		}
		if takesDecode(r.To) {
			// Prompts resident here may decode here (their KV is here).
			for req, in := range c.prefillOn {
				if in == r.Inst {
					c.stayOK[req] = true
				}
			}
		}
	case event.KindAdmit:
		ro := c.roles[r.Inst]
		if c.down[r.Inst] {
			c.errorf("request %d: prompt placed on %d at %v while it is down (failed or cordoned)", r.Req, r.Inst, r.At)
		}
		switch {
		case r.Cause == event.CauseSpilled:
			// Burst spill places a prompt only on a decode engine, which
			// then decodes it.
			c.Spilled++
			if ro != event.RoleDecode {
				c.errorf("request %d: prompt spilled to %d in role %s at %v: expected a decode engine", r.Req, r.Inst, ro, r.At)
			}
		case !takesPrompts(ro) && c.fellBack(r.Req, takesPrompts):
			c.Fallbacks++
		case !takesPrompts(ro):
			c.errorf("request %d: prompt placed on %d in role %s at %v: expected a prefill or mixed engine", r.Req, r.Inst, ro, r.At)
		}
		c.prefillOn[r.Req] = r.Inst
		c.stayOK[r.Req] = takesDecode(ro)
		// A re-placed request's decode waits for its new prompt's first
		// token.
		delete(c.first, r.Req)
	case event.KindPreempt:
		c.Preempts++
		if f, ok := c.first[r.Req]; !ok || r.At < f {
			c.errorf("request %d: preempted at %v before its first token", r.Req, r.At)
		}
	case event.KindPrefillDone:
		c.first[r.Req] = r.At
	case event.KindDecodeStart:
		if f, ok := c.first[r.Req]; !ok || r.At < f {
			c.errorf("request %d: decode placed at %v before its first token (%v, %v)", r.Req, r.At, f, ok)
		}
		if c.down[r.Inst] && r.Inst != r.Peer {
			// (A request decoding where its prompt ran stays there.)
			c.errorf("request %d: decode placed on %d at %v while it is down (failed or cordoned)", r.Req, r.Inst, r.At)
		}
		if ro := c.roles[r.Inst]; !takesDecode(ro) {
			switch {
			case r.Inst == r.Peer && (c.stayOK[r.Req] || r.Cause == event.CauseWhole):
				// (Whole: it asked for its prompt's logprobs, which only
				// the engine that computed the prompt has.)
				c.Stays++
			case c.fellBack(r.Req, takesDecode):
				c.Fallbacks++
			default:
				c.errorf("request %d: decode placed on %d (prompt on %d) in role %s at %v: expected a decode or mixed engine", r.Req, r.Inst, r.Peer, ro, r.At)
			}
		}
		delete(c.prefillOn, r.Req)
		delete(c.stayOK, r.Req)
		delete(c.avoid, r.Req)
	case event.KindHealth:
		// "down" (a failure, or an operator's cordon) or "up" (answering
		// again, or returned to service).
		c.down[r.Inst] = r.Text != "up"
	case event.KindDecision:
		var d struct {
			Retry event.RequestID `json:"retry"`
			From  event.Instance  `json:"from"`
		}
		if json.Unmarshal([]byte(r.Text), &d) == nil && d.Retry > 0 {
			c.avoid[d.Retry] = d.From
		}
	}
	if r.Kind.Terminal() {
		delete(c.prefillOn, r.Req)
		delete(c.stayOK, r.Req)
		delete(c.avoid, r.Req)
	}
	c.Fold.Record(r)
}

// Token is sim.Config.TokenHook: token k of req at at.
func (c *Checker) Token(req event.RequestID, k int, at event.Time) {
	ts := c.tokens[req]
	if k != len(ts)+1 {
		c.errorf("request %d: token %d reported after %d tokens", req, k, len(ts))
	}
	if len(ts) > 0 && at < ts[len(ts)-1] {
		c.errorf("request %d: token %d at %v before token %d at %v", req, k, at, k-1, ts[len(ts)-1])
	}
	c.tokens[req] = append(ts, at)
}

// Offered is one offered request as the trace gives it: its scheduled
// arrival and the output tokens it ends with when it finishes (its
// answer, capped).
type Offered struct {
	At     event.Time
	Output int
}

// OfferedAt is a request arriving at at whose answer has output tokens,
// cut at outputCap when that is set (> 0): what a finished request ends
// with.
func OfferedAt(at event.Time, output, outputCap int) Offered {
	if outputCap > 0 && output > outputCap {
		output = outputCap
	}
	return Offered{At: at, Output: output}
}

// Outcomes is what the driver counted.
type Outcomes struct {
	Offered, Finished, Refused, Failed, Expired, Preemptions int
}

// Finish checks the run as a whole against the requests offered, in
// order, and the driver's counts.
func (c *Checker) Finish(reqs []Offered, st Outcomes) {
	if err := c.Fold.Err(); err != nil {
		c.errorf("life cycle: %v", err)
	}
	rows := c.Fold.Rows()
	if len(rows) != len(reqs) {
		c.errorf("%d requests folded, %d offered", len(rows), len(reqs))
	}
	if c.Preempts != st.Preemptions {
		c.errorf("%d preempt records, %d preemptions counted", c.Preempts, st.Preemptions)
	}
	if got := st.Finished + st.Refused + st.Failed + st.Expired; got != st.Offered || st.Offered != len(reqs) {
		c.errorf("outcomes %d finished + %d refused + %d failed + %d expired, %d offered, %d in the trace", st.Finished, st.Refused, st.Failed, st.Expired, st.Offered, len(reqs))
	}
	for i := range rows {
		if i >= len(reqs) {
			break
		}
		r := &rows[i]
		if r.Terminal == event.KindNone {
			c.errorf("request %d never ended", r.Req)
		}
		if r.Scheduled != reqs[i].At || r.Arrival < r.Scheduled {
			c.errorf("request %d: scheduled %v arrival %v, trace says %v", r.Req, r.Scheduled, r.Arrival, reqs[i].At)
		}
		if r.FirstToken != event.Never && r.TTFT() <= 0 {
			c.errorf("request %d: TTFT %v, want > 0", r.Req, r.TTFT())
		}
		if r.Terminal == event.KindFinish {
			if !c.SkipTokens {
				ts := c.tokens[r.Req]
				if int64(len(ts)) != r.OutputTokens {
					c.errorf("request %d: %d tokens seen, finish says %d", r.Req, len(ts), r.OutputTokens)
				} else if ts[0] != r.FirstToken || ts[len(ts)-1] != r.End {
					c.errorf("request %d: tokens span %v..%v, records say %v..%v", r.Req, ts[0], ts[len(ts)-1], r.FirstToken, r.End)
				}
			}
			if int(r.OutputTokens) != reqs[i].Output {
				c.errorf("request %d: %d tokens, want %d", r.Req, r.OutputTokens, reqs[i].Output)
			}
		}
	}
}
