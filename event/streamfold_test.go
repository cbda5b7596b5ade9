package event

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// randomRecords makes the records of n requests, interleaved as a driver
// makes them: each request arrives in order, is admitted, prefills,
// decodes and ends with one of the terminal kinds, while later requests
// arrive. With faults, it also breaks the life cycle now and then.
func randomRecords(seed uint64, n int, faults bool) []Record {
	rng := rand.New(rand.NewPCG(seed, 2))
	type open struct {
		req  RequestID
		step int
	}
	var out []Record
	var live []open
	at := Time(0)
	next := RequestID(1)
	classes := []string{"", "chat", "doc"}
	for next <= RequestID(n) || len(live) > 0 {
		at += Time(rng.IntN(1000))
		if next <= RequestID(n) && (len(live) == 0 || rng.IntN(3) == 0) {
			r := Record{At: at, Kind: KindArrival, Req: next, Inst: NoInstance, Peer: NoInstance, Ref: at - 5,
				Tokens: int64(1 + rng.IntN(1000)), Want: int64(1 + rng.IntN(100)), Class: classes[rng.IntN(3)]}
			if rng.IntN(10) == 0 {
				r.Text = "reference"
			}
			out = append(out, r)
			live = append(live, open{req: next})
			next++
			continue
		}
		k := rng.IntN(len(live))
		o := &live[k]
		r := Record{At: at, Req: o.req, Inst: Instance(rng.IntN(4)), Peer: NoInstance}
		switch o.step {
		case 0:
			r.Kind = KindAdmit
			if rng.IntN(8) == 0 {
				r.Kind, r.Inst, r.Cause = KindRefuse, NoInstance, CauseOverload
			}
		case 1:
			r.Kind, r.Tokens = KindPrefillStart, int64(rng.IntN(50))
		case 2:
			r.Kind = KindPrefillDone
		case 3:
			r.Kind, r.Peer = KindDecodeStart, Instance(rng.IntN(4))
			if r.Peer != r.Inst {
				r.Cause = CauseCrossed
			}
		default:
			if rng.IntN(4) == 0 {
				// a KV-capacity preemption: not terminal, counted per row
				r.Kind, r.Tokens = KindPreempt, int64(1+rng.IntN(1000))
				out = append(out, r)
				continue
			}
			r.Kind, r.Tokens, r.Cause = KindFinish, int64(2+rng.IntN(100)), CauseStop
			switch rng.IntN(6) {
			case 0:
				r.Kind, r.Cause = KindExpire, CauseDrainLimit
			case 1:
				r.Kind, r.Cause = KindFail, CauseUnavailable
			case 2:
				r.Text = "response"
			}
		}
		out = append(out, r)
		o.step++
		if r.Kind.Terminal() {
			live = slices.Delete(live, k, k+1)
		}
	}
	if faults {
		for i := 0; i < 3; i++ {
			j := rng.IntN(len(out))
			switch rng.IntN(3) {
			case 0: // a record repeated later (after its request ended, often)
				out = append(out, out[j])
			case 1: // a record dropped (a request that never ends, or never arrived)
				out = slices.Delete(out, j, j+1)
			case 2: // a request ID out of the blue
				out = append(out, Record{At: at, Kind: KindAdmit, Req: RequestID(n + 1 + rng.IntN(5))})
			}
		}
	}
	return out
}

// StreamFold hands out, as requests end, exactly the rows Fold builds at
// the end of the run (preemption counts included), and agrees with Fold on
// the life cycle.
func TestStreamFoldMatchesFold(t *testing.T) {
	preempted := false
	for seed := uint64(1); seed <= 60; seed++ {
		faults := seed > 20
		recs := randomRecords(seed, 300, faults)
		var f Fold
		var got []Row
		sf := StreamFold{End: func(r *Row) { got = append(got, *r) }}
		for i := range recs {
			r := recs[i]
			f.Record(&r)
			sf.Record(&recs[i])
		}
		if sf.Len() != f.Len() {
			t.Fatalf("seed %d: Len %d, Fold's %d", seed, sf.Len(), f.Len())
		}
		if (sf.Err() == nil) != (f.Err() == nil) {
			t.Fatalf("seed %d: Err %v, Fold's %v", seed, sf.Err(), f.Err())
		}
		if faults {
			continue
		}
		slices.SortFunc(got, func(a, b Row) int { return int(a.Req - b.Req) })
		if want := f.Rows(); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: %d rows streamed, Fold built %d, and they differ", seed, len(got), len(want))
		}
		for i := range got {
			preempted = preempted || got[i].Preemptions > 0
		}
		if sf.Ended() != len(got) || sf.Held() > 512 {
			t.Fatalf("seed %d: %d ended, %d rows held", seed, sf.Ended(), sf.Held())
		}
	}
	if !preempted {
		t.Error("no row counted a preemption: expected preempt records to be folded")
	}
}

// The rows a StreamFold holds follow the requests in flight: a hundred
// times the requests, as many in flight at a time, hold as many rows.
func TestStreamFoldHoldsRequestsInFlight(t *testing.T) {
	held := func(n int) int {
		var sf StreamFold
		for i := 1; i <= n; i++ {
			at := Time(i)
			sf.Record(&Record{At: at, Kind: KindArrival, Req: RequestID(i)})
			if j := i - 50; j >= 1 {
				sf.Record(&Record{At: at, Kind: KindFinish, Req: RequestID(j), Tokens: 2})
			}
		}
		for j := max(n-49, 1); j <= n; j++ {
			sf.Record(&Record{At: Time(n + 1), Kind: KindExpire, Req: RequestID(j)})
		}
		if err := sf.Err(); err != nil || sf.Ended() != n {
			t.Fatalf("%d requests: %d ended, %v", n, sf.Ended(), err)
		}
		return sf.Held()
	}
	if small, large := held(1000), held(100000); large != small || large > 64 {
		t.Fatalf("rows held: %d for 1,000 requests, %d for 100,000", small, large)
	}
}
