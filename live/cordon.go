package live

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// Cordoning takes an engine out of service for maintenance without
// failing anything: the core stops placing legs there (EngineDown, cause
// operator, as a failure would) but, unlike an ejection, the legs already
// there run to their end. The controllers see one engine fewer, as after
// a failure, and cover its role. The breaker keeps watching the engine: a
// restart while cordoned is seen (a new generation) but does not return
// it to service; uncordoning does, once the breaker has it answering.

// cordonReply is the owner's answer to POST /engines/NAME/(un)cordon.
type cordonReply struct {
	state EngineState
	err   *api.Error
}

// setCordon cordons (on) or uncordons engine inst (owner goroutine).
// Cordoning the last engine that takes placements is refused (nothing
// would serve), and so is cordoning the last online engine of a role that
// no other engine could be moved into (core.Cordon): only the fleet
// fallback of some controllers would serve that phase then, and the
// others (ray, dynamo) would fail every request. A refusal is journaled
// as a decision, as the simulator journals it.
func (o *owner) setCordon(now event.Time, inst event.Instance, on bool) cordonReply {
	e := o.r.engines[inst]
	switch {
	case on && !e.cordoned.Load():
		// The breakers' count first, under their lock as claimEjection
		// takes it: an ejection and a cordon at once cannot both take the
		// last place.
		o.r.ejectMu.Lock()
		serving := 0
		for _, x := range o.r.engines {
			if x != e && !x.cordoned.Load() && !x.br.ejected() {
				serving++
			}
		}
		refused, why := "", ""
		if serving == 0 {
			refused, why = "last_engine", "it is the last engine taking placements"
			o.fact(o.core.Decide(now, core.CordonDecision{Cordon: inst, Refused: refused, Why: why}))
		} else {
			e.cordoned.Store(true)
		}
		o.r.ejectMu.Unlock()
		if refused == "" {
			// The core's rules (the last online engine of a role none
			// could take over), journaled as a decision when refused.
			var err error
			refused, err = o.core.Cordon(now, inst)
			o.fact(err)
			switch refused {
			case "last_in_role":
				role, _ := o.core.View().Uncovered(inst)
				why = fmt.Sprintf("it is the last online %s engine and no other engine can take its role (the other phase keeps fewer than two online engines that are not pinned)", role)
			case "last_engine":
				why = "it is the last engine up"
			}
			if refused != "" {
				e.cordoned.Store(false)
			}
		}
		if refused != "" {
			o.apply(o.core.Ready())
			return cordonReply{err: &api.Error{Status: http.StatusConflict, Type: api.TypeInvalidRequest, Code: refused,
				Message: fmt.Sprintf("engine %s: %s; uncordon another engine or wait for one to be readmitted first", e.name, why)}}
		}
		o.r.logf("narwhal-bench: engine %s cordoned: no new legs; those on it finish", e.name)
	case !on && e.cordoned.Load():
		e.cordoned.Store(false)
		if e.br.ejected() {
			// Back when its readmission probes admit it.
			o.fact(o.core.Decide(now, core.CordonDecision{Cordon: inst, Uncordon: true,
				Why: "it is ejected: it returns to service when its readmission probes admit it"}))
			o.r.logf("narwhal-bench: engine %s uncordoned; it is ejected and returns when it answers again", e.name)
			break
		}
		gen := max(o.core.View().Instance(inst).Generation, o.heldGen[inst])
		o.heldGen[inst] = 0
		o.fact(o.core.EngineUpBy(now, inst, gen, event.CauseOperator))
		o.r.logf("narwhal-bench: engine %s uncordoned: it takes placements again", e.name)
	}
	o.apply(o.core.Ready())
	o.r.met.engines(o.core.View(), o.names, o.r.engines)
	return cordonReply{state: o.snapshot(now).Engines[inst]}
}

// Cordon cordons (on) or uncordons the engine named name, as POST
// /engines/NAME/cordon and /uncordon do, and returns its state; the error
// is an *api.Error (404 no_engine, 409 last_engine or last_in_role, 409
// not_answering for an uncordon of an engine that does not answer its
// /health, 503 when the router stops).
func (r *Router) Cordon(name string, on bool) (EngineState, error) {
	var e *engine
	for _, x := range r.engines {
		if x.name == name {
			e = x
		}
	}
	if e == nil {
		return EngineState{}, &api.Error{Status: http.StatusNotFound, Type: "not_found_error", Code: "no_engine",
			Message: fmt.Sprintf("engine %q: no such engine in the fleet (GET /state lists them)", name)}
	}
	if !on && e.cordoned.Load() && !e.br.ejected() {
		// Back in service only if it answers now: a cordoned engine
		// takes no traffic, so only the liveness sweep would have seen
		// it stop (or restart) since.
		ok, start := r.probeHealth(e)
		if !ok {
			return EngineState{}, &api.Error{Status: http.StatusConflict, Type: api.TypeInvalidRequest, Code: "not_answering",
				Message: fmt.Sprintf("engine %s: it does not answer GET /health: it stays cordoned until it does (check it with narwhal-bench check --probe)", name)}
		}
		r.answeredAs(e, start) // a restart meanwhile: its new generation first
	}
	ch := make(chan cordonReply, 1)
	if !r.send(msg{kind: msgCordon, inst: e.idx, up: !on, cordon: ch}) {
		return EngineState{}, api.Unavailable("the router is stopping", time.Second)
	}
	select {
	case rep := <-ch:
		if rep.err != nil {
			return EngineState{}, rep.err
		}
		return rep.state, nil
	case <-r.stopped:
		return EngineState{}, api.Unavailable("the router is stopping", time.Second)
	}
}

// cordonHandler serves POST /engines/{name}/cordon and /uncordon.
func (r *Router) cordonHandler(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, q *http.Request) {
		if r.stopping(w) {
			return
		}
		es, err := r.Cordon(q.PathValue("name"), on)
		if err != nil {
			api.WriteError(w, err.(*api.Error))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(es)
	}
}
