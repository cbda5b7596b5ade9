package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/narwhal-bench/narwhal-bench/internal/etcdtest"
)

// rotateCert puts a new certificate and key at certFile and keyFile,
// written beside them and renamed over, as a certificate manager does, and
// returns its serial number.
func rotateCert(t *testing.T, certFile, keyFile string) int64 {
	t.Helper()
	c, k, serial := etcdtest.ServerCert(t, t.TempDir(), "router")
	for _, f := range [][2]string{{c, certFile}, {k, keyFile}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1]+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f[1]+".new", f[1]); err != nil {
			t.Fatal(err)
		}
	}
	return serial.Int64()
}

// stderrOf reads what a child process wrote to stderr so far, under the
// lock its writer takes (the child's output is copied in by a goroutine
// of os/exec's).
func stderrOf(cmd *exec.Cmd) string {
	lw := cmd.Stderr.(*lockedWriter)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.(*bytes.Buffer).String()
}

// servedSerial is the serial number of the certificate the router at addr
// presents to a new handshake (0 when the handshake fails).
func servedSerial(addr string) int64 {
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return 0
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// SIGHUP makes serve read its certificate and key again (a rotated
// certificate is served from the next handshake, with no restart); a
// pair that does not load is said and the old one kept; the router goes
// on serving and stops cleanly on SIGTERM.
func TestServeTLSReloadOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := rotateCert(t, certFile, keyFile)
	base := freePorts(t, 3)
	addr := fmt.Sprintf("127.0.0.1:%d", base)
	serve, _ := child(t, "serve", "--fleet", "demo", "--stub", "--stub-time-scale", "0", "--base-port", fmt.Sprint(base+1),
		"--listen", addr, "--tls-cert", certFile, "--tls-key", keyFile, "--arm", "static:4P4D")
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s: %s", what, stderrOf(serve))
	}
	wait("the first certificate", func() bool { return servedSerial(addr) == first })

	second := rotateCert(t, certFile, keyFile)
	if err := serve.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait("the rotated certificate", func() bool { return servedSerial(addr) == second })

	os.WriteFile(keyFile, []byte("not a key"), 0o600)
	serve.Process.Signal(syscall.SIGHUP)
	wait("the failed reload said", func() bool { return strings.Contains(stderrOf(serve), "still serving the certificate loaded before") })
	if s := servedSerial(addr); s != second {
		t.Fatalf("after a failed reload the router serves serial %d: expected %d kept", s, second)
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderrOf(serve))
	}
}

// A router listening beyond loopback without tenant keys says so at
// start: anyone who reaches it may use it and read its operator routes.
func TestServeOpenListenNoted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	base := freePorts(t, 3)
	serve, errs := child(t, "serve", "--fleet", "demo", "--stub", "--stub-time-scale", "0", "--base-port", fmt.Sprint(base+1),
		"--listen", fmt.Sprintf("0.0.0.0:%d", base), "--arm", "static:4P4D")
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/health", base), errs)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderrOf(serve), "reachable beyond this machine") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stderrOf(serve), "--tenants is not set") {
		t.Errorf("no note of an open router:\n%s", stderrOf(serve))
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderrOf(serve))
	}
}

// A tenant key short enough to guess is said at start, naming the
// tenant, never the key; a long one is not.
func TestServeShortTenantKeyNoted(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NWB_T_SHORT", "pw123")
	t.Setenv("NWB_T_LONG", "7f3a9c2e51c0ffee4411")
	tenants := filepath.Join(dir, "tenants.yaml")
	os.WriteFile(tenants, []byte("tenants:\n- {name: users, key_env: NWB_T_SHORT, weight: 1}\n- {name: ops, key_env: NWB_T_LONG, weight: 1}\n"), 0o600)
	// --stub-time-scale without --stub stops serve after the security
	// flags are read, before anything listens.
	code, _, errs := runCLI(t, "serve", "--fleet", "demo", "--tenants", tenants, "--stub-time-scale", "1")
	if code != 2 || !strings.Contains(errs, "the key of users is under 16 bytes") || strings.Contains(errs, "pw123") || strings.Contains(errs, " ops ") {
		t.Errorf("exit %d, stderr:\n%s\nexpected exit 2 and a note naming users alone, without its key", code, errs)
	}
}

// tlsEngines are two stub engines (a child process) behind a TLS front
// that requires a client certificate (vLLM --ssl-certfile, --ssl-ca-certs,
// --ssl-cert-reqs 2): fleet is a fleet file naming the front's https://
// urls; ca verifies the front's certificate, cert and key are a client
// certificate it accepts; handshakes counts the handshakes it completed.
// The stubs' KV side channel stays their own, as NIXL's is.
type tlsEngines struct {
	fleet, ca, cert, key string
	handshakes           *atomic.Int64
}

func startTLSEngines(t *testing.T) tlsEngines {
	t.Helper()
	dir := t.TempDir()
	engCert, engKey, _ := etcdtest.ServerCert(t, dir, "engine")
	clientCA, clientCert, clientKey := etcdtest.ClientCert(t, dir, "router-client")
	pair, err := tls.LoadX509KeyPair(engCert, engKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(clientCA)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(caPEM)
	fleetOf := func(name string, urls ...string) string {
		f := filepath.Join(dir, name+".yaml")
		os.WriteFile(f, []byte(fmt.Sprintf(`name: %s
instances:
  list:
  - {url: "%s", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
  - {url: "%s", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
slo: {ttft: 2s, tpot: 100ms}
`, name, urls[0], urls[1])), 0o600)
		return f
	}
	base := freePorts(t, 2)
	_, stubErr := child(t, "stub", "--fleet", fleetOf("plain", fmt.Sprintf("http://127.0.0.1:%d", base), fmt.Sprintf("http://127.0.0.1:%d", base+1)),
		"--time-scale", "0.01")
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/health", base), stubErr)
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/health", base+1), stubErr)
	e := tlsEngines{ca: filepath.Join(dir, "engine-ca.pem"), cert: clientCert, key: clientKey, handshakes: &atomic.Int64{}}
	var urls []string
	for i := 0; i < 2; i++ {
		target, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", base+i))
		proxy := httputil.NewSingleHostReverseProxy(target)
		proxy.FlushInterval = -1
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: proxy, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients,
			VerifyConnection: func(tls.ConnectionState) error { e.handshakes.Add(1); return nil }},
			ErrorLog: log.New(io.Discard, "", 0)}
		go srv.ServeTLS(ln, "", "")
		t.Cleanup(func() { srv.Close() })
		urls = append(urls, "https://"+ln.Addr().String())
	}
	e.fleet = fleetOf("tls", urls...)
	return e
}

// The router reaches engines that serve HTTPS and require a client
// certificate with --engine-cacert, --engine-cert and --engine-key;
// without its certificate the engines refuse it.
func TestServeEngineMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	e := startTLSEngines(t)
	fleetFile, ca, clientCert, clientKey, handshakes := e.fleet, e.ca, e.cert, e.key, e.handshakes
	base := freePorts(t, 2)
	ask := func(router string) (int, string) {
		resp, err := http.Post(router+"/v1/completions", "application/json", strings.NewReader(`{"model":"stub","prompt":"hello there","max_tokens":4}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	with := fmt.Sprintf("http://127.0.0.1:%d", base)
	serve, serveErr := child(t, "serve", "--fleet", fleetFile, "--arm", "static:1P1D", "--listen", with[len("http://"):],
		"--engine-cacert", ca, "--engine-cert", clientCert, "--engine-key", clientKey)
	waitHTTP(t, with+"/health", serveErr)
	if strings.Contains(stderrOf(serve), "no engine URL is https://") {
		t.Errorf("a note that the engine TLS flags are unused, with https engines:\n%s", stderrOf(serve))
	}
	if code, body := ask(with); code != 200 || !strings.Contains(body, `"completion_tokens":4`) {
		t.Fatalf("through engines with client certificates: %d %s\n%s", code, body, serveErr)
	}
	if handshakes.Load() == 0 {
		t.Fatal("no TLS handshake reached the engines' front")
	}
	serve.Process.Signal(syscall.SIGTERM)
	serve.Wait()
	// check --probe reaches the engines the same way (both two-leg pairs
	// through the TLS front), and fails without the client certificate.
	if code, out, errs := runCLI(t, "check", "--fleet", fleetFile, "--probe", "--timeout", "10s",
		"--engine-cacert", ca, "--engine-cert", clientCert, "--engine-key", clientKey); code != 0 {
		t.Fatalf("check --probe with client certificates: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := runCLI(t, "check", "--fleet", fleetFile, "--probe", "--timeout", "10s",
		"--engine-cacert", ca); code != 1 {
		t.Fatalf("check --probe without the client certificate: exit %d, expected 1\n%s", code, out)
	}
	// The CA alone: the engines' front refuses the router's handshakes.
	without := fmt.Sprintf("http://127.0.0.1:%d", base+1)
	_, errs2 := child(t, "serve", "--fleet", fleetFile, "--arm", "static:1P1D", "--listen", without[len("http://"):],
		"--engine-cacert", ca, "--request-timeout", "5s")
	waitHTTP(t, without+"/health", errs2)
	if code, body := ask(without); code == 200 {
		t.Fatalf("engines that require a client certificate answered a router without one: %s", body)
	}
	// The flags with plain http:// engines are said to be unused.
	code, _, errs := runCLI(t, "serve", "--fleet", "demo", "--engine-cacert", ca, "--listen", "256.0.0.1:1")
	if code != 2 || !strings.Contains(errs, "no engine URL is https://") {
		t.Errorf("exit %d: %s: expected the note, then --listen's refusal", code, errs)
	}
}

// live --fleet runs the router in this process in front of engines that
// serve HTTPS and require a client certificate: with the engine flags the
// run goes through; without the client certificate no request succeeds
// and the run fails (exit 1), saying why.
func TestLiveEngineMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	e := startTLSEngines(t)
	_, tracePath := liveFiles(t, "2s")
	args := []string{"live", "--fleet", e.fleet, "--arm", "static:1P1D", "--trace", tracePath, "--limit", "3", "--request-timeout", "10s"}
	code, out, errs := runCLI(t, append(args, "--engine-cacert", e.ca, "--engine-cert", e.cert, "--engine-key", e.key)...)
	if code != 0 || !strings.Contains(out, "3/3") || strings.Contains(out, "errors") {
		t.Fatalf("live through engines with client certificates: exit %d\n%s\n%s", code, out, errs)
	}
	if strings.Contains(errs, "no engine URL is https://") {
		t.Errorf("a note that the engine TLS flags are unused, with https engines:\n%s", errs)
	}
	if e.handshakes.Load() == 0 {
		t.Fatal("no TLS handshake reached the engines' front")
	}
	code, out, errs = runCLI(t, append(args, "--engine-cacert", e.ca)...)
	// The error names the cause: the engines' front asks for a certificate.
	// The engines are checked before the trace is played.
	if code != 1 || !strings.Contains(errs, "the fleet's engines must answer before the run") || !strings.Contains(errs, "the engines' /health as the router reaches them") ||
		!strings.Contains(errs, "certificate") || out != "" {
		t.Fatalf("live without the client certificate: exit %d, expected 1 before any request\n%s\n%s", code, out, errs)
	}
	t.Logf("without the client certificate:\n%s", errs)
	// The flags with plain http:// engines are said to be unused.
	code, _, errs = runCLI(t, "live", "--fleet", "demo", "--engine-cacert", e.ca, "--rate", "0")
	if code != 2 || !strings.Contains(errs, "no engine URL is https://") || !strings.Contains(errs, "--rate") {
		t.Errorf("exit %d: %s: expected the note, then --rate's refusal", code, errs)
	}
}

// mtlsClient is an HTTP client that verifies the router with ca and, when
// cert is set, presents cert and key.
func mtlsClient(t *testing.T, ca, cert, key string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: x509.NewCertPool()}
	cfg.RootCAs.AppendCertsFromPEM(pem)
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		// Presented whatever CAs the server names (crypto/tls would
		// otherwise keep back a certificate of another CA's).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

// serve --tls-client-ca requires a client certificate signed by that CA
// on every route (mutual TLS, as vLLM --ssl-cert-reqs 2): the OpenAI
// client with one gets its completion; without one, or with one from
// another CA, the handshake fails, /health too. live --target and bundle
// --router reach it with --cacert, --cert and --key.
func TestServeClientCertificates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	certFile, keyFile, _ := etcdtest.ServerCert(t, dir, "router")
	routerCA := filepath.Join(dir, "router-ca.pem")
	clientCA, clientCert, clientKey := etcdtest.ClientCert(t, dir, "client")
	_, strangerCert, strangerKey := etcdtest.ClientCert(t, dir, "stranger")
	base := freePorts(t, 9)
	// Beyond loopback, without --tenants: no note of an open router, since
	// only holders of a certificate get in.
	url := fmt.Sprintf("https://127.0.0.1:%d", base)
	serve, _ := child(t, "serve", "--fleet", "demo", "--stub", "--stub-time-scale", "0", "--base-port", fmt.Sprint(base+1),
		"--listen", fmt.Sprintf("0.0.0.0:%d", base), "--arm", "static:4P4D", "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCA)
	with := mtlsClient(t, routerCA, clientCert, clientKey)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := with.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/health never answered a client with a certificate: %v\n%s", url, err, stderrOf(serve))
		}
	}
	oc := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0), option.WithHTTPClient(with))
	got, err := oc.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stub",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello there")}, MaxTokens: openai.Int(4)})
	if err != nil || got.Usage.CompletionTokens != 4 {
		t.Fatalf("a client with a certificate signed by --tls-client-ca: %v %+v\n%s", err, got, stderrOf(serve))
	}
	for _, c := range []struct {
		name, want string
		hc         *http.Client
	}{
		{"no certificate", "tls: certificate required", mtlsClient(t, routerCA, "", "")},
		{"a certificate from another CA", "tls: unknown certificate authority", mtlsClient(t, routerCA, strangerCert, strangerKey)},
	} {
		name, hc := c.name, c.hc
		for _, route := range []string{"/health", "/metrics"} {
			resp, err := hc.Get(url + route)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("%s: GET %s: %s, expected the handshake to fail", name, route, resp.Status)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: GET %s: %v, expected %q", name, route, err, c.want)
			}
		}
		oc := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0), option.WithHTTPClient(hc))
		if _, err := oc.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stub",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello")}, MaxTokens: openai.Int(2)}); err == nil {
			t.Fatalf("%s: a completion went through", name)
		}
	}
	// live --target and bundle --router present the client certificate.
	_, tracePath := liveFiles(t, "2s")
	args := []string{"live", "--target", url, "--trace", tracePath, "--limit", "3", "--request-timeout", "10s", "--cacert", routerCA}
	if code, out, errs := runCLI(t, append(args, "--cert", clientCert, "--key", clientKey)...); code != 0 || !strings.Contains(out, "3/3") {
		t.Fatalf("live --target with --cert: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := runCLI(t, args...); code != 1 || !strings.Contains(errs, "GET /v1/models") {
		t.Fatalf("live --target without --cert: exit %d, expected 1 naming GET /v1/models\n%s\n%s", code, out, errs)
	}
	archive := filepath.Join(dir, "diag.tar.gz")
	if code, _, errs := runCLI(t, "bundle", "--out", archive, "--router", url, "--cacert", routerCA, "--cert", clientCert, "--key", clientKey); code != 0 {
		t.Fatalf("bundle --router with --cert: exit %d: %s", code, errs)
	}
	if files := untar(t, archive); !strings.Contains(files["router/health.txt"], "ok") || !strings.Contains(files["router/metrics.txt"], "narwhal_requests_total") {
		t.Errorf("bundle --router with --cert: health %q, notes %q", files["router/health.txt"], files["notes.txt"])
	}
	if errs := stderrOf(serve); !strings.Contains(errs, "serving static:4P4D") || strings.Contains(errs, "reachable beyond this machine") {
		t.Errorf("expected the start line and no note of an open router:\n%s", errs)
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderrOf(serve))
	}
}

// serve answers browsers (CORS, --allowed-origins) in front of its tenant
// gate: a preflight needs no key, and the 401 for a missing key carries
// the header a page needs to read it.
func TestServeCORSBeforeTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	t.Setenv("NWB_T_UI", "7f3a9c2e51c0ffee4411")
	tenants := filepath.Join(dir, "tenants.yaml")
	os.WriteFile(tenants, []byte("required: true\ntenants:\n- {name: ui, key_env: NWB_T_UI, weight: 1}\n"), 0o600)
	base := freePorts(t, 9)
	url := fmt.Sprintf("http://127.0.0.1:%d", base)
	serve, errs := child(t, "serve", "--fleet", "demo", "--stub", "--stub-time-scale", "0", "--base-port", fmt.Sprint(base+1),
		"--listen", fmt.Sprintf("127.0.0.1:%d", base), "--arm", "static:4P4D", "--tenants", tenants)
	waitHTTP(t, url+"/health", errs)
	do := func(method string, hdr map[string]string) *http.Response {
		q, _ := http.NewRequest(method, url+"/v1/completions", strings.NewReader(`{"model":"stub","prompt":"p","max_tokens":2}`))
		q.Header.Set("Origin", "http://ui.example")
		for k, v := range hdr {
			q.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(q)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := do(http.MethodOptions, map[string]string{"Access-Control-Request-Method": "POST"}); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight without a key: %d %v: expected 200 with Access-Control-Allow-Origin", resp.StatusCode, resp.Header)
	}
	if resp := do(http.MethodPost, map[string]string{"Content-Type": "application/json"}); resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("POST without a key: %d %v: expected a 401 the page can read", resp.StatusCode, resp.Header)
	}
	// vLLM's SageMaker health route needs no key, as /health.
	if resp, err := http.Get(url + "/ping"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /ping without a key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderrOf(serve))
	}
}
