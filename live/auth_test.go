package live

import (
	"bytes"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func writeTenants(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Shares follow the reference's formula (narwhal-serving §1.5.2).
func TestTenantShares(t *testing.T) {
	t.Setenv("K_OPS", "ops-key")
	t.Setenv("K_EVALS", "evals-key")
	for _, c := range []struct {
		yaml  string
		limit int
		want  map[string]int
	}{
		{"required: true\ntenants:\n- {name: ops, key_env: K_OPS, weight: 3}\n- {name: evals, key_env: K_EVALS, weight: 1}\n", 16, map[string]int{"ops": 12, "evals": 4}},
		{"tenants:\n- {name: ops, key_env: K_OPS, weight: 3}\n- {name: evals, key_env: K_EVALS, weight: 1}\n", 4, map[string]int{"ops": 2, "evals": 1, "anonymous": 1}},
		{"required: true\ntenants:\n- {name: ops, key_env: K_OPS, weight: 3}\n- {name: evals, key_env: K_EVALS, weight: 1}\n", 4, map[string]int{"ops": 3, "evals": 1}},
		{"required: true\ntenants:\n- {name: ops, key_env: K_OPS, weight: 3}\n- {name: evals, key_env: K_EVALS, weight: 1, max_concurrent: 4}\n", 100, map[string]int{"ops": 75, "evals": 4}},
	} {
		tf, keys, err := LoadTenants(writeTenants(t, c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		got := NewGate(tf, keys, c.limit).Caps()
		if len(got) != len(c.want) {
			t.Errorf("%d: caps %v, want %v", c.limit, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%d: caps %v, want %v", c.limit, got, c.want)
			}
		}
	}
}

// A tenants file that names a key it cannot read is refused, and the
// error names the variable, never a key.
func TestTenantsRefused(t *testing.T) {
	for body, want := range map[string]string{
		"tenants:\n- {name: ops, key_env: NWB_UNSET_VAR_FOR_TEST, weight: 1}\n":    "key_env NWB_UNSET_VAR_FOR_TEST is not set",
		"tenants:\n- {name: ops, key_file: /nonexistent/key, weight: 1}\n":         "key_file",
		"tenants:\n- {name: ops, weight: 1}\n":                                     "exactly one of key_env and key_file",
		"tenants:\n- {name: anonymous, key_env: HOME, weight: 1}\n":                "unique name",
		"tenants:\n- {name: ops, key_env: HOME, weight: 0}\n":                      "weight: 0: expected a number > 0",
		"tenants:\n- {name: ops, key_env: HOME, weight: .nan}\n":                   "weight: NaN: expected a number > 0",
		"tenants:\n- {name: ops, key_env: HOME, weight: 1, rate: .nan}\n":          "rate: NaN: expected a number >= 0",
		"tenants:\n- {name: ops, key_env: HOME, weight: 1, max_concurrent: 1.9}\n": "tenants[0].max_concurrent: 1.9: expected an integer",
		"tenants:\n- {name: ops, key_env: HOME, weight: \"2\"}\n":                  "tenants[0].weight: \"2\": expected a number",
		"tenants: []\n": "no tenants",
		"tenants:\n- {name: ops, key_env: HOME, weight: 1, rate: 2, burst: 0.5}\n": "burst: 0.5: expected 0",
		"tenants:\n- {name: ops, key_env: HOME, weight: 1, colour: red}\n":         "tenants[0].colour: unknown field: expected one of name",
		// Two tenants on one key: the gate would only ever see the first.
		"tenants:\n- {name: ops, key_env: HOME, weight: 1}\n- {name: evals, key_env: HOME, weight: 3}\n": "tenants[1] (evals) has the key of tenants[0] (ops): expected a key of its own",
	} {
		if _, _, err := LoadTenants(writeTenants(t, body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v, want %q:\n%s", err, want, body)
		}
	}
	kf := filepath.Join(t.TempDir(), "k")
	os.WriteFile(kf, []byte("  file-key\n"), 0o600)
	tf, keys, err := LoadTenants(writeTenants(t, "tenants:\n- {name: ops, key_file: "+kf+", weight: 1}\n"))
	if err != nil || string(keys[0]) != "file-key" || tf.Tenants[0].Name != "ops" {
		t.Fatalf("%v %q", err, keys)
	}
	if short := ShortKeys(tf, keys); len(short) != 1 || short[0] != "ops" {
		t.Errorf("ShortKeys: %q: expected [ops] (an 8-byte key)", short)
	}
	if short := ShortKeys(tf, [][]byte{[]byte("0123456789abcdef")}); len(short) != 0 {
		t.Errorf("ShortKeys: %q for a 16-byte key: expected none", short)
	}
}

// The gate answers 401, 403 and 429 with OpenAI-style bodies, and lets
// keyed calls through within their share and rate.
func TestGateStatuses(t *testing.T) {
	t.Setenv("K_OPS", "ops-key")
	t.Setenv("K_EVALS", "evals-key")
	tf, keys, err := LoadTenants(writeTenants(t, `required: true
tenants:
- {name: ops, key_env: K_OPS, weight: 1, admin: true}
- {name: evals, key_env: K_EVALS, weight: 1, max_concurrent: 1, rate: 2, burst: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(tf, keys, 10)
	clock := time.Unix(1000, 0)
	g.now = func() time.Time { return clock }
	release := make(chan struct{})
	var entered sync.WaitGroup
	inner := http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.Header.Get("X-Hold") != "" {
			entered.Done()
			<-release
		}
		w.Write([]byte("ok"))
	})
	srv := httptest.NewServer(g.Wrap(inner))
	defer srv.Close()
	call := func(method, path, auth string, hold bool) (int, map[string]any) {
		q, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader([]byte("{}")))
		if auth != "" {
			q.Header.Set("Authorization", auth)
		}
		if hold {
			q.Header.Set("X-Hold", "1")
		}
		resp, err := http.DefaultClient.Do(q)
		return statusJSON(t, resp, err)
	}
	code := func(body map[string]any) any {
		if e, ok := body["error"].(map[string]any); ok {
			return e["code"]
		}
		return nil
	}
	if c, b := call("POST", "/v1/completions", "", false); c != 401 || code(b) != "missing_api_key" {
		t.Errorf("no key: %d %v", c, b)
	}
	if c, b := call("POST", "/v1/completions", "Bearer wrong", false); c != 401 || code(b) != "invalid_api_key" {
		t.Errorf("wrong key: %d %v", c, b)
	}
	if c, _ := call("GET", "/health", "", false); c != 200 {
		t.Errorf("/health without a key: %d", c)
	}
	if c, _ := call("GET", "/ready", "", false); c != 200 {
		t.Errorf("/ready without a key: %d", c)
	}
	if c, b := call("GET", "/state", "Bearer evals-key", false); c != 403 || code(b) != "not_admin" {
		t.Errorf("/state as evals: %d %v", c, b)
	}
	if c, _ := call("GET", "/state", "bearer ops-key", false); c != 200 {
		t.Errorf("/state as ops: %d", c)
	}
	// Cordoning is an operator's: refused to a tenant that is not admin.
	if c, b := call("POST", "/engines/e0/cordon", "Bearer evals-key", false); c != 403 || code(b) != "not_admin" {
		t.Errorf("cordon as evals: %d %v", c, b)
	}
	if c, _ := call("POST", "/engines/e0/uncordon", "Bearer ops-key", false); c != 200 {
		t.Errorf("uncordon as ops: %d", c)
	}
	// The scheduled-send header moves a request's measured start: an
	// admin tenant's only (a refusal spends none of evals' rate).
	scheduled := func(auth string) (int, map[string]any) {
		q, _ := http.NewRequest("POST", srv.URL+"/v1/completions", bytes.NewReader([]byte("{}")))
		q.Header.Set("Authorization", auth)
		q.Header.Set(HeaderScheduled, "0")
		resp, err := http.DefaultClient.Do(q)
		return statusJSON(t, resp, err)
	}
	if c, b := scheduled("Bearer evals-key"); c != 403 || code(b) != "not_admin" {
		t.Errorf("%s as evals: %d %v", HeaderScheduled, c, b)
	}
	if c, _ := scheduled("Bearer ops-key"); c != 200 {
		t.Errorf("%s as ops: %d", HeaderScheduled, c)
	}
	// evals: one in flight at most.
	entered.Add(1)
	done := make(chan int)
	go func() { c, _ := call("POST", "/v1/completions", "Bearer evals-key", true); done <- c }()
	entered.Wait()
	if c, b := call("POST", "/v1/completions", "Bearer evals-key", false); c != 429 || code(b) != "tenant_concurrency" {
		t.Errorf("evals over its share: %d %v", c, b)
	}
	if c, _ := call("POST", "/v1/completions", "Bearer ops-key", false); c != 200 {
		t.Errorf("ops meanwhile: %d", c)
	}
	close(release)
	if c := <-done; c != 200 {
		t.Errorf("held call: %d", c)
	}
	// evals: 2 tokens of burst, both spent (one held, one refused for
	// concurrency, which spends none: one left).
	if c, _ := call("POST", "/v1/completions", "Bearer evals-key", false); c != 200 {
		t.Errorf("evals within its rate: %d", c)
	}
	if c, b := call("POST", "/v1/completions", "Bearer evals-key", false); c != 429 || code(b) != "tenant_rate" {
		t.Errorf("evals over its rate: %d %v", c, b)
	}
	clock = clock.Add(time.Second) // two more tokens
	if c, _ := call("POST", "/v1/completions", "Bearer evals-key", false); c != 200 {
		t.Errorf("evals after a second: %d", c)
	}
	// What the gate served and refused, per tenant, on /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(g)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body
	for _, line := range []string{
		`narwhal_tenant_requests_total{outcome="served",tenant="evals"} 3`,
		`narwhal_tenant_requests_total{outcome="tenant_concurrency",tenant="evals"} 1`,
		`narwhal_tenant_requests_total{outcome="tenant_rate",tenant="evals"} 1`,
		`narwhal_tenant_requests_total{outcome="served",tenant="ops"} 2`,
		`narwhal_tenant_in_flight{tenant="evals"} 0`,
		`narwhal_tenant_cap{tenant="evals"} 1`,
	} {
		if !strings.Contains(text.String(), line+"\n") {
			t.Errorf("gate metrics lack %s:\n%s", line, text.String())
		}
	}
}

// recordingTransport keeps the Authorization header of every engine call.
type recordingTransport struct {
	mu    sync.Mutex
	auths map[string]int
}

func (r *recordingTransport) RoundTrip(q *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.auths[q.URL.Path+" "+q.Header.Get("Authorization")]++
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(q)
}

// The engine key reaches the engines on both legs.
func TestEngineKeyOnBothLegs(t *testing.T) {
	rec := &recordingTransport{auths: map[string]int{}}
	rg := startRig(t, rigOpts{configure: func(c *Config) { c.Transport = WithEngineKey(rec, "engine-secret") }})
	defer rg.stop()
	resp, err := http.Post(rg.url+"/v1/completions", "application/json",
		bytes.NewReader([]byte(`{"model":"stub","prompt":"hello","max_tokens":5}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// Two legs, and every other call the router makes to an engine (the
	// liveness sweep's /health and /metrics) carries the key as well.
	if rec.auths["/v1/completions Bearer engine-secret"] != 2 {
		t.Fatalf("engine calls by path and Authorization: %v, want two legs with the key", rec.auths)
	}
	for call := range rec.auths {
		if !strings.HasSuffix(call, " Bearer engine-secret") {
			t.Errorf("engine call without the key: %q", call)
		}
	}
}

// FuzzLoadTenants: any tenants file is read without a panic; an error
// names the file, and a file read whole gives one key per tenant and the
// gate builds from it.
func FuzzLoadTenants(f *testing.F) {
	for _, s := range []string{
		"tenants:\n  - {name: a, key_env: NWB_FUZZ_KEY, weight: 1}\n",
		"required: true\ntenants:\n  - {name: a, key_env: NWB_FUZZ_KEY, weight: 2, rate: 5, burst: 0.5}\n",
		"tenants: []\n", "tenants:\n  - {name: anonymous, key_env: X}\n", "weight: 1\n", "tenants: [", "",
		"anonymous_weight: .nan\ntenants:\n  - {name: a, key_env: NWB_FUZZ_KEY, weight: 1e308, max_concurrent: -1}\n",
	} {
		f.Add([]byte(s))
	}
	os.Setenv("NWB_FUZZ_KEY", "k")
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "tenants.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		tf, keys, err := LoadTenants(p)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(keys) != len(tf.Tenants) {
			t.Fatalf("%d keys for %d tenants", len(keys), len(tf.Tenants))
		}
	})
}
