package core

import (
	"fmt"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Engine faults in the core's terms. The driver reports an engine down
// (EngineDown) or back under a process generation (EngineUp), and asks
// for a request whose leg failed to be placed again (Replace). The core
// never places a leg on an engine it knows is down, never leaves a role
// empty without saying so, and journals each of these as a record.

// RetryDecision is the payload of the decision record Replace journals.
type RetryDecision struct {
	// Retry is the request placed again.
	Retry event.RequestID `json:"retry"`
	// Stage is the leg that failed: "prefill" or "decode" (a decode leg
	// is re-placed with a fresh prefill: its KV may be gone).
	Stage string `json:"stage"`
	// From is the engine whose leg failed; the new prefill avoids it.
	From event.Instance `json:"from"`
	// Cause is why the leg failed.
	Cause string `json:"cause"`
}

// CoverDecision is the payload of the decision record EngineDown journals
// when the engine that went down was the last online one of its role and
// no other engine could be moved into it.
type CoverDecision struct {
	Down event.Instance `json:"down"`
	Role string         `json:"role"`
	// Why says what happens instead.
	Why string `json:"why"`
}

// Replace records that r's leg at stage (StagePrefill or StageDecode) on
// from failed with cause, and places r's prefill again: the core releases
// what r held there and admits r anew as if from were down, through the
// admission gate (it may queue). A decode stage is re-placed with a fresh
// prefill, because the driver cannot know whether the KV it pointed at
// still exists. The decode that follows avoids from as well. When no
// other engine can take it, r fails with CauseUnavailable.
func (c *Core) Replace(now event.Time, r Request, stage Stage, from event.Instance, cause event.Cause) error {
	f, err := c.instance("replace", from)
	if err != nil {
		return err
	}
	var held *Instance
	switch stage {
	case StagePrefill:
		held, err = c.instance("replace at prefill", r.PrefillInst)
	case StageDecode:
		held, err = c.instance("replace at decode", r.DecodeInst)
	default:
		err = fmt.Errorf("core: replace: stage %d: expected prefill or decode", stage)
	}
	if err != nil {
		return err
	}
	if err := c.advance(now); err != nil {
		return err
	}
	name := "prefill"
	if stage == StagePrefill {
		held.releasePrefill(now, r)
		c.v.touch(r.PrefillInst)
	} else {
		held.releaseDecode(r)
		c.v.touch(r.DecodeInst)
		name = "decode"
	}
	c.v.Decide(RetryDecision{Retry: r.ID, Stage: name, From: from, Cause: cause.String()})
	if c.avoid == nil {
		c.avoid = map[event.RequestID]event.Instance{}
	}
	c.avoid[r.ID] = from
	r.PrefillInst, r.DecodeInst, r.ContextTokens = event.NoInstance, event.NoInstance, 0
	down := f.Down
	c.v.setDown(from, true)
	c.admit(now, r, false)
	c.v.setDown(from, down)
	c.drain(now)
	return nil
}

// placeableDown reports whether inst is down, counting the engine a
// re-placed request avoids as down.
func (c *Core) placeableDown(inst event.Instance, id event.RequestID) bool {
	if c.v.inst[inst].Down {
		return true
	}
	a, ok := c.avoid[id]
	return ok && a == inst
}

// forget drops what the core remembers of r's faults once r is done.
func (c *Core) forget(id event.RequestID) {
	if c.avoid != nil {
		delete(c.avoid, id)
	}
}

// coverRole keeps a role served when inst, just marked down, was its last
// online engine: it moves the least-loaded unpinned online engine of the
// other phase into the role (cause engine_down), provided that leaves the
// other phase an online engine, and remembers the move for uncover. When
// none can move it journals why (CoverDecision): the remaining online
// engines serve both phases (the pool falls back to the fleet, Arrow
// §5.5), or, with none online, requests fail with CauseUnavailable.
func (c *Core) coverRole(inst event.Instance) {
	v := &c.v
	role, needed, donor, others := v.cover(inst)
	if !needed {
		return
	}
	if donor != event.NoInstance {
		from := v.inst[donor].Role
		if v.Move(donor, role, v.now, event.CauseEngineDown,
			fmt.Sprintf("instance %d, the last online %s engine, is down", inst, role)) {
			v.inst[inst].cover = coverMove{ok: true, donor: donor, from: from, role: role, at: v.now}
		}
		return
	}
	why := "no other engine can move: the online engines serve both phases"
	if others == 0 {
		why = "no engine is online: requests fail with cause unavailable until one is back"
	}
	v.Decide(CoverDecision{Down: inst, Role: role.String(), Why: why})
}

// coverMove is the move coverRole made for a down engine: donor left from
// for role at at.
type coverMove struct {
	ok    bool
	donor event.Instance
	from  event.Role
	role  event.Role
	at    event.Time
}

// uncover undoes, now that inst is back, the move coverRole made when it
// went down: the donor returns to the role it left (cause engine_up), so
// the split is the one the fleet had before the fault (a static split's
// own). Only when nothing has changed that move's sense since: inst holds
// the covered role and is online (not moved while down, nor still
// starting a role a controller gave it), and the donor is online, still
// in that role and not moved since (a controller that moved either owns
// the roles now). Otherwise the cover is dropped: a down donor keeps its
// role.
func (c *Core) uncover(inst event.Instance) {
	v := &c.v
	in := &v.inst[inst]
	m := in.cover
	in.cover = coverMove{}
	if !m.ok {
		return
	}
	d := &v.inst[m.donor]
	if in.Role != m.role || !in.Online(v.now) || d.Role != m.role || d.LastMove != m.at || !d.Online(v.now) {
		return
	}
	v.Move(m.donor, m.from, v.now, event.CauseEngineUp,
		fmt.Sprintf("instance %d is back: instance %d, moved to %s to cover it, returns to %s", inst, m.donor, m.role, m.from))
}

// Covers says which down engine's role donor holds as its cover: the
// move coverRole made, not yet undone, with neither engine moved out of
// that role since (a controller may move a down engine: the dynamo and
// ray models take idle ones first), so that uncover would still undo it.
func (v *View) Covers(donor event.Instance) (event.Instance, bool) {
	d := &v.inst[donor]
	for i := range v.inst {
		if m := &v.inst[i].cover; m.ok && m.donor == donor && d.Role == m.role && d.LastMove == m.at && v.inst[i].Role == m.role {
			return event.Instance(i), true
		}
	}
	return event.NoInstance, false
}

// SetCover records that donor holds down engine inst's role as its cover,
// as coverRole would have (a router resuming another's state, whose core
// opens with the cover already in its roles): when inst is back, donor
// returns to the other phase.
func (c *Core) SetCover(inst, donor event.Instance) error {
	in, err := c.instance("set cover", inst)
	if err != nil {
		return err
	}
	d, err := c.instance("set cover's donor", donor)
	if err != nil {
		return err
	}
	if inst == donor || !in.Down || in.Role != d.Role || (d.Role != event.RolePrefill && d.Role != event.RoleDecode) {
		return fmt.Errorf("core: set cover: instance %d (%s, down %t) covered by %d (%s): expected a down engine and another in the same role, prefill or decode",
			inst, in.Role, in.Down, donor, d.Role)
	}
	from := event.RolePrefill
	if d.Role == event.RolePrefill {
		from = event.RoleDecode
	}
	in.cover = coverMove{ok: true, donor: donor, from: from, role: d.Role, at: d.LastMove}
	return nil
}

// cover says what losing inst does to its role: needed when inst holds
// prefill or decode and no other online engine does; then the donor
// coverRole would move into the role (NoInstance: none can move) and how
// many engines of the other phase are online.
func (v *View) cover(inst event.Instance) (role event.Role, needed bool, donor event.Instance, others int) {
	role, donor = v.inst[inst].Role, event.NoInstance
	if role != event.RolePrefill && role != event.RoleDecode {
		return role, false, donor, 0
	}
	online := func(r event.Role) int {
		n := 0
		for i := range v.inst {
			if in := &v.inst[i]; event.Instance(i) != inst && in.Role == r && in.Online(v.now) {
				n++
			}
		}
		return n
	}
	if online(role) > 0 {
		return role, false, donor, 0
	}
	other := event.RoleDecode
	if role == event.RoleDecode {
		other = event.RolePrefill
	}
	others = online(other)
	if others >= 2 {
		var best int
		for i := range v.inst {
			in := &v.inst[i]
			if in.Role != other || !in.Online(v.now) || in.Pinned {
				continue
			}
			load := in.PrefillCount + in.DecodeCount
			if donor == event.NoInstance || load < best {
				donor, best = event.Instance(i), load
			}
		}
	}
	return role, true, donor, others
}

// CordonDecision is journaled when a cordon asked of the core is refused,
// and when one is taken or lifted on an engine that is down already (no
// engine_down or engine_up record then says the operator acted).
type CordonDecision struct {
	Cordon event.Instance `json:"cordon"`
	// Refused is last_engine or last_in_role (as the live router's 409);
	// "" when the cordon was taken.
	Refused string `json:"refused"`
	// Uncordon marks the lifting of a cordon.
	Uncordon bool   `json:"uncordon,omitempty"`
	Why      string `json:"why"`
}

// Cordon takes inst out of service for maintenance, as an operator asks
// (the simulator's --cordon, the live router's POST /engines/NAME/cordon,
// which first checks its breakers' count): no new placement goes there (cause
// operator) while the work resident there runs to its end. It refuses,
// journaling a CordonDecision and returning its code, when inst is the
// last engine up (last_engine) or the last online engine of a role that
// no other engine could be moved into (last_in_role, View.Uncovered).
// Uncordon with EngineUpBy(..., event.CauseOperator).
func (c *Core) Cordon(now event.Time, inst event.Instance) (refused string, err error) {
	in, err := c.instance("cordon", inst)
	if err != nil {
		return "", err
	}
	if err := c.advance(now); err != nil {
		return "", err
	}
	if in.Down {
		// Nothing to take out of service; the cordon keeps it out when
		// it comes back, which the journal should be able to explain.
		c.v.Decide(CordonDecision{Cordon: inst, Why: "it is down already: it stays out of service when it returns, until uncordoned"})
		return "", nil
	}
	up := 0
	for i := range c.v.inst {
		if event.Instance(i) != inst && !c.v.inst[i].Down {
			up++
		}
	}
	why := ""
	if up == 0 {
		refused, why = "last_engine", "it is the last engine up"
	} else if role, ok := c.v.Uncovered(inst); ok {
		refused, why = "last_in_role", fmt.Sprintf("it is the last online %s engine and no other engine can take its role", role)
	}
	if refused != "" {
		c.v.Decide(CordonDecision{Cordon: inst, Refused: refused, Why: why})
		return refused, nil
	}
	return "", c.EngineDown(now, inst, event.CauseOperator)
}

// Uncovered says whether taking inst out of service now would leave its
// role (prefill or decode) with no online engine and none that coverRole
// could move into it: the role would then be served only by the fleet
// fallback of the controllers that have one, or not at all. The live
// router refuses to cordon such an engine.
func (v *View) Uncovered(inst event.Instance) (event.Role, bool) {
	role, needed, donor, _ := v.cover(inst)
	return role, needed && donor == event.NoInstance
}
