package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// untar reads a bundle into name -> content.
func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[strings.TrimPrefix(h.Name, "narwhal-bundle/")] = string(b)
	}
}

// TestBundleKeepsNoSecret runs a router with tenant keys, an engine key
// and a fleet whose engine URLs carry a password, sends a prompt with a
// marker, and checks that neither a bundle of the running router nor one
// of its journal holds a key, the password or the prompt, while they do
// hold what a bug report needs.
func TestBundleKeepsNoSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const (
		tenantKey = "tenant-key-7f3a9c2e51"
		adminKey  = "admin-key-c0ffee4411"
		engineKey = "engine-key-9d8e7f6a5b"
		password  = "urlpass-31337abc"
		prompt    = "PROMPT-MARKER-do-not-keep"
	)
	t.Setenv("NWB_T_TENANT", tenantKey)
	t.Setenv("NWB_T_ADMIN", adminKey)
	t.Setenv("NWB_T_ENGINE", engineKey)
	dir := t.TempDir()
	base := freePorts(t, 3)
	tenants := filepath.Join(dir, "tenants.yaml")
	os.WriteFile(tenants, []byte("required: true\ntenants:\n- {name: users, key_env: NWB_T_TENANT, weight: 3}\n- {name: ops, key_env: NWB_T_ADMIN, weight: 1, admin: true}\n"), 0o600)
	fleetFile := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(fleetFile, []byte(fmt.Sprintf(`name: bundletest
instances:
  list:
  - {url: "http://op:%s@127.0.0.1:%d", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
  - {url: "http://op:%s@127.0.0.1:%d", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
slo: {ttft: 2s, tpot: 100ms}
`, password, base+1, password, base+2)), 0o600)
	_, stubErr := child(t, "stub", "--fleet", fleetFile, "--base-port", fmt.Sprint(base+1), "--time-scale", "0.01")
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/health", base+1), stubErr)
	jdir := filepath.Join(dir, "journal")
	url := fmt.Sprintf("http://127.0.0.1:%d", base)
	serve, serveErr := child(t, "serve", "--fleet", fleetFile, "--arm", "static:1P1D", "--listen", fmt.Sprintf("127.0.0.1:%d", base),
		"--journal", jdir, "--tenants", tenants, "--engine-api-key-env", "NWB_T_ENGINE")
	waitHTTP(t, url+"/health", serveErr)
	for i := 0; i < 5; i++ {
		q, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"model":"stub","prompt":"`+prompt+`","max_tokens":4}`))
		q.Header.Set("Authorization", "Bearer "+tenantKey)
		resp, err := http.DefaultClient.Do(q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	live := filepath.Join(dir, "live.tar.gz")
	if code, _, errs := runCLI(t, "bundle", "--out", live, "--router", url, "--api-key-env", "NWB_T_ADMIN",
		"--config", fleetFile, "--config", tenants, "--redact-env", "NWB_T_TENANT", "--redact-env", "NWB_T_ENGINE"); code != 0 {
		t.Fatalf("bundle: exit %d: %s", code, errs)
	}
	serve.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not stop: %s", serveErr)
	}
	// The router's own output and the journal hold no secret either.
	jb := filepath.Join(dir, "journal.tar.gz")
	if code, _, errs := runCLI(t, "bundle", "--out", jb, "--journal", jdir); code != 0 {
		t.Fatalf("bundle: exit %d: %s", code, errs)
	}
	var raw bytes.Buffer
	filepath.Walk(jdir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			raw.Write(b)
		}
		return nil
	})
	check := func(where, s string) {
		for _, secret := range []string{tenantKey, adminKey, engineKey, password, prompt} {
			if strings.Contains(s, secret) {
				t.Errorf("%s holds %q", where, secret)
			}
		}
	}
	check("serve's stderr", serveErr.String())
	check("the journal's files", raw.String())
	lb, jbf := untar(t, live), untar(t, jb)
	for name, body := range lb {
		check("live bundle "+name, body)
	}
	for name, body := range jbf {
		check("journal bundle "+name, body)
	}
	for _, want := range []string{"versions.json", "router/state.txt", "router/health.txt", "router/journal.txt", "config/0-fleet.yaml", "config/1-tenants.yaml"} {
		if lb[want] == "" {
			t.Errorf("live bundle lacks %s: %v", want, keys(lb))
		}
	}
	if !strings.Contains(lb["router/state.txt"], `"split"`) || !strings.Contains(lb["config/0-fleet.yaml"], "://[REDACTED]@127.0.0.1") {
		t.Errorf("state or fleet not as expected:\n%s\n%s", lb["router/state.txt"], lb["config/0-fleet.yaml"])
	}
	if !strings.Contains(jbf["journal-summary.json"], `"finish": 5`) {
		t.Errorf("journal summary: %s", jbf["journal-summary.json"])
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The redactor removes a URL's whole userinfo, a token alone as user
// included; the bundle is 0600 even over an existing file.
func TestBundleRedactsUserinfo(t *testing.T) {
	rd := newRedactor()
	for in, want := range map[string]string{
		"url: http://tok3nUSERONLYsecret@127.0.0.1:16301/v1": "url: http://[REDACTED]@127.0.0.1:16301/v1",
		`"http://op:pw%2Fx@10.0.0.1:8000"`:                   `"http://[REDACTED]@10.0.0.1:8000"`,
		"http://10.0.0.1:8000 and https://h:8443/x":          "http://10.0.0.1:8000 and https://h:8443/x",
		"http://admin:Pw1@atsign@127.0.0.1:19340/v1":         "http://[REDACTED]@127.0.0.1:19340/v1",
		"http://h:1/x?to=a@b.c":                              "http://h:1/x?to=a@b.c",
	} {
		if got := string(rd.apply([]byte(in))); got != want {
			t.Errorf("redact %q = %q, want %q", in, got, want)
		}
	}
	path := filepath.Join(t.TempDir(), "b.tar.gz")
	os.WriteFile(path, []byte("old"), 0o644)
	if err := writeBundle(path, map[string][]byte{"x": []byte("y")}, rd); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("bundle mode %v, %v: want 0600", st.Mode().Perm(), err)
	}
}

// The keys a tenants file given to --config names (in key files or the
// environment) are redacted wherever they turn up, a key file given as a
// --config of its own included, also when another key of the file cannot
// be read here (which is said).
func TestBundleRedactsTenantKeys(t *testing.T) {
	dir := t.TempDir()
	const fileKey, envKey = "filekey-5e1f0a9b77", "envkey-0d15ea5e42"
	t.Setenv("NWB_T_ENVKEY", envKey)
	keyFile := filepath.Join(dir, "evals.key")
	os.WriteFile(keyFile, []byte(fileKey+"\n"), 0o600)
	tenants := filepath.Join(dir, "tenants.yaml")
	os.WriteFile(tenants, []byte("tenants:\n- {name: evals, key_file: "+keyFile+", weight: 1}\n- {name: ops, key_env: NWB_T_ENVKEY, weight: 1, admin: true}\n"+
		"- {name: elsewhere, key_env: NWB_T_UNSET_HERE, weight: 1}\n"), 0o600)
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("ops uses "+envKey+"\n"), 0o600)
	out := filepath.Join(dir, "b.tar.gz")
	if code, _, errs := runCLI(t, "bundle", "--out", out, "--config", tenants, "--config", keyFile, "--config", notes); code != 0 {
		t.Fatalf("bundle: exit %d: %s", code, errs)
	}
	files := untar(t, out)
	for name, body := range files {
		if strings.Contains(body, fileKey) || strings.Contains(body, envKey) {
			t.Errorf("%s holds a tenant's key:\n%s", name, body)
		}
	}
	if len(files) < 4 {
		t.Errorf("bundle files %v: expected versions and the three configs", keys(files))
	}
	// A key this shell cannot read (another tenant's variable) leaves the
	// others redacted, and is said.
	if !strings.Contains(files["notes.txt"], "tenant elsewhere: key_env NWB_T_UNSET_HERE is not set here") {
		t.Errorf("notes.txt does not say which key could not be read:\n%s", files["notes.txt"])
	}
}
