package live

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// Tests against a real Prometheus (Debian's prometheus package: prometheus
// and promtool). CI installs it (.ci/run) and fails without it; elsewhere
// the tests skip, saying so.

const rulesDir = "../deploy/prometheus"

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed: CI installs Debian's prometheus package (.ci/run: apt-get install -y prometheus)", name)
		}
		t.Skipf("%s is not installed (apt-get install prometheus): skipping the Prometheus tests", name)
	}
	return p
}

// The alert rules load and pass their unit tests at virtual timestamps.
func TestAlertRules(t *testing.T) {
	promtool := needTool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "narwhal-rules.yml"}, {"test", "rules", "narwhal-rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// prom is a Prometheus server started by a test on loopback.
type prom struct {
	t   *testing.T
	url string
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func hostPort(t *testing.T, u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Host
}

// startProm runs prometheus scraping the router (job narwhal-router) and
// its engines (job engines) every 300 ms, with the project's alert rules.
func startProm(t *testing.T, r *rig) *prom {
	bin := needTool(t, "prometheus")
	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join(rulesDir, "narwhal-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// One target per engine, labelled with its fleet name, as
	// docs/operations.md configures it.
	var engines []string
	for _, s := range r.stubs.Servers() {
		engines = append(engines, fmt.Sprintf("{targets: ['%s'], labels: {engine: %s}}", hostPort(t, s.URL()), s.ID()))
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 300ms, scrape_timeout: 290ms, evaluation_interval: 300ms}
rule_files: ['%s']
scrape_configs:
  - job_name: narwhal-router
    static_configs: [{targets: ['%s']}]
  - job_name: engines
    static_configs: [%s]
`, rules, hostPort(t, r.url), strings.Join(engines, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs strings.Builder
	var mu sync.Mutex
	cmd.Stdout = writerFunc(func(p []byte) { mu.Lock(); logs.Write(p); mu.Unlock() })
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("prometheus log:\n%s", logs.String())
			mu.Unlock()
		}
	})
	p := &prom{t: t, url: "http://" + addr}
	waitFor(t, "prometheus ready", func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }

// promResult is an instant query's answer.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func (p *prom) query(q string) (promResult, error) {
	var out promResult
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("%s: %s", err, b)
	}
	if out.Status != "success" {
		return out, fmt.Errorf("query %q: %s", q, out.Error)
	}
	return out, nil
}

// vector runs q and returns its samples keyed by the label named by key
// ("" for a single unlabelled value).
func (p *prom) vector(q, key string) map[string]float64 {
	p.t.Helper()
	res, err := p.query(q)
	if err != nil {
		p.t.Fatal(err)
	}
	m := map[string]float64{}
	for _, s := range res.Data.Result {
		v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		m[s.Metric[key]] = v
	}
	return m
}

// A real Prometheus scrapes a router and its stub engines under a bounded
// load; PromQL's counts equal the router's GET /state counts, the engines
// are up, every alert rule evaluates without error, and every panel query
// of the Grafana dashboard is accepted.
func TestPrometheusScrape(t *testing.T) {
	needTool(t, "prometheus")
	r := startRig(t, rigOpts{n: 2, arm: "static:1P1D", stub: stub.Options{TimeScale: zero()}})
	p := startProm(t, r)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 0; i < 40; i++ {
		if i == 34 {
			wg.Wait()
			r.stubs.Servers()[0].SetFaults(stub.Faults{NoHandoff: true}) // the last six fail: no_handoff
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			resp := post(t, r, "/v1/completions", fmt.Sprintf(`{"model":"stub","prompt":"scrape me %d","max_tokens":%d}`, i, 2+i%5), nil)
			io.Copy(io.Discard, resp.Body)
		}(i)
	}
	wg.Wait()
	st, _ := r.router.State()
	want := map[string]float64{"finished": float64(st.Counts.Finished), "failed": float64(st.Counts.Failed)}
	if st.Counts.Arrived != 40 || st.Counts.Finished != 34 || st.Counts.Failed != 6 {
		t.Fatalf("/state counts %+v: expected 40 arrived, 34 finished, 6 failed", st.Counts)
	}
	var got map[string]float64
	var arrived map[string]float64
	ok := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = p.vector(`sum by (outcome) (narwhal_requests_total{job="narwhal-router"})`, "outcome")
		arrived = p.vector(`narwhal_requests_arrived_total{job="narwhal-router"}`, "")
		if got["finished"] == want["finished"] && got["failed"] == want["failed"] && arrived[""] == float64(st.Counts.Arrived) {
			ok = true
			break
		}
	}
	if !ok {
		t.Fatalf("PromQL outcomes %v, arrived %v: expected /state's %v and %d arrived", got, arrived, want, st.Counts.Arrived)
	}
	if c := p.vector(`sum by (cause) (narwhal_requests_total{job="narwhal-router",outcome="failed"})`, "cause"); c["no_handoff"] != 6 {
		t.Errorf("failures by cause %v: expected 6 no_handoff", c)
	}
	if c := p.vector(`narwhal_missing_handoffs_total`, ""); c[""] != float64(st.Counts.NoHandoff) {
		t.Errorf("missing handoffs %v, /state %d", c, st.Counts.NoHandoff)
	}
	if c := p.vector(`sum(narwhal_ttft_seconds_count)`, ""); c[""] != 34 {
		t.Errorf("TTFT observations %v, expected one per prefill that returned a handoff (34)", c)
	}
	var up map[string]float64
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		// A scrape may time out on a loaded machine: wait for one good
		// scrape of both.
		if up = p.vector(`sum(max_over_time(up{job="engines"}[1m]))`, ""); up[""] == 2 {
			break
		}
	}
	if up[""] != 2 {
		t.Errorf("engines up %v, expected both stubs scraped", up)
	}
	// The decode engine's NIXL series count one transfer per handoff
	// (the six without one pulled nothing), and no failure.
	var moved map[string]float64
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if moved = p.vector(`sum by (engine) (vllm:nixl_xfer_time_seconds_count{job="engines"})`, "engine"); moved["e1"] == 34 {
			break
		}
	}
	if moved["e0"] != 0 || moved["e1"] != 34 {
		t.Errorf("KV transfers by engine %v, expected 34 into e1", moved)
	}
	if f := p.vector(`sum(vllm:nixl_num_failed_transfers_total{job="engines"})`, ""); f[""] != 0 {
		t.Errorf("failed KV transfers %v, expected none", f)
	}
	if roles := p.vector(`narwhal_engine_role{role="prefill"} == 1`, "engine"); len(roles) != 1 || roles["e0"] != 1 {
		t.Errorf("prefill role series %v, expected e0", roles)
	}
	// The engine panels' series carry the router's engine names, and
	// vLLM's own engine label survives as exported_engine.
	if n := p.vector(`count by (engine) (vllm:num_requests_running{job="engines",engine=~"e0|e1",exported_engine="0"})`, "engine"); len(n) != 2 || n["e0"] != 1 || n["e1"] != 1 {
		t.Errorf("vLLM gauges by engine %v, expected one series each for e0 and e1", n)
	}
	if n := p.vector(`count by (engine) (vllm:kv_cache_usage_perc{job="engines"} or vllm:gpu_cache_usage_perc{job="engines"})`, "engine"); len(n) != 2 {
		t.Errorf("KV usage by engine %v, expected e0 and e1", n)
	}
	// Every alert rule evaluates cleanly.
	waitFor(t, "the rules evaluated", func() bool {
		resp, err := http.Get(p.url + "/api/v1/rules")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name, Health, LastError string
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&v) != nil || len(v.Data.Groups) == 0 {
			return false
		}
		for _, g := range v.Data.Groups {
			for _, rule := range g.Rules {
				if rule.Health == "err" {
					t.Fatalf("rule %s: %s", rule.Name, rule.LastError)
				}
				if rule.Health != "ok" {
					return false
				}
			}
		}
		return true
	})
	// Every dashboard panel's query is valid PromQL for this Prometheus.
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%d dashboard queries: expected the board's panels", len(exprs))
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$engines_job", "engines", "$engine", ".*", "$job", ".*")
	for _, e := range exprs {
		if _, err := p.query(vars.Replace(e)); err != nil {
			t.Errorf("dashboard panel query rejected: %v", err)
		}
	}
	// A query of a misspelt series is valid PromQL and reads nothing:
	// every series a panel names is one the router or an engine serves.
	served := map[string]bool{}
	for _, u := range append([]string{r.url}, stubURLs(r)...) {
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if line == "" || line[0] == '#' {
				continue
			}
			served[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
		}
	}
	name := regexp.MustCompile(`\b(narwhal_[a-z_]+|vllm:[a-z_:]+)`)
	for _, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			if !served[n] && !strings.HasPrefix(n, "narwhal_tenant_") && !(n == "vllm:gpu_cache_usage_perc" && served["vllm:kv_cache_usage_perc"]) {
				t.Errorf("dashboard query names %s, which neither the router nor an engine serves: %s", n, e)
			}
		}
	}
}

func stubURLs(r *rig) []string {
	var out []string
	for _, s := range r.stubs.Servers() {
		out = append(out, s.URL())
	}
	return out
}

// dashboardExprs extracts every panel target's expr from the Grafana JSON.
func dashboardExprs(t *testing.T) []string {
	b, err := os.ReadFile("../deploy/grafana/narwhal.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	if re := regexp.MustCompile(`\$[a-z_]+`); true {
		for _, e := range out {
			for _, v := range re.FindAllString(e, -1) {
				switch v {
				case "$__rate_interval", "$__interval", "$engines_job", "$engine", "$job":
				default:
					t.Errorf("query %q uses %s, which the board does not define", e, v)
				}
			}
		}
	}
	return out
}
