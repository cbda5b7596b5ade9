package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// check lists every error of a bad fleet file and exits 2.
func TestCheckOffline(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(`name: bad
instances:
  list:
    - {name: a, url: "http://127.0.0.1:9001", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
    - {name: b, url: "127.0.0.1:9002", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
    - {name: c, url: "http://127.0.0.1:9001", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
    - {name: d, profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
slo: {ttft: 2s, tpot: 100ms}
`), 0o644)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"narwhal-bench", "check", "--fleet", bad}, &out, &errb)
	if code != 2 {
		t.Fatalf("exit %d, expected 2\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"3 error(s)", "list[1].url (b)", "list[2].url (c)", "also names a", "list[3].url (d): missing"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// A schema error and an SLO error are both listed.
	os.WriteFile(bad, []byte("name: bad\ninstances: {count: 0}\nslo: {ttft: 2, tpot: 100ms}\n"), 0o644)
	out.Reset()
	if code := run(context.Background(), []string{"narwhal-bench", "check", "--fleet", bad}, &out, &errb); code != 2 ||
		!strings.Contains(out.String(), "instances") || !strings.Contains(out.String(), "slo.ttft") {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
}

// check --probe against stub engines: every engine reachable and serving
// the model, every pair hands off KV; an engine without the connector
// fails its pairs (exit 1).
func TestCheckProbe(t *testing.T) {
	spec, err := fleet.Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	zero := 0.0
	sf := firstStubs(t, spec, 3, stub.Options{Model: "stub", TimeScale: &zero})
	var b strings.Builder
	b.WriteString("name: probe\ninstances:\n  list:\n")
	for _, s := range sf.Servers() {
		b.WriteString("    - {name: " + s.ID() + ", url: \"" + s.URL() + "\", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}\n")
	}
	b.WriteString("slo: {ttft: 2s, tpot: 100ms}\n")
	path := filepath.Join(t.TempDir(), "probe.yaml")
	os.WriteFile(path, []byte(b.String()), 0o644)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"narwhal-bench", "check", "--fleet", path, "--probe"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), "  ok\n"); n != 3+6+3 {
		t.Errorf("%d ok rows, expected 3 engines, 6 pairs and 3 side channels:\n%s", n, out.String())
	}
	if n := strings.Count(out.String(), "  yes  "); n != 6 {
		t.Errorf("%d pairs moved KV, expected 6:\n%s", n, out.String())
	}
	sf.Servers()[0].SetFaults(stub.Faults{NoHandoff: true})
	out.Reset()
	code := run(context.Background(), []string{"narwhal-bench", "check", "--fleet", path, "--probe", "--model", "stub"}, &out, &errb)
	if code != 1 || strings.Count(out.String(), "FAIL") != 2 {
		t.Fatalf("exit %d, expected 1 with e0's two pairs failed:\n%s", code, out.String())
	}
	t.Log("\n" + out.String())

	// A wrong side channel (VLLM_NIXL_SIDE_CHANNEL_HOST unset on a
	// multi-host fleet): the decode legs fail under the default policy,
	// and the decode engine's failed-transfer count says why.
	sf.Servers()[0].SetFaults(stub.Faults{SideChannel: "localhost:1"})
	out.Reset()
	code = run(context.Background(), []string{"narwhal-bench", "check", "--fleet", path, "--probe"}, &out, &errb)
	if code != 1 || strings.Count(out.String(), "counted a failed KV transfer from side channel localhost:1") != 2 {
		t.Fatalf("exit %d, expected 1 with e0's two pairs failed by their transfers:\n%s", code, out.String())
	}
	// Two engines naming one side channel: the second is flagged.
	sf.Servers()[1].SetFaults(stub.Faults{SideChannel: "localhost:1"})
	out.Reset()
	run(context.Background(), []string{"narwhal-bench", "check", "--fleet", path, "--probe"}, &out, &errb)
	if !strings.Contains(squeeze(out.String()), "e1 localhost:1 e1 FAIL the same side channel as e0") {
		t.Fatalf("a shared side channel not flagged:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}

// Under kv_load_failure_policy recompute a decode engine that cannot pull
// answers anyway: only its NIXL metrics tell, and check reads them.
func TestCheckProbeSilentRecompute(t *testing.T) {
	zero := 0.0
	spec, _ := fleet.Load("demo")
	sf := firstStubs(t, spec, 2, stub.Options{Model: "stub", TimeScale: &zero, KVLoadFailurePolicy: stub.PolicyRecompute, AllowFaults: true})
	sf.Servers()[0].SetFaults(stub.Faults{SideChannel: "localhost:1"})
	names := []string{"e0", "e1"}
	urls := []string{sf.Servers()[0].URL(), sf.Servers()[1].URL()}
	var out strings.Builder
	if failed := probeFleet(context.Background(), &out, names, urls, "", 10*time.Second, time.Second, probeOptions{pairs: "all", parallel: 4}, nil); failed != 1 {
		t.Fatalf("%d failed, expected e0 -> e1 alone:\n%s", failed, out.String())
	}
	if !strings.Contains(squeeze(out.String()), "e0 -> e1 localhost:1 failed 2") ||
		!strings.Contains(out.String(), "recomputed the prompt (kv_load_failure_policy recompute)") {
		t.Errorf("the silent recompute not named:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}

// fakeEngine answers the probe's two legs as an engine with a handoff
// naming side channel host:port. Its /metrics has NIXL series that never
// move when nixl (a decode engine that computes every prompt itself),
// none otherwise; fakeOpts make it misbehave further.
func fakeEngine(t *testing.T, id, host string, port int, nixl bool) string {
	return fakeEngineWith(t, id, host, port, fakeOpts{nixl: nixl})
}

type fakeOpts struct {
	nixl bool
	// metricsFailAfter: /metrics answers 500 after this many reads (0: never).
	metricsFailAfter int
	// failFrom: a decode leg whose handoff names this side-channel port
	// answers 500, and the failed transfer is counted 50 ms later (vLLM
	// publishes it with a later step); other decode legs count a
	// transfer at once.
	failFrom int
}

func fakeEngineWith(t *testing.T, id, host string, port int, o fakeOpts) string {
	t.Helper()
	var mu sync.Mutex
	reads, moved, failed := 0, 3, 0
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":[{"id":"m"}]}`)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		if o.metricsFailAfter > 0 && reads > o.metricsFailAfter {
			w.WriteHeader(500)
			return
		}
		if o.nixl {
			fmt.Fprintf(w, "vllm:nixl_xfer_time_seconds_count{engine=\"0\",model_name=\"m\"} %d\nvllm:nixl_num_failed_transfers_total{engine=\"0\",model_name=\"m\"} %d\n", moved, failed)
		}
	})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"do_remote_decode":true`) {
			fmt.Fprintf(w, `{"choices":[{"text":"x"}],"usage":{"completion_tokens":1},"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":%q,"remote_request_id":"r","remote_block_ids":[[1]],"remote_host":%q,"remote_port":%d}}`, id, host, port)
			return
		}
		if o.failFrom != 0 && strings.Contains(string(b), fmt.Sprintf(`"remote_port":%d`, o.failFrom)) {
			time.AfterFunc(50*time.Millisecond, func() { mu.Lock(); failed++; mu.Unlock() })
			w.WriteHeader(500)
			io.WriteString(w, `{"error":{"message":"kv load failed","type":"InternalServerError","code":500}}`)
			return
		}
		if o.failFrom != 0 {
			mu.Lock()
			moved++
			mu.Unlock()
		}
		io.WriteString(w, `{"choices":[{"text":"xy"}],"usage":{"completion_tokens":2}}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A decode engine whose NIXL metrics do not move recomputed the prompt: a
// failure. One without NIXL metrics cannot be judged: said, not failed.
func TestCheckProbeNoTransfer(t *testing.T) {
	urls := []string{fakeEngine(t, "a", "127.0.0.1", 5600, true), fakeEngine(t, "b", "127.0.0.1", 5601, false)}
	var out strings.Builder
	if failed := probeFleet(context.Background(), &out, []string{"a", "b"}, urls, "", 10*time.Second, 300*time.Millisecond, probeOptions{pairs: "all", parallel: 4}, nil); failed != 1 {
		t.Fatalf("%d failed, expected b -> a alone:\n%s", failed, out.String())
	}
	for _, want := range []string{"b -> a 127.0.0.1:5601 no 2 ", "FAIL the decode engine counted no KV transfer in 300ms",
		"most often the NIXL handshake with side channel 127.0.0.1:5601 failed", "a -> b 127.0.0.1:5600 ? 2 ", "KV moved ?: no vllm:nixl_ metrics on b"} {
		if !strings.Contains(squeeze(out.String()), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The side-channel table flags a shared side channel, a shared engine id
// and a loopback side channel on an engine others reach from another
// host; engines on one host with loopback side channels are fine.
func TestSideChannels(t *testing.T) {
	h := func(host string, port int, id string) *handoff { return &handoff{host: host, port: port, engineID: id} }
	var out strings.Builder
	n := sideChannels(&out, []string{"a", "b", "c"}, []string{"http://localhost:8000", "http://127.0.0.1:8001", "http://[::1]:8002"},
		[]*handoff{h("localhost", 5600, "x"), h("127.0.0.1", 5601, "y"), nil})
	if n != 0 {
		t.Errorf("one host, loopback side channels: %d flagged:\n%s", n, out.String())
	}
	out.Reset()
	n = sideChannels(&out, []string{"a", "b", "c"}, []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"},
		[]*handoff{h("localhost", 5600, "x"), h("localhost", 5600, "x"), h("10.0.0.3", 5600, "z")})
	if n != 2 {
		t.Errorf("%d flagged, expected a and b:\n%s", n, out.String())
	}
	for _, want := range []string{"a side channel on localhost, which reaches only the engine's own host, while b, c pull from another host: set VLLM_NIXL_SIDE_CHANNEL_HOST to an address of a",
		"the same side channel as a", "the same NIXL engine id as a", "the same side channel as b", "c 10.0.0.3:5600 z ok"} {
		if !strings.Contains(squeeze(out.String()), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// VLLM_NIXL_SIDE_CHANNEL_HOST=0.0.0.0 is advertised as it is: another
	// host's decode engine dials itself.
	out.Reset()
	n = sideChannels(&out, []string{"a", "b"}, []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"},
		[]*handoff{h("0.0.0.0", 5600, "x"), h("10.0.0.2", 5600, "y")})
	if n != 1 || !strings.Contains(out.String(), "a side channel on 0.0.0.0, which reaches only the engine's own host, while b pulls from another host") {
		t.Errorf("0.0.0.0 across hosts: %d flagged:\n%s", n, out.String())
	}
}

// squeeze collapses the runs of spaces a table aligns its columns with.
func squeeze(s string) string {
	return regexp.MustCompile(` {2,}`).ReplaceAllString(s, " ")
}

// Rounds give every ordered pair once (ring: each engine to its two
// neighbours), and no engine prefills or decodes for two pairs of one
// round, so a decode engine's NIXL counts move for one pair at a time.
func TestPairRounds(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for _, ring := range []bool{false, true} {
			seen := map[[2]int]int{}
			for _, round := range pairRounds(n, ring) {
				pre, dec := map[int]bool{}, map[int]bool{}
				for _, p := range round {
					if p[0] == p[1] || pre[p[0]] || dec[p[1]] {
						t.Fatalf("n %d ring %v: round %v has %v twice or to itself", n, ring, round, p)
					}
					pre[p[0]], dec[p[1]] = true, true
					seen[p]++
				}
			}
			want := n * (n - 1)
			if ring {
				want = min(want, 2*n)
			}
			if len(seen) != want {
				t.Errorf("n %d ring %v: %d pairs, expected %d", n, ring, len(seen), want)
			}
			for p, c := range seen {
				if c != 1 {
					t.Errorf("n %d ring %v: %v probed %d times", n, ring, p, c)
				}
				if ring && (p[1]-p[0]+n)%n != 1 && (p[0]-p[1]+n)%n != 1 {
					t.Errorf("n %d ring: %v is not a neighbour pair", n, p)
				}
			}
		}
	}
}

// --pairs ring probes each engine's two neighbours; bad --pairs and
// --parallel exit 2 naming the flag.
func TestCheckProbeRing(t *testing.T) {
	urls := []string{fakeEngine(t, "a", "127.0.0.1", 5600, false), fakeEngine(t, "b", "127.0.0.1", 5601, false),
		fakeEngine(t, "c", "127.0.0.1", 5602, false), fakeEngine(t, "d", "127.0.0.1", 5603, false)}
	var b strings.Builder
	b.WriteString("name: ring\ninstances:\n  list:\n")
	for i, u := range urls {
		fmt.Fprintf(&b, "    - {name: e%d, url: %q, profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}\n", i, u)
	}
	b.WriteString("slo: {ttft: 2s, tpot: 100ms}\n")
	path := filepath.Join(t.TempDir(), "ring.yaml")
	os.WriteFile(path, []byte(b.String()), 0o644)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"narwhal-bench", "check", "--fleet", path, "--probe", "--pairs", "ring", "--parallel", "2"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	got := squeeze(out.String())
	for _, want := range []string{"e0 -> e1 ", "e0 -> e3 ", "e2 -> e3 ", "e3 -> e0 ", "pairs: 8 probed (ring), 8 ok, 0 failed, 0 skipped"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(got, "e0 -> e2 ") {
		t.Errorf("ring probed e0 -> e2:\n%s", out.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pairs", "some"}, `--pairs "some": expected all or ring`},
		{[]string{"--parallel", "0"}, "--parallel 0: expected at least 1"},
		{[]string{"--probe=false", "--pairs", "ring"}, "--pairs: only with --probe"},
	} {
		errb.Reset()
		if code := run(context.Background(), append([]string{"narwhal-bench", "check", "--fleet", path, "--probe"}, c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q", c.args, code, errb.String())
		}
	}
}

// A decode engine whose /metrics stops answering mid-probe is not
// accused of recomputing: its transfer is unverified. A failed transfer
// a decode engine counts after its 500 is charged to that pair, not to
// the next pair into the same engine, which moved KV.
func TestCheckProbeMetricsTrouble(t *testing.T) {
	urls := []string{fakeEngineWith(t, "a", "127.0.0.1", 5600, fakeOpts{nixl: true}), fakeEngineWith(t, "b", "127.0.0.1", 5601, fakeOpts{nixl: true, metricsFailAfter: 1})}
	var out strings.Builder
	if failed := probeFleet(context.Background(), &out, []string{"a", "b"}, urls, "", 10*time.Second, 300*time.Millisecond, probeOptions{pairs: "all", parallel: 4}, nil); failed != 1 {
		t.Fatalf("%d failed, expected b -> a alone:\n%s", failed, out.String())
	}
	if got := squeeze(out.String()); !strings.Contains(got, "a -> b 127.0.0.1:5600 ? 2 ") || !strings.Contains(got, "ok (KV transfer not verified: the decode engine's /metrics: answered 500)") {
		t.Errorf("unreadable metrics:\n%s", out.String())
	}

	// z fails legs from y's side channel and counts each failure late:
	// y -> z (round 1) fails; x -> z (round 2) moves KV and passes.
	// (x and y fail legs from port 1, which no handoff names: they move
	// KV for every pair.)
	urls = []string{fakeEngineWith(t, "x", "127.0.0.1", 5600, fakeOpts{nixl: true, failFrom: 1}), fakeEngineWith(t, "y", "127.0.0.1", 5601, fakeOpts{nixl: true, failFrom: 1}),
		fakeEngineWith(t, "z", "127.0.0.1", 5602, fakeOpts{nixl: true, failFrom: 5601})}
	out.Reset()
	probeFleet(context.Background(), &out, []string{"x", "y", "z"}, urls, "", 10*time.Second, time.Second, probeOptions{pairs: "all", parallel: 4}, nil)
	got := squeeze(out.String())
	for _, want := range []string{"x -> z 127.0.0.1:5600 yes 2 ", "y -> z 127.0.0.1:5601 failed 0 ",
		"(the decode engine counted a failed KV transfer from side channel 127.0.0.1:5601)", "pairs: 6 probed (all), 5 ok, 1 failed"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// firstStubs starts stub engines for the first n instances of spec on
// loopback ports the OS picks, closed at the test's end.
func firstStubs(t *testing.T, spec *fleet.Spec, n int, opts stub.Options) *stub.Fleet {
	t.Helper()
	insts, err := stub.FromFleet(spec, 0, &opts)
	if err != nil {
		t.Fatal(err)
	}
	insts = insts[:n]
	for i := range insts {
		insts[i].Addr = "127.0.0.1:0"
	}
	sf, err := stub.NewFleet(opts, insts)
	if err != nil {
		t.Fatal(err)
	}
	if err := sf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sf.Close)
	return sf
}

// A decode engine whose KV pulls run far slower than the others' (the
// stub's slow fault, standing in for UCX over TCP) is named among the
// slow links, with each pair's size and time; the check still passes.
func TestCheckProbeSlowLinks(t *testing.T) {
	spec, err := fleet.Parse([]byte(`name: links
instances:
  count: 4
  profile: {a: 0, b: 1.0e-6, c: 0.001, slope: 1.0e-8, intercept: 0.002}
kv: {latency: 2ms, bytes_per_token: 131072, bandwidth: 2.5e10}
slo: {ttft: 2s, tpot: 100ms}
`), "links.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sf := firstStubs(t, spec, 4, stub.Options{Model: "stub", AllowFaults: true})
	sf.Servers()[3].SetFaults(stub.Faults{Slow: 20})
	var names, urls []string
	for _, s := range sf.Servers() {
		names, urls = append(names, s.ID()), append(urls, s.URL())
	}
	var out strings.Builder
	if failed := probeFleet(context.Background(), &out, names, urls, "", 10*time.Second, 2*time.Second, probeOptions{pairs: "all", parallel: 4}, nil); failed != 0 {
		t.Fatalf("%d failed:\n%s", failed, out.String())
	}
	got := squeeze(out.String())
	if !regexp.MustCompile(`slow KV links: e0 -> e3 [0-9.]+ [MG]B/s, e1 -> e3 [0-9.]+ [MG]B/s, e2 -> e3 [0-9.]+ [MG]B/s, under a quarter of the median`).MatchString(got) ||
		!regexp.MustCompile(`e0 -> e1 127\.0\.0\.1:\d+ yes, [0-9.]+ MiB in [0-9.]+ms `).MatchString(got) {
		t.Errorf("slow links not named:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}
