package live

import (
	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// Re-placing a request whose leg failed.
//
// A prefill leg (or a single ordinary request, before any byte reached
// the client) that fails with 502, 503 or 504, a connection failure, or
// because its engine was ejected, is placed once more; so is a decode leg
// that fails before its first byte (a connection failure, any 5xx, an
// ejection), with a fresh prefill, since the router cannot know whether
// the blocks its handoff named still exist (vLLM frees them after a pull
// or an abort). The core does the placing (core.Replace: a new fact rather
// than Cancel then Arrive, so the request keeps its one arrival, its
// scheduled time and its place in the counts, and the journal shows a
// decision record naming the failed leg); the new legs avoid the engine
// that failed. One retry per request: a second failure stands.

// verdict is what a failed attempt asks of start.
type verdict struct {
	retry bool
	stage string // "prefill" or "decode"
	from  *engine
	cause event.Cause
}

// start runs the request from its first placement, re-placing it once
// when an attempt asks to.
func (l *leg) start(inst event.Instance) {
	for {
		var v verdict
		if l.f.single {
			v = l.run(l.r.engines[inst], l.req.Raw, nil, true)
		} else {
			v = l.twoLegs(l.r.engines[inst])
		}
		if !v.retry {
			return
		}
		l.retried = true
		l.r.met.retries.WithLabelValues(v.stage).Inc()
		if !l.r.send(msg{kind: msgRetry, f: l.f, inst: v.from.idx, cause: v.cause}) {
			api.WriteError(l.w, haltedError())
			return
		}
		var p placement
		select {
		case p = <-l.f.reply:
		case <-l.r.stopped:
			api.WriteError(l.w, haltedError())
			return
		case <-l.q.Context().Done():
			l.r.endFlight(l.f, event.KindFinish, event.CauseCancel)
			return
		}
		if p.inst == event.NoInstance {
			writeRefusal(l.w, p) // the owner journaled how it ended
			return
		}
		inst = p.inst
	}
}

// retryable reports whether a failed attempt may be re-placed: nothing
// reached the client, and it is the request's first retry.
func (l *leg) retryable() bool { return !l.sent && !l.retried }

// retry is the owner's side: release what f held where its leg failed
// and let the core place it again.
func (o *owner) retry(now event.Time, m msg) {
	f := m.f
	if _, ok := o.active[f.id]; !ok || (f.stage != core.StagePrefill && f.stage != core.StageDecode) {
		f.reply <- placement{inst: event.NoInstance, cause: event.CauseEngineError, fail: true}
		return
	}
	stage := f.stage
	req := core.Request{ID: f.id, InputTokens: f.input, PrefillInst: f.prefill, DecodeInst: f.decode,
		ContextTokens: int64(f.input) + f.produced.Load(), PrefixGroup: f.group, PrefixTokens: f.prefix,
		CachedOn: f.cachedOn, CachedTokens: f.cached}
	f.stage, f.single, f.noHandoff = core.StageQueued, false, false
	f.produced.Store(0)
	if !o.fact(o.core.Replace(now, req, stage, m.inst, m.cause)) {
		o.end(now, f, event.KindFail, m.cause)
		f.reply <- placement{inst: event.NoInstance, cause: m.cause, fail: true}
		return
	}
	o.apply(o.core.Ready())
}

// killLegs ends the legs in flight on an ejected engine: each handler
// then ends its request (or re-places it) with cause engine_down.
func (o *owner) killLegs(inst event.Instance) {
	for _, f := range o.active {
		f.guard.kill(inst)
	}
}

// gauges sets the gauges the owner owns after each message.
func (o *owner) gauges() {
	o.r.met.inFlight.Set(float64(o.counts.InFlight))
	o.r.met.queue.Set(float64(o.counts.Queued))
}

// qualified counts a finished request that met both SLOs, by the
// journal's rule (event.Qualify).
func (o *owner) qualified(now event.Time, f *flight, cause event.Cause, produced int64) {
	row := event.Row{Scheduled: o.scheduledOf(f), FirstToken: f.firstAt, End: now, Terminal: event.KindFinish,
		Cause: cause, OutputTokens: produced}
	if f.scheduled < 0 {
		row.Scheduled = f.arrived
	}
	if event.Qualify(&row, o.core.View().SLO()) == event.CheckOK {
		o.r.met.sloMet.Inc()
	}
}
