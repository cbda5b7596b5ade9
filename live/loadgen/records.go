package loadgen

import (
	"net/http"
	"sort"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Records turns a run's outcomes into a journal's records, as the client
// saw them (narwhal-bench live --target: the endpoint journals nothing the
// report can read). The endpoint is one instance (0) in mixed role, opened
// at time 0. Per request: arrival at the actual send (Ref = the scheduled
// send), admit and prefill start at the send, prefill done and decode
// start at the first content chunk, and one terminal record:
//
//   - finish (cause stop) at the stream's end, Tokens = output tokens (an
//     answer of exactly max_tokens when min_tokens = max_tokens was asked
//     is a natural end, as the live router journals it; one cut at
//     max_tokens when fewer were required is cause length);
//   - refuse (overload) for 429, refuse (unavailable) for 503 and 529;
//   - fail (timeout, bad_gateway for a broken stream or another status,
//     engine_error when nothing answered);
//   - finish (cause cancel) for a request the run stopped.
//
// Records are in time order (ties: request order, then life-cycle order)
// with Seq from 1.
func Records(res *Result) []event.Record {
	var recs []event.Record
	ns := func(d time.Duration) event.Time { return event.Time(d) }
	add := func(r event.Record) { recs = append(recs, r) }
	add(event.Record{Kind: event.KindRoleMove, Inst: 0, Peer: event.NoInstance, From: event.RoleNone, To: event.RoleMixed})
	for i := range res.Outcomes {
		o := &res.Outcomes[i]
		id := event.RequestID(i + 1)
		req := func(at time.Duration, k event.Kind, inst event.Instance) event.Record {
			return event.Record{At: ns(at), Kind: k, Req: id, Inst: inst, Peer: event.NoInstance}
		}
		a := req(o.Sent, event.KindArrival, event.NoInstance)
		a.Ref, a.Tokens, a.Want, a.Class = ns(o.Ready()), int64(o.Input), int64(o.Output), o.Class
		add(a)
		refused := o.Status == http.StatusTooManyRequests || o.Status == http.StatusServiceUnavailable || o.Status == 529
		if refused && o.FirstToken < 0 {
			r := req(o.End, event.KindRefuse, event.NoInstance)
			r.Cause = event.CauseOverload
			if o.Status != http.StatusTooManyRequests {
				r.Cause = event.CauseUnavailable
			}
			add(r)
			continue
		}
		add(req(o.Sent, event.KindAdmit, 0))
		add(req(o.Sent, event.KindPrefillStart, 0))
		if o.FirstToken >= 0 {
			add(req(o.FirstToken, event.KindPrefillDone, 0))
			d := req(o.FirstToken, event.KindDecodeStart, 0)
			d.Peer = 0
			add(d)
		}
		end := req(o.End, event.KindFinish, 0)
		end.Tokens = int64(o.Tokens)
		switch {
		case o.OK():
			end.Cause = event.CauseStop
			if o.Cut {
				end.Cause = event.CauseLength
			}
		case o.Cancelled:
			end.Cause = event.CauseCancel
		case o.TimedOut:
			end.Kind, end.Cause = event.KindFail, event.CauseTimeout
		case o.Status == 0 && o.FirstToken < 0:
			end.Kind, end.Cause = event.KindFail, event.CauseEngineError
		default:
			end.Kind, end.Cause = event.KindFail, event.CauseBadGateway
		}
		add(end)
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].At < recs[j].At })
	for i := range recs {
		recs[i].Seq = uint64(i + 1)
	}
	return recs
}
