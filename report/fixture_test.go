package report

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

// Hand-written journals for the report's tests.

func sec(s float64) event.Time { return event.Seconds(s) }

// fixtureRun writes one run's records through a journal.Writer.
type fixtureRun struct {
	t    testing.TB
	w    *journal.Writer
	next event.RequestID
}

func newFixtureRun(t testing.TB, dir string, meta event.RunMeta) *fixtureRun {
	t.Helper()
	w, err := journal.Create(dir, meta, journal.Options{Sync: journal.SyncOnClose})
	if err != nil {
		t.Fatal(err)
	}
	return &fixtureRun{t: t, w: w}
}

func (f *fixtureRun) rec(r event.Record) {
	if r.Kind != event.KindRoleMove && r.Inst == 0 {
		r.Inst = event.NoInstance
	}
	r.Peer = event.NoInstance
	f.w.Record(&r)
}

// roles records opening roles at time 0: p prefill engines, then d decode
// engines (or, with mixed, p+d mixed engines).
func (f *fixtureRun) roles(p, d int, mixed bool) {
	for i := 0; i < p+d; i++ {
		to := event.RolePrefill
		if mixed {
			to = event.RoleMixed
		} else if i >= p {
			to = event.RoleDecode
		}
		f.rec(event.Record{Kind: event.KindRoleMove, Inst: event.Instance(i), From: event.RoleNone, To: to, Text: "opening role"})
	}
}

// move records n engines changing role at t.
func (f *fixtureRun) move(t event.Time, n int, from, to event.Role) {
	for i := 0; i < n; i++ {
		f.rec(event.Record{At: t, Kind: event.KindRoleMove, Inst: event.Instance(i), From: from, To: to, Cause: event.CauseController, Text: "fixture"})
	}
}

type reqSpec struct {
	class     string
	sched     float64 // scheduled send, s
	wait      float64 // admission wait, s
	ttft      float64 // first token after the scheduled send, s (0: none)
	dur       float64 // first token to end, s
	in, want  int64
	out       int64       // tokens produced
	term      event.Kind  // terminal kind
	cause     event.Cause // its cause
	reference string
	response  string
}

// req writes one request's whole life.
func (f *fixtureRun) req(q reqSpec) {
	f.next++
	id := f.next
	arr := sec(q.sched) + event.Millisecond
	f.rec(event.Record{At: arr, Kind: event.KindArrival, Req: id, Ref: sec(q.sched), Tokens: q.in, Want: q.want, Class: q.class, Text: q.reference})
	if q.term == event.KindRefuse {
		f.rec(event.Record{At: arr, Kind: event.KindRefuse, Req: id, Cause: q.cause})
		return
	}
	admit := arr + sec(q.wait)
	if q.wait > 0 {
		f.rec(event.Record{At: arr, Kind: event.KindQueue, Req: id, Tokens: 1})
	}
	if q.term == event.KindExpire && q.ttft == 0 {
		f.rec(event.Record{At: admit, Kind: event.KindExpire, Req: id, Cause: q.cause})
		return
	}
	f.rec(event.Record{At: admit, Kind: event.KindAdmit, Req: id, Inst: 1})
	f.rec(event.Record{At: admit, Kind: event.KindPrefillStart, Req: id, Inst: 1})
	first := sec(q.sched + q.ttft)
	f.rec(event.Record{At: first, Kind: event.KindPrefillDone, Req: id, Inst: 1})
	f.rec(event.Record{At: first, Kind: event.KindDecodeStart, Req: id, Inst: 2, Cause: event.CauseCrossed})
	end := first + sec(q.dur)
	r := event.Record{At: end, Kind: q.term, Req: id, Inst: 2, Tokens: q.out, Cause: q.cause}
	if q.term == event.KindFinish {
		r.Text = q.response
	}
	f.rec(r)
}

func (f *fixtureRun) close() {
	f.t.Helper()
	if err := f.w.Close(); err != nil {
		f.t.Fatal(err)
	}
}

func fixtureMeta(arm string, rate float64, gpus int) event.RunMeta {
	return event.RunMeta{Version: "test", Driver: "sim", Arm: arm, Rate: rate, Seed: 7, Trace: "fixture",
		Fleet: "fixture8", Instances: 8, GPUs: gpus, TTFTSLO: 1, TPOTSLO: 0.1}
}

// outcomes writes one request of every outcome, then n qualified requests
// spread over 70 s whose TTFT grows with slow.
func (f *fixtureRun) outcomes(n int, slow float64) {
	fin, stop := event.KindFinish, event.CauseStop
	f.req(reqSpec{class: "chat", sched: 0, ttft: 0.5, dur: 1, in: 100, want: 10, out: 11, term: fin, cause: stop})                              // qualified, TPOT exactly 0.1
	f.req(reqSpec{class: "chat", sched: 1, ttft: 0.4, dur: 1, in: 200, want: 10, out: 10, term: fin, cause: event.CauseLength})                 // at the cap
	f.req(reqSpec{class: "chat", sched: 2, wait: 0.3, ttft: 1.5, dur: 1, in: 900, want: 10, out: 10, term: fin, cause: stop})                   // TTFT miss
	f.req(reqSpec{class: "code", sched: 3, ttft: 0.2, dur: 2, in: 300, want: 10, out: 11, term: fin, cause: stop})                              // TPOT miss (0.2)
	f.req(reqSpec{class: "code", sched: 4, ttft: 0.2, dur: 0, in: 300, want: 1, out: 1, term: fin, cause: stop})                                // too short
	f.req(reqSpec{class: "code", sched: 5, ttft: 0.2, dur: 0.3, in: 300, want: 50, out: 4, term: fin, cause: event.CauseCancel})                // cancelled
	f.req(reqSpec{class: "chat", sched: 6, in: 300, want: 50, term: event.KindRefuse, cause: event.CauseOverload})                              // refused
	f.req(reqSpec{class: "chat", sched: 7, in: 30000, want: 50, term: event.KindRefuse, cause: event.CausePrompt})                              // refused
	f.req(reqSpec{class: "chat", sched: 8, wait: 2, in: 300, want: 50, term: event.KindExpire, cause: event.CauseQueueTimeout})                 // expired waiting
	f.req(reqSpec{class: "code", sched: 9, ttft: 0.3, dur: 5, in: 300, want: 50, out: 3, term: event.KindExpire, cause: event.CauseDrainLimit}) // expired decoding
	f.req(reqSpec{class: "code", sched: 10, ttft: 0.3, dur: 1, in: 300, want: 50, out: 7, term: event.KindFail, cause: event.CauseEngineError}) // failed
	for i := 0; i < n; i++ {
		ttft := slow * (0.05 + 0.04*float64(i%7))
		f.req(reqSpec{class: []string{"chat", "code"}[i%2], sched: 11 + 60*float64(i)/float64(n), wait: 0.001 * float64(i%3),
			ttft: ttft, dur: 0.05 * float64(10+i%5), in: int64(100 + 50*(i%9)), want: int64(10 + i%5), out: int64(11 + i%5), term: fin, cause: stop})
	}
}

// writeFixtureRoot writes the golden tests' journal root:
//
//	static-2P6D@1, static-2P6D@2  a constant split (GPUs known)
//	adaptive@1                    moves 2 -> 4 -> 3 -> 5 (GPU count unknown)
//	oracle@1                      the target: 2 -> 5 -> 1 -> 4 (attainment 91%)
//	aggregated@1                  mixed engines: no split
//
// There is no oracle at rate 2.
func writeFixtureRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	P, D := event.RolePrefill, event.RoleDecode

	f := newFixtureRun(t, filepath.Join(root, "static-2P6D@1"), fixtureMeta("static:2P6D", 1, 8))
	f.roles(2, 6, false)
	f.outcomes(20, 1)
	f.close()

	f = newFixtureRun(t, filepath.Join(root, "static-2P6D@2"), fixtureMeta("static:2P6D", 2, 8))
	f.roles(2, 6, false)
	f.outcomes(40, 6)
	f.close()

	f = newFixtureRun(t, filepath.Join(root, "adaptive@1"), fixtureMeta("adaptive", 1, 0))
	f.roles(2, 6, false)
	f.move(sec(12), 2, D, P)
	f.move(sec(25), 1, P, D)
	f.move(sec(50), 2, D, P)
	f.outcomes(20, 0.8)
	f.close()

	f = newFixtureRun(t, filepath.Join(root, "oracle@1"), fixtureMeta("oracle", 1, 8))
	f.roles(2, 6, false)
	f.move(sec(10), 3, D, P)
	f.move(sec(30), 4, P, D)
	f.move(sec(45), 3, D, P)
	f.outcomes(100, 0.7) // 101 of 111 qualify: 91%, a DistServe goodput of 1
	f.close()

	f = newFixtureRun(t, filepath.Join(root, "aggregated@1"), fixtureMeta("aggregated", 1, 8))
	f.roles(8, 0, true)
	f.outcomes(20, 1.2)
	f.close()
	return root
}

// writeQualityRun writes a run whose requests carry reference answers (and
// some responses) for the F1 tests.
func writeQualityRun(t testing.TB, dir string) { t.Helper(); writeQualityRunAt(t, dir, 1) }

// writeQualityRunAt is writeQualityRun's run labelled with another rate (a
// run of its own, not a copy of another).
func writeQualityRunAt(t testing.TB, dir string, rate float64) {
	t.Helper()
	f := newFixtureRun(t, dir, fixtureMeta("static:2P6D", rate, 8))
	f.roles(2, 6, false)
	fin, stop := event.KindFinish, event.CauseStop
	qa := func(sched, ttft float64, ref, resp string) reqSpec {
		return reqSpec{class: "qa", sched: sched, ttft: ttft, dur: 0.5, in: 100, want: 10, out: 6, term: fin, cause: stop, reference: ref, response: resp}
	}
	f.req(qa(0, 0.2, "The Eiffel Tower", "the eiffel tower!")) // F1 1, qualified
	f.req(qa(1, 0.2, "Paris, France", "paris"))                // F1 2/3, qualified
	f.req(qa(2, 2.0, "a red apple", "green apple"))            // F1 1/2, TTFT miss
	f.req(qa(3, 0.2, "blue whale", "an elephant"))             // F1 0, qualified
	f.req(reqSpec{class: "qa", sched: 4, in: 100, want: 10, term: event.KindRefuse, cause: event.CauseOverload, reference: "forty two"})
	f.req(reqSpec{class: "chat", sched: 5, ttft: 0.2, dur: 0.5, in: 100, want: 10, out: 6, term: fin, cause: stop, reference: "hello there"}) // no response: unscored
	f.req(reqSpec{class: "chat", sched: 6, ttft: 0.2, dur: 0.5, in: 100, want: 10, out: 6, term: fin, cause: stop})                           // no reference
	f.close()
}

// writeRandomRun writes a run of n random requests (seeded), for the
// invariant tests.
func writeRandomRun(t testing.TB, dir string, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	f := newFixtureRun(t, dir, fixtureMeta("static:4P4D", 3, 8))
	f.roles(4, 4, false)
	kinds := []event.Kind{event.KindFinish, event.KindFinish, event.KindFinish, event.KindRefuse, event.KindExpire, event.KindFail}
	causes := map[event.Kind][]event.Cause{
		event.KindFinish: {event.CauseStop, event.CauseStop, event.CauseLength, event.CauseCancel},
		event.KindRefuse: {event.CauseOverload, event.CausePrompt, event.CauseNoCapacity},
		event.KindExpire: {event.CauseQueueTimeout, event.CauseDrainLimit},
		event.KindFail:   {event.CauseEngineError},
	}
	for i := 0; i < n; i++ {
		k := kinds[rng.IntN(len(kinds))]
		cs := causes[k]
		q := reqSpec{class: []string{"a", "b", "c"}[rng.IntN(3)], sched: float64(i) * 0.3, wait: rng.Float64() * 0.2,
			ttft: 0.2 + rng.Float64()*2, dur: rng.Float64() * 3, in: int64(1 + rng.IntN(4000)), want: int64(1 + rng.IntN(300)),
			out: int64(1 + rng.IntN(40)), term: k, cause: cs[rng.IntN(len(cs))]}
		if k == event.KindExpire && rng.IntN(2) == 0 {
			q.ttft = 0
		}
		f.req(q)
	}
	f.close()
}
