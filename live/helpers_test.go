package live

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/internal/simcheck"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// memJournal keeps every record in memory (safe for the test goroutine to
// read after the router stopped).
type memJournal struct {
	mu   sync.Mutex
	recs []event.Record
}

func (m *memJournal) Record(r *event.Record) {
	m.mu.Lock()
	m.recs = append(m.recs, *r)
	m.mu.Unlock()
}

func (m *memJournal) records() []event.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]event.Record(nil), m.recs...)
}

// testFleet is a fleet file for n stub engines: a profile fast enough for
// tests (prefill of a 100-token prompt ≈ 1 ms, a decode step ≈ 2 ms).
func testFleet(t testing.TB, n int) *fleet.Spec {
	t.Helper()
	return testFleetWith(t, n, "{a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}", "{ttft: 2s, tpot: 100ms}")
}

// testFleetWith is testFleet with the profile and SLO of the caller's (in
// a fleet file's flow syntax).
func testFleetWith(t testing.TB, n int, profile, slo string) *fleet.Spec {
	t.Helper()
	spec, err := fleet.Parse([]byte(`name: livetest
instances:
  count: `+itoa(n)+`
  profile: `+profile+`
slo: `+slo+`
kv: {latency: 1ms}
`), "livetest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func itoa(n int) string {
	b := []byte{}
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// rig is a stub fleet and a router in front of it, on loopback.
type rig struct {
	t      testing.TB
	stubs  *stub.Fleet
	router *Router
	url    string
	jr     *memJournal
	srv    *http.Server
	cancel context.CancelFunc
	ran    chan error
}

type rigOpts struct {
	n         int
	arm       string
	ctrl      core.Controller
	stub      stub.Options
	configure func(*Config)
	// wrap, when set, wraps the router's handler (CORS, a tenant gate).
	wrap func(http.Handler) http.Handler
}

func startRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	if o.n == 0 {
		o.n = 2
	}
	return startRigSpec(t, testFleet(t, o.n), o)
}

// startRigSpec is startRig on a fleet spec of the caller's.
func startRigSpec(t testing.TB, spec *fleet.Spec, o rigOpts) *rig {
	t.Helper()
	o.n = spec.Size()
	if o.stub.Model == "" {
		o.stub.Model = "stub"
	}
	o.stub.AllowFaults = true
	sf, err := stub.StartLoopback(spec, o.stub)
	if err != nil {
		t.Fatal(err)
	}
	urls := make([]string, o.n)
	for i, s := range sf.Servers() {
		urls[i] = s.URL()
	}
	ctrl := o.ctrl
	if ctrl == nil {
		arm := o.arm
		if arm == "" {
			arm = "static:1P1D"
		}
		if ctrl, err = core.NewController(arm, o.n); err != nil {
			t.Fatal(err)
		}
	}
	jr := &memJournal{}
	cfg := Config{Fleet: spec, URLs: urls, Controller: ctrl, Model: "stub", Recorder: jr,
		FirstTokenTimeout: 5 * time.Second, ProbeInterval: 50 * time.Millisecond}
	if o.configure != nil {
		o.configure(&cfg)
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, stubs: sf, router: rt, jr: jr, cancel: cancel, ran: make(chan error, 1)}
	go func() { r.ran <- rt.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := rt.Handler()
	if o.wrap != nil {
		h = o.wrap(h)
	}
	r.srv = &http.Server{Handler: h}
	go r.srv.Serve(smallSendBuffers{ln})
	r.url = "http://" + ln.Addr().String()
	t.Cleanup(r.stop)
	return r
}

// stop shuts the router (ending whatever is in flight) and the stubs, and
// returns the journal.
func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
	defer c()
	_ = r.srv.Shutdown(sctx)
	r.cancel()
	r.cancel = nil
	if err := <-r.ran; err != nil {
		r.t.Errorf("router: %v", err)
	}
	r.stubs.Close()
}

// checkJournal folds the journal and checks the invariants every run must
// hold, with the simulator's checker (internal/simcheck: one event model,
// one set of rules): records in time order (the owner goroutine stamps
// every record with the router's monotonic clock and journals in that
// order, so the clock never goes back across the whole journal, not only
// per request), sequence numbers dense, every request that arrived ended
// exactly once, no decode leg placed before its prompt's first token
// (prefill_done), no prefill placed on an engine that did not hold the
// prefill (or mixed) role then (but a prompt burst spill runs on a decode
// engine), no decode on an engine whose role then takes no decode unless
// the request's prompt ran there on an engine that took decode since
// (roles label new placements; resident work finishes where it is). And
// the live rules on top: a spilled prompt decodes where it ran, and a
// request's first token comes no earlier than its arrival. The live
// journal has no per-token records (the router relays tokens, it does not
// journal them): token order and counts are checked at the client
// (TestInvariantsEveryArm). It returns the rows.
func checkJournal(t testing.TB, recs []event.Record) []event.Row {
	t.Helper()
	_, rows := checkJournalWith(t, recs)
	return rows
}

// checkJournalWith is checkJournal, returning its checker too (whose
// Finish checks the run against what the client offered).
func checkJournalWith(t testing.TB, recs []event.Record) (*simcheck.Checker, []event.Row) {
	t.Helper()
	c := simcheck.New(t)
	c.SkipTokens = true // no token records in a live journal
	spilledOn := map[event.RequestID]event.Instance{}
	for i := range recs {
		r := &recs[i]
		c.Record(r)
		switch r.Kind {
		case event.KindAdmit:
			if r.Cause == event.CauseSpilled {
				spilledOn[r.Req] = r.Inst
			} else {
				delete(spilledOn, r.Req) // re-placed (live/retry.go)
			}
		case event.KindDecodeStart:
			if on, ok := spilledOn[r.Req]; ok && r.Inst != on {
				t.Errorf("request %d's prompt spilled to %d but its decode placed on %d: expected the same engine", r.Req, on, r.Inst)
			}
		}
	}
	if err := c.Fold.Err(); err != nil {
		t.Fatalf("journal: %v", err)
	}
	if c.Errs() > 0 {
		t.FailNow()
	}
	rows := c.Fold.Rows()
	for _, row := range rows {
		if row.Terminal == event.KindNone {
			t.Errorf("request %d never ended", row.Req)
		}
		if row.FirstToken != event.Never && (row.FirstToken < row.Arrival || row.FirstToken < row.Admit) {
			t.Errorf("request %d: first token at %v before its arrival at %v or its admission at %v", row.Req, row.FirstToken, row.Arrival, row.Admit)
		}
		if row.End != event.Never && row.FirstToken != event.Never && row.End < row.FirstToken {
			t.Errorf("request %d: ended at %v before its first token at %v", row.Req, row.End, row.FirstToken)
		}
	}
	return c, rows
}

// outcomes counts rows by terminal kind and cause ("finish/stop").
func outcomes(rows []event.Row) map[string]int {
	m := map[string]int{}
	for _, r := range rows {
		m[r.Terminal.String()+"/"+r.Cause.String()]++
	}
	return m
}

func sortedKeys(m map[string]int) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// statusJSON is a response's status and JSON body (nil when not JSON);
// err is the request's error, fatal.
func statusJSON(t testing.TB, resp *http.Response, err error) (int, map[string]any) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// interpose puts a test server in front of engine i of c: fn gets each
// request with its body read (q.Body restored), and engine, which passes
// a request on to the engine itself.
func interpose(t testing.TB, c *Config, i int, fn func(w http.ResponseWriter, q *http.Request, body []byte, engine http.Handler)) {
	t.Helper()
	target, err := url.Parse(c.URLs[i])
	if err != nil {
		t.Fatal(err)
	}
	engine := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		body, _ := io.ReadAll(q.Body)
		q.Body = io.NopCloser(bytes.NewReader(body))
		fn(w, q, body, engine)
	}))
	t.Cleanup(srv.Close)
	c.URLs[i] = srv.URL
}

// smallSendBuffers gives every accepted connection a 64 KiB send buffer,
// so that a client that stops reading blocks the router's writes soon on
// any host (one tuned for bulk transfer buffers megabytes, and a stalled
// client's test stream would fit in them).
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(64 << 10)
	}
	return c, err
}
