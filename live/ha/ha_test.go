package ha

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/core"
	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/internal/etcdtest"
	"github.com/narwhal-bench/narwhal-bench/live"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

func TestParseEndpoints(t *testing.T) {
	got, err := ParseEndpoints("etcd://127.0.0.1:2379,etcd://[::1]:2380,host:1")
	if err != nil || len(got) != 3 || got[0] != "http://127.0.0.1:2379" || got[1] != "http://[::1]:2380" || got[2] != "http://host:1" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "127.0.0.1:2379", "etcd://", "etcd://host", "etcd://a:1,", "etcd://a:1/x"} {
		if _, err := ParseEndpoints(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// dialAs joins the group of cfg as name (not yet a candidate).
func dialAs(t *testing.T, cfg Config, name string) *Node {
	t.Helper()
	cfg.Name = name
	n, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// memJournal keeps a router's records, each with the wall time it was
// written (the records' own clocks are per router).
type memJournal struct {
	mu   sync.Mutex
	recs []event.Record
	wall []time.Time
}

func (m *memJournal) Record(r *event.Record) {
	m.mu.Lock()
	m.recs = append(m.recs, *r)
	m.wall = append(m.wall, time.Now())
	m.mu.Unlock()
}

type member struct {
	node *Node
	rt   *live.Router
	jr   *memJournal
	srv  *httptest.Server
	stop context.CancelFunc
}

func stubFleet(t *testing.T) (*fleet.Spec, []string) {
	spec, err := fleet.Parse([]byte(`name: hatest
instances:
  count: 4
  profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}
slo: {ttft: 2s, tpot: 100ms}
kv: {latency: 1ms}
`), "hatest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := stub.StartLoopback(spec, stub.Options{Model: "stub"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sf.Close)
	var urls []string
	for _, s := range sf.Servers() {
		urls = append(urls, s.URL())
	}
	return spec, urls
}

// lead starts a router for n, which must lead, resuming the published
// state when there is one.
func lead(t *testing.T, n *Node, spec *fleet.Spec, urls []string, opening *live.Resume) *member {
	ctx := context.Background()
	var rs *live.Resume
	if d, err := n.Latest(ctx); err != nil {
		t.Fatal(err)
	} else if d != nil {
		if rs, err = live.ResumeFrom(d.State, spec.Names()); err != nil {
			t.Fatal(err)
		}
	} else {
		rs = opening
	}
	ctrl, err := core.NewController("adaptive", spec.Size())
	if err != nil {
		t.Fatal(err)
	}
	jr := &memJournal{}
	rt, err := live.New(live.Config{Fleet: spec, URLs: urls, Controller: ctrl, Recorder: jr,
		Epoch: n.Epoch(), Fence: n.Admitting, Resume: rs})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	go rt.Run(rctx)
	go n.PublishEvery(rctx, rt, 100*time.Millisecond)
	m := &member{node: n, rt: rt, jr: jr, srv: httptest.NewServer(rt.Handler()), stop: cancel}
	t.Cleanup(func() { m.srv.Close(); cancel(); <-rt.Stopped() })
	return m
}

// TestFailoverNoOverlap runs a leader and a standby on a real etcd under
// load. The leader then freezes (its keep-alives stop, as in a partition
// or a stalled process) while clients keep calling it: it must stop
// admitting on its own before the standby is elected; the standby must
// resume the leader's split and serve. Every admission carries its
// epoch, and the two epochs' admissions do not overlap in time.
func TestFailoverNoOverlap(t *testing.T) {
	ep := etcdtest.Start(t)
	spec, urls := stubFleet(t)
	cfg := Config{Endpoints: []string{"http://" + ep}, Prefix: "/nwb-test/hatest", Lease: 2 * time.Second}
	ctx := context.Background()
	a := dialAs(t, cfg, "a")
	defer a.cli.Close()
	epA, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The leader opens 3P1D (not adaptive's even split), so the standby
	// visibly resumes it.
	split := []event.Role{event.RolePrefill, event.RolePrefill, event.RolePrefill, event.RoleDecode}
	ma := lead(t, a, spec, urls, &live.Resume{Roles: split})
	b := dialAs(t, cfg, "b")
	defer b.Close()
	if l := b.Leader(ctx); l != "a" {
		t.Fatalf("leader %q, want a", l)
	}
	elected := make(chan uint64, 1)
	go func() {
		e, err := b.Campaign(ctx)
		if err != nil {
			t.Error(err)
		}
		elected <- e
	}()

	// Clients: each request goes to a, then to b's server once it exists.
	var mu sync.Mutex
	var mb *member
	var oks, fenced int
	var firstB time.Time
	body := []byte(`{"model":"stub","prompt":"hello there","max_tokens":4}`)
	post := func(url string) int {
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopLoad:
					return
				default:
				}
				code := post(ma.srv.URL)
				mu.Lock()
				if code == 200 {
					oks++
				} else if code == 503 {
					fenced++
				}
				bm := mb
				mu.Unlock()
				if bm != nil && post(bm.srv.URL) == 200 {
					mu.Lock()
					oks++
					if firstB.IsZero() {
						firstB = time.Now()
					}
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	// Freeze a: no more keep-alives of either kind; its lease runs out.
	frozen := time.Now()
	a.cancel()
	a.sess.Orphan()
	var epB uint64
	select {
	case epB = <-elected:
	case <-time.After(10 * time.Second):
		t.Fatal("b not elected 10 s after a froze")
	}
	elect := time.Since(frozen)
	m := lead(t, b, spec, urls, nil)
	mu.Lock()
	mb = m
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		done := !firstB.IsZero()
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	close(stopLoad)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if firstB.IsZero() {
		t.Fatal("b never served")
	}
	t.Logf("a froze; b elected after %v, first request admitted by b after %v; %d served, %d refused by the fenced leader",
		elect.Round(time.Millisecond), firstB.Sub(frozen).Round(time.Millisecond), oks, fenced)
	if epB <= epA {
		t.Fatalf("epochs a %d, b %d: expected b's higher", epA, epB)
	}
	if !a.Lost() || a.Admitting() {
		t.Fatal("the frozen leader still believes it leads")
	}
	// Epochs and overlap.
	_, lastA := admissions(t, ma.jr, epA)
	firstAdmitB, _ := admissions(t, m.jr, epB)
	if lastA.IsZero() || firstAdmitB.IsZero() {
		t.Fatalf("admissions: a's last %v, b's first %v", lastA, firstAdmitB)
	}
	if !lastA.Before(firstAdmitB) {
		t.Fatalf("overlap: a admitted at %v, after b's first admission at %v", lastA, firstAdmitB)
	}
	t.Logf("a's last admission %v before b's first", firstAdmitB.Sub(lastA).Round(time.Millisecond))
	if fenced == 0 {
		t.Error("the frozen leader refused nothing: the load did not reach the fence")
	}
	// b resumed a's split: its opening roles are a's.
	m.jr.mu.Lock()
	for i, r := range split {
		if rec := m.jr.recs[i]; !rec.Opening() || rec.To != r || rec.Epoch != epB {
			t.Errorf("b's opening record %d: %+v, want role %v epoch %d", i, rec, r, epB)
		}
	}
	m.jr.mu.Unlock()
}

// admissions checks that every record of jr carries epoch and returns
// the wall times of its first and last admissions.
func admissions(t *testing.T, jr *memJournal, epoch uint64) (first, last time.Time) {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	for i, r := range jr.recs {
		if r.Epoch != epoch {
			t.Fatalf("record %+v: epoch %d, want %d", r, r.Epoch, epoch)
		}
		if r.Kind == event.KindAdmit {
			if first.IsZero() {
				first = jr.wall[i]
			}
			last = jr.wall[i]
		}
	}
	return first, last
}

// TestCloseWhileBusy closes a leader while it is still publishing and a
// standby while it is still campaigning, as serve's deferred Close does
// when it returns: Close must end the campaign and make later writes
// fail, without a data race on the election (run under -race).
func TestCloseWhileBusy(t *testing.T) {
	ep := etcdtest.Start(t)
	cfg := Config{Endpoints: []string{"http://" + ep}, Prefix: "/nwb-test/close", Lease: 2 * time.Second}
	ctx := context.Background()
	a := dialAs(t, cfg, "a")
	if _, err := a.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, live.State{}); err != nil {
		t.Fatalf("the leader's first publish: %v", err)
	}
	b := dialAs(t, cfg, "b")
	if err := b.Publish(ctx, live.State{}); err == nil {
		t.Fatal("a standby published")
	}
	campaigned := make(chan error, 1)
	go func() { _, err := b.Campaign(ctx); campaigned <- err }()
	publishing := make(chan int, 1)
	go func() {
		n := 0
		for a.Publish(ctx, live.State{}) == nil {
			n++
		}
		publishing <- n
	}()
	time.Sleep(100 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Errorf("closing the standby: %v", err)
	}
	select {
	case err := <-campaigned:
		if err == nil {
			t.Fatal("the closed standby's campaign succeeded while a led")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the standby's campaign")
	}
	_ = a.Close()
	select {
	case n := <-publishing:
		if n == 0 {
			t.Error("the leader never published before Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leader's publishes still succeed after Close")
	}
	if err := a.Publish(ctx, live.State{}); err == nil {
		t.Fatal("a closed node published")
	}
}

// Engine URLs lose their credentials before they are published to etcd;
// the router's own state keeps them.
func TestPublishedStateHasNoCredentials(t *testing.T) {
	s := live.State{Engines: []live.EngineState{{Name: "e0", URL: "http://user:secret@10.0.0.1:8000"}, {Name: "e1", URL: "http://10.0.0.2:8000"}}}
	got := withoutCredentials(s)
	if got.Engines[0].URL != "http://10.0.0.1:8000" || got.Engines[1].URL != "http://10.0.0.2:8000" {
		t.Fatalf("published URLs %q, %q", got.Engines[0].URL, got.Engines[1].URL)
	}
	if s.Engines[0].URL != "http://user:secret@10.0.0.1:8000" {
		t.Fatalf("the router's own state changed: %q", s.Engines[0].URL)
	}
}

// TestSecureEtcd: an etcd serving TLS only, checking client certificates,
// with authentication on, as production etcds run. A router with the CA,
// its client certificate and a user of the routers' prefix leads and
// publishes; each missing or wrong piece is refused with etcd's reason,
// not admitted half-way.
func TestSecureEtcd(t *testing.T) {
	s := etcdtest.StartSecure(t)
	eps, err := ParseEndpoints("etcd://" + s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	good, err := TLSConfig(s.CA, s.ClientCert, s.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Endpoints: eps, Prefix: s.Prefix + "demo/", Lease: time.Second, DialTimeout: 2 * time.Second,
		TLS: good, Username: s.User, Password: s.Password}
	n := dialAs(t, cfg, "r0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	epoch, err := n.Campaign(ctx)
	if err != nil || epoch == 0 {
		t.Fatalf("campaign: epoch %d, %v", epoch, err)
	}
	if err := n.Publish(ctx, live.State{Arm: "adaptive"}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if d, err := n.Latest(ctx); err != nil || d == nil || d.State.Arm != "adaptive" || d.Epoch != epoch {
		t.Fatalf("latest: %+v, %v", d, err)
	}
	if got := n.Leader(ctx); got != "r0" {
		t.Fatalf("leader %q", got)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	// A certificate issued to the user's name logs in with no password
	// (etcd's rule for client certificates).
	named, err := TLSConfig(s.CA, s.UserCert, s.UserKey)
	if err != nil {
		t.Fatal(err)
	}
	byCert := cfg
	byCert.TLS, byCert.Username, byCert.Password = named, "", ""
	n = dialAs(t, byCert, "r2")
	if _, err := n.Campaign(ctx); err != nil {
		t.Fatalf("a certificate named as the user: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	noCert, err := TLSConfig(s.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := TLSConfig(s.OtherCA, s.ClientCert, s.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // in the error
	}{
		{"plain http to a TLS etcd", func(c *Config) { c.TLS = nil }, "serves TLS: give the CA"},
		{"an unknown CA", func(c *Config) { c.TLS = otherCA }, "certificate signed by unknown authority"},
		{"no client certificate", func(c *Config) { c.TLS = noCert }, "certificate required"},
		{"no user", func(c *Config) { c.Username, c.Password = "", "" }, "permission denied"},
		{"a wrong password", func(c *Config) { c.Password = "nope" }, "authentication failed"},
		{"a name without a password", func(c *Config) { c.Password = "" }, "both a name and a password"},
		{"outside the user's prefix", func(c *Config) { c.Prefix = "/elsewhere/" }, "permission denied"},
	} {
		bad := cfg
		bad.Name = "r1"
		c.edit(&bad)
		if c.name == "a wrong password" {
			// Refused as soon as etcd has checked it: a long dial timeout
			// costs nothing, and a loaded machine's slow login no longer
			// reads as a timeout.
			bad.DialTimeout = 30 * time.Second
		}
		n, err := Dial(context.Background(), bad)
		if err == nil {
			// Dial only opens a lease; the election is where a prefix
			// the user may not write is refused.
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = n.Campaign(cctx)
			ccancel()
			n.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, expected an error with %q", c.name, err, c.want)
		}
		t.Logf("%s: %v", c.name, err)
	}
}

func TestTLSConfigFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := dir + "/ca.pem"
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ca, cert, key, want string }{
		{dir + "/missing.pem", "", "", "missing.pem"},
		{notPEM, "", "", "no PEM certificate"},
		{"", dir + "/c.pem", "", "both its certificate and its key"},
		{"", "", dir + "/k.pem", "both its certificate and its key"},
		{"", dir + "/c.pem", dir + "/k.pem", "c.pem"},
	} {
		if _, err := TLSConfig(c.ca, c.cert, c.key); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("TLSConfig(%q, %q, %q): %v, expected %q", c.ca, c.cert, c.key, err, c.want)
		}
	}
}

// A leader that cannot publish its state says so once, and once more when
// it can again, with how long it could not.
func TestPublishHealthLines(t *testing.T) {
	var p publishHealth
	t0 := time.Unix(1000, 0)
	boom := errors.New("etcd: request timed out")
	steps := []struct {
		err  error
		at   time.Duration
		want string
	}{
		{nil, 0, ""},
		{boom, time.Second, "publishing the router's state failed (etcd: request timed out)"},
		{boom, 2 * time.Second, ""},
		{nil, 3500 * time.Millisecond, "works again, after 2.5s"},
		{nil, 4 * time.Second, ""},
	}
	for i, s := range steps {
		line := p.note(s.err, t0.Add(s.at))
		if (s.want == "") != (line == "") || !strings.Contains(line, s.want) {
			t.Errorf("step %d: %q, expected %q", i, line, s.want)
		}
	}
}
