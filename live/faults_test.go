package live

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// metricValue reads one series from the router's /metrics (0 when absent).
func metricValue(t testing.TB, r *rig, series string) float64 {
	t.Helper()
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, series+" "), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A decode engine killed mid-stream and restarted: the streams on it end
// exactly once each with a cause (the clients see an error event, never a
// silent truncation), the engine is ejected, requests meanwhile go to the
// other decode engine, and once it runs again as a new process it is
// readmitted under generation 1, journaled and exported.
func TestEngineKilledMidStreamAndRestarted(t *testing.T) {
	slow := 1.0
	r := startRig(t, rigOpts{n: 3, arm: "static:1P2D", stub: stub.Options{TimeScale: &slow},
		configure: func(c *Config) { c.SweepInterval = 50 * time.Millisecond }})
	victim := r.stubs.Servers()[1]
	var wg sync.WaitGroup
	var mu sync.Mutex
	ended := map[string]int{}
	stream := func() {
		defer wg.Done()
		q, _ := http.NewRequest(http.MethodPost, r.url+"/v1/completions",
			strings.NewReader(`{"model":"stub","prompt":"a long answer","max_tokens":400,"stream":true}`))
		resp, err := http.DefaultClient.Do(q)
		if err != nil {
			t.Error(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		kind := "other"
		switch {
		case strings.Contains(string(b), `"error"`):
			kind = "error event"
		case strings.Contains(string(b), "[DONE]"):
			kind = "done"
		}
		mu.Lock()
		ended[kind]++
		mu.Unlock()
	}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go stream()
	}
	waitFor(t, "streams decoding on the victim", func() bool {
		st, _ := r.router.State()
		return st.Engines[1].DecodeLegs >= 3
	})
	time.Sleep(50 * time.Millisecond) // tokens are flowing
	victim.Kill()
	waitFor(t, "the victim ejected", func() bool { st, _ := r.router.State(); return st.Engines[1].Down })
	// Meanwhile requests are served by the other decode engine.
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"during","max_tokens":3}`, nil)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("a request while the victim is down: status %d", resp.StatusCode)
	}
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the victim readmitted", func() bool {
		st, _ := r.router.State()
		return !st.Engines[1].Down && st.Engines[1].Generation == 1
	})
	wg.Wait()
	if g := metricValue(t, r, `narwhal_engine_generation{engine="e1"}`); g != 1 {
		t.Errorf("narwhal_engine_generation{engine=\"e1\"} = %v, expected 1", g)
	}
	if n := metricValue(t, r, `narwhal_engine_ejections_total{engine="e1"}`); n != 1 {
		t.Errorf("ejections of e1 = %v, expected 1", n)
	}
	if n := metricValue(t, r, `narwhal_engine_up{engine="e1"}`); n != 1 {
		t.Errorf("e1 up = %v after readmission, expected 1", n)
	}
	r.stop()
	recs := r.jr.records()
	rows := checkJournal(t, recs)
	var health []string
	for _, rec := range recs {
		if rec.Kind == event.KindHealth && rec.Inst == 1 {
			health = append(health, rec.Text+"/"+strconv.FormatInt(rec.Tokens, 10))
		}
	}
	if strings.Join(health, ",") != "down/0,up/1" {
		t.Errorf("health records of e1: %v, expected down (generation 0) then up as generation 1", health)
	}
	o := outcomes(rows)
	broken := 0
	for k, n := range o {
		if strings.HasPrefix(k, "fail/") {
			broken += n
		}
	}
	if broken == 0 || ended["error event"] != broken || ended["other"] != 0 || len(rows) != 9 {
		t.Fatalf("outcomes %v, client ends %v: expected each stream on the victim to fail once with a cause and its client to see an error event", o, ended)
	}
}

// A prefill engine answering 502 (or refusing connections) costs the
// client nothing: the prefill is re-placed once on the other prefill
// engine; a 4xx never counts against an engine; a same-process engine that
// answers again is not readmitted until it restarts.
func TestPrefillRetryAndReadmission(t *testing.T) {
	var broken atomic.Bool // e0 answers inference requests 502
	r := startRig(t, rigOpts{n: 3, arm: "static:2P1D", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) {
			c.SweepInterval = -1
			interpose(t, c, 0, func(w http.ResponseWriter, q *http.Request, b []byte, engine http.Handler) {
				if broken.Load() && strings.HasPrefix(q.URL.Path, "/v1/") {
					http.Error(w, `{"error":{"message":"bad gateway","type":"BadGateway","param":null,"code":502}}`, http.StatusBadGateway)
					return
				}
				engine.ServeHTTP(w, q)
			})
		}})
	// A 4xx (prompt plus output beyond the engine's max_model_len) is the
	// request's fault: five of them leave every engine in.
	for i := 0; i < 5; i++ {
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"x","max_tokens":100000}`, nil)
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 400 {
			t.Fatalf("status %d, expected the engine's 400", resp.StatusCode)
		}
	}
	broken.Store(true)
	for i := 0; i < 10; i++ {
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"retry me `+strconv.Itoa(i)+`","max_tokens":4}`, nil)
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, expected its prefill re-placed", i, resp.StatusCode)
		}
	}
	st, _ := r.router.State()
	if !st.Engines[0].Down || st.Engines[1].Down || st.Engines[2].Down {
		t.Fatalf("engines down %v %v %v: expected only e0 ejected", st.Engines[0].Down, st.Engines[1].Down, st.Engines[2].Down)
	}
	if st.Split["prefill"] != 2 || st.SplitOnline["prefill"] != 1 || st.SplitOnline["decode"] != 1 {
		t.Fatalf("split %v, online %v: expected two prefill engines, one of them online, and the decode engine", st.Split, st.SplitOnline)
	}
	// Healed but the same process: it stays out.
	broken.Store(false)
	time.Sleep(300 * time.Millisecond) // six probe intervals
	if st, _ := r.router.State(); !st.Engines[0].Down {
		t.Fatal("e0 readmitted without a new process")
	}
	if err := r.stubs.Servers()[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "e0 readmitted", func() bool { st, _ := r.router.State(); return !st.Engines[0].Down && st.Engines[0].Generation == 1 })
	if n := metricValue(t, r, `narwhal_leg_retries_total{stage="prefill"}`); n < 1 || n > 3 {
		t.Errorf("prefill retries %v, expected 1 to 3 (until the breaker opened)", n)
	}
	r.stop()
	rows := checkJournal(t, r.jr.records())
	if o := outcomes(rows); o["finish/length"] != 10 || len(rows) != 15 {
		t.Fatalf("outcomes %v: expected the 10 requests finished", o)
	}
}

// An ejected engine that heals as the same process (a stall that clears)
// is readmitted, in its generation, once it has answered every probe for
// SameProcessHold; ejected again, it must answer twice as long.
func TestSameProcessReadmittedAfterHold(t *testing.T) {
	var broken atomic.Bool // e0 answers inference requests 502
	var mu sync.Mutex
	var logs []string
	r := startRig(t, rigOpts{n: 3, arm: "static:2P1D", stub: stub.Options{TimeScale: zero()},
		configure: func(c *Config) {
			c.SweepInterval = -1
			// /health answers while e0 fails its requests, so the hold
			// runs from the ejection: long enough for the round's last
			// requests to be placed elsewhere first, on a busy machine.
			c.SameProcessHold = time.Second
			c.Logf = func(format string, args ...any) {
				mu.Lock()
				logs = append(logs, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			interpose(t, c, 0, func(w http.ResponseWriter, q *http.Request, b []byte, engine http.Handler) {
				if broken.Load() && strings.HasPrefix(q.URL.Path, "/v1/") {
					http.Error(w, `{"error":{"message":"bad gateway","type":"BadGateway","param":null,"code":502}}`, http.StatusBadGateway)
					return
				}
				engine.ServeHTTP(w, q)
			})
		}})
	logged := func(part string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range logs {
			if strings.Contains(l, part) {
				return true
			}
		}
		return false
	}
	for round, hold := range []string{"1s", "2s"} {
		broken.Store(true)
		for i := 0; i < 6; i++ {
			resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"round `+strconv.Itoa(round)+` `+strconv.Itoa(i)+`","max_tokens":4}`, nil)
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("round %d request %d: status %d, expected its prefill re-placed", round, i, resp.StatusCode)
			}
		}
		if st, _ := r.router.State(); !st.Engines[0].Down {
			t.Fatalf("round %d: e0 not ejected", round)
		}
		broken.Store(false)
		waitFor(t, "e0 readmitted as the same process", func() bool {
			st, _ := r.router.State()
			return !st.Engines[0].Down
		})
		if st, _ := r.router.State(); st.Engines[0].Generation != 0 {
			t.Fatalf("round %d: e0 readmitted as generation %d: expected its own, 0", round, st.Engines[0].Generation)
		}
		if !logged("readmitted if it answers every probe for " + hold) {
			t.Fatalf("round %d: no hold of %s logged: %q", round, hold, logs)
		}
	}
	r.stop()
	var health []string
	for _, rec := range r.jr.records() {
		if rec.Kind == event.KindHealth && rec.Inst == 0 {
			health = append(health, rec.Text+"/"+strconv.FormatInt(rec.Tokens, 10))
		}
	}
	if strings.Join(health, ",") != "down/0,up/0,down/0,up/0" {
		t.Errorf("health records of e0: %v, expected down and up twice, generation 0", health)
	}
}

// GET /ready is 200 while an engine is up and 503 (code no_engine) once
// every engine fails: all but the last are ejected, the last stays in at
// the threshold (never every engine ejected for good); /health stays 200
// (liveness), and /ready is 200 again once an engine answers.
func TestReadiness(t *testing.T) {
	r := startRig(t, rigOpts{stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		c.SweepInterval = 20 * time.Millisecond
	}})
	defer r.stop()
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(r.url + path)
		return statusJSON(t, resp, err)
	}
	if c, b := get("/ready"); c != 200 || b["status"] != "ready" || b["engines_up"] != 2.0 {
		t.Fatalf("/ready with both engines up: %d %v", c, b)
	}
	for _, s := range r.stubs.Servers() {
		s.Kill()
	}
	waitFor(t, "one engine ejected, the other failing", func() bool {
		return r.router.failing(r.router.engines[0]) && r.router.failing(r.router.engines[1])
	})
	if st, _ := r.router.State(); st.Engines[0].Down == st.Engines[1].Down {
		t.Fatalf("engines down %v %v: expected exactly one ejected, the last one up kept in", st.Engines[0].Down, st.Engines[1].Down)
	}
	c, b := get("/ready")
	e, _ := b["error"].(map[string]any)
	if c != http.StatusServiceUnavailable || e == nil || e["code"] != "no_engine" {
		t.Fatalf("/ready with every engine down: %d %v, expected 503 no_engine", c, b)
	}
	if c, _ := get("/health"); c != 200 {
		t.Fatalf("/health with every engine down: %d, expected 200 (liveness)", c)
	}
	for _, s := range r.stubs.Servers() {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both engines back", func() bool {
		return !r.router.failing(r.router.engines[0]) && !r.router.failing(r.router.engines[1])
	})
	if c, b := get("/ready"); c != 200 || b["engines_up"] != 2.0 {
		t.Fatalf("/ready with both engines back: %d %v", c, b)
	}
}

// Engines that answer 503 (overloaded, draining, asleep) and go on doing
// so after the one re-placement: the client gets a 503 with the engine's
// Retry-After, not a 502, journaled fail unavailable.
func TestEngine503PassedOn(t *testing.T) {
	r := startRig(t, rigOpts{n: 2, arm: "aggregated", stub: stub.Options{TimeScale: zero()}, configure: func(c *Config) {
		c.SweepInterval = -1
		for i := range c.URLs {
			interpose(t, c, i, func(w http.ResponseWriter, q *http.Request, b []byte, engine http.Handler) {
				if !strings.HasPrefix(q.URL.Path, "/v1/") {
					engine.ServeHTTP(w, q)
					return
				}
				w.Header().Set("Retry-After", "7")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, `{"error":{"message":"the engine is sleeping","type":"ServiceUnavailableError","param":null,"code":503}}`)
			})
		}
	}})
	resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"anyone there","max_tokens":4}`, nil)
	code, body := statusJSON(t, resp, nil)
	e, _ := body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if code != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "7" || !strings.Contains(msg, "sleeping") {
		t.Fatalf("%d %v, Retry-After %q: expected the engines' 503 with Retry-After 7", code, body, resp.Header.Get("Retry-After"))
	}
	// Busy is not broken: three more such answers eject no engine (an
	// ejected engine stays out until its process restarts).
	for i := 0; i < 3; i++ {
		resp := post(t, r, "/v1/completions", `{"model":"stub","prompt":"still busy?","max_tokens":4}`, nil)
		io.Copy(io.Discard, resp.Body)
	}
	if st, _ := r.router.State(); st.Engines[0].Down || st.Engines[1].Down {
		t.Fatalf("engines down %v %v after 503s: expected both in", st.Engines[0].Down, st.Engines[1].Down)
	}
	r.stop()
	if o := outcomes(checkJournal(t, r.jr.records())); o["fail/unavailable"] != 4 || len(o) != 1 {
		t.Fatalf("outcomes %v: expected four fail unavailable", o)
	}
}
