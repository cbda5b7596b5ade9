package journal

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

func testMeta(arm string, rate float64) event.RunMeta {
	return event.RunMeta{
		Version: "test", Driver: "sim", Arm: arm, Rate: rate, Seed: 7, Trace: "synthetic",
		TraceHash: "abc", Fleet: "test-fleet", ConfigHash: "def", Instances: 8, GPUs: 8,
		TTFTSLO: 0.5, TPOTSLO: 0.05,
	}
}

// synth emits a plausible run of n requests, one request's life after
// another, with role moves, decisions, health changes, refusals, expiries
// and failures sprinkled in. Records carry Seq 0 so the writer numbers
// them. The same (n, seed) always gives the same records.
func synth(n int, seed uint64, emit func(*event.Record)) {
	rng := rand.New(rand.NewPCG(seed, 0x6e61727768616c))
	classes := []string{"chat", "code", "summarize", "batch"}
	var rec event.Record
	put := func(r event.Record) {
		rec = r
		emit(&rec)
	}
	base := func(kind event.Kind, at event.Time, req event.RequestID) event.Record {
		return event.Record{Kind: kind, At: at, Req: req, Inst: event.NoInstance, Peer: event.NoInstance}
	}
	t := event.Time(0)
	for i := 1; i <= n; i++ {
		req := event.RequestID(i)
		t += event.Time(rng.IntN(int(20 * event.Millisecond)))
		sched := t - event.Time(rng.IntN(int(event.Millisecond)))
		if i%97 == 0 {
			r := base(event.KindRoleMove, t, 0)
			r.Inst = event.Instance(rng.IntN(8))
			r.From, r.To = event.RolePrefill, event.RoleDecode
			r.Cause = event.CauseController
			r.Tokens = int64(rng.IntN(100000))
			r.Ref = event.Time(rng.IntN(int(event.Second)))
			r.Text = "decode pool saturated"
			put(r)
		}
		if i%50 == 0 {
			r := base(event.KindDecision, t, 0)
			r.Text = `{"candidates":[{"split":"3P5D","score":0.91},{"split":"4P4D","score":0.87}],"choice":"3P5D"}`
			put(r)
		}
		if i%499 == 0 {
			r := base(event.KindHealth, t, 0)
			r.Inst = event.Instance(rng.IntN(8))
			r.Tokens = int64(i / 499)
			put(r)
		}
		in := int64(64 + rng.IntN(4096))
		want := int64(1 + rng.IntN(512))
		r := base(event.KindArrival, t, req)
		r.Ref, r.Tokens, r.Want, r.Class = sched, in, want, classes[rng.IntN(len(classes))]
		put(r)
		switch x := rng.IntN(100); {
		case x < 4: // refused at the door
			r := base(event.KindRefuse, t+event.Microsecond, req)
			r.Cause = []event.Cause{event.CauseNoCapacity, event.CauseOverload, event.CausePrompt}[rng.IntN(3)]
			put(r)
			continue
		case x < 7: // waits and expires
			r := base(event.KindQueue, t, req)
			r.Tokens = int64(rng.IntN(50))
			put(r)
			r = base(event.KindExpire, t+2*event.Second, req)
			r.Cause = event.CauseQueueTimeout
			put(r)
			continue
		}
		p := event.Instance(rng.IntN(8))
		at := t + event.Time(rng.IntN(int(5*event.Millisecond)))
		r = base(event.KindAdmit, at, req)
		r.Inst = p
		put(r)
		r = base(event.KindPrefillStart, at+event.Millisecond, req)
		r.Inst, r.Tokens = p, int64(rng.IntN(int(in)))
		put(r)
		first := at + event.Time(int64(event.Microsecond)*in*int64(20+rng.IntN(300)))
		r = base(event.KindPrefillDone, first, req)
		r.Inst = p
		put(r)
		d := event.Instance(rng.IntN(8))
		dat := first
		if d != p {
			r = base(event.KindKVStart, first, req)
			r.Inst, r.Peer, r.Tokens = p, d, in
			put(r)
			dat = first + event.Time(rng.IntN(int(3*event.Millisecond)))
			r = base(event.KindKVDone, dat, req)
			r.Inst, r.Peer = p, d
			put(r)
		}
		r = base(event.KindDecodeStart, dat, req)
		r.Inst, r.Peer = d, p
		if d != p {
			r.Cause = event.CauseCrossed
		}
		put(r)
		if i%37 == 0 { // preempted for KV capacity, twice at every 111th (no draw: the rest stays as it was)
			for k := 0; k < 1+btoi(i%111 == 0); k++ {
				r = base(event.KindPreempt, dat+event.Time(k+1)*event.Microsecond, req)
				r.Inst, r.Tokens = d, in
				put(r)
			}
		}
		end := dat + event.Time(want)*event.Time(10+rng.IntN(60))*event.Millisecond
		if rng.IntN(100) < 2 {
			r = base(event.KindFail, end, req)
			r.Inst, r.Cause, r.Tokens = d, event.CauseEngineError, want/2
			put(r)
			continue
		}
		r = base(event.KindFinish, end, req)
		r.Inst, r.Tokens = d, want
		switch y := rng.IntN(100); {
		case y < 80:
			r.Cause = event.CauseStop
		case y < 95:
			r.Cause = event.CauseLength
		default:
			r.Cause = event.CauseCancel
		}
		put(r)
	}
}

// writeSynth writes a synthetic journal of n requests in dir.
func writeSynth(t testing.TB, dir string, meta event.RunMeta, n int, seed uint64, opts Options) {
	t.Helper()
	w, err := Create(dir, meta, opts)
	if err != nil {
		t.Fatal(err)
	}
	synth(n, seed, w.Record)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeSynthRoot writes three runs under a fresh root and returns it.
func writeSynthRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	writeSynth(t, filepath.Join(root, "static-3P5D_r2.4"), testMeta("static:3P5D", 2.4), 3000, 1, Options{})
	// A live run's metadata: the export keeps its load generator's fields.
	live := testMeta("aggregated", 2.4)
	live.Driver, live.StartUnixNano, live.Target = "live", 1_700_000_000_000_000_000, "http://127.0.0.1:8000"
	live.Partial, live.Planned, live.Sent = true, 2400, 2000
	live.LagP50, live.LagP90, live.LagP99, live.Degraded = 0.001, 0.004, 0.7, true
	live.PrefixCache = true
	writeSynth(t, filepath.Join(root, "aggregated_r2.4"), live, 2000, 2, Options{Sync: SyncOnClose})
	writeSynth(t, filepath.Join(root, "static-3P5D_r6.4"), testMeta("static:3P5D", 6.4), 1000, 3, Options{BatchRecords: 100})
	return root
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// foldRun opens the run at dir (closed when the test ends) and folds it.
func foldRun(t testing.TB, dir string) (*Reader, []event.Row) {
	t.Helper()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rows, err := Fold(r)
	if err != nil {
		t.Fatal(err)
	}
	return r, rows
}
