package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/internal/cliexit"
	"github.com/narwhal-bench/narwhal-bench/internal/etcdtest"
	"github.com/narwhal-bench/narwhal-bench/internal/journaltest"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

// TestExitCodes: one policy, every rough edge of the issue included: bad
// input exits 2 with a message naming the flag (or file and field).
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero.yaml")
	os.WriteFile(zero, []byte("name: zero\nclasses:\n  chat: {input: {dist: fixed, value: 100}, output: {dist: fixed, value: 10}}\nphases:\n  - {duration: 10s, rate: 0}\n"), 0o644)
	bad := filepath.Join(dir, "malformed.yaml")
	os.WriteFile(bad, []byte("name: x\nphases: [\n"), 0o644)
	exp := filepath.Join(dir, "exp.yaml")
	os.WriteFile(exp, []byte("name: e\ntrace: demo\narms: [static:4P4D]\nrates: [\"1e6\"]\n"), 0o644)
	crt, key, _ := etcdtest.ServerCert(t, dir, "router")
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	tlsServe := []string{"serve", "--fleet", "demo", "--tls-cert", crt, "--tls-key", key, "--tls-client-ca"}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim", "traces/chatdoc.yaml"}, 2, `unexpected argument "traces/chatdoc.yaml"`},
		{[]string{"export"}, 2, "expected one journal directory"},
		{[]string{"check", "--fleet", "demo", "--base-port", "70000"}, 2, "has 1 error"},
		{[]string{"serve", "--fleet", "demo", "--base-port", "-5"}, 2, "--base-port -5: 8 engines on ports -5 to 2: expected ports from 1 to 65535"},
		{[]string{"stub", "--fleet", "demo", "--base-port", "65530"}, 2, "expected ports from 1 to 65535"},
		{[]string{"serve", "--fleet", "demo", "--allowed-origins", "https://ok.example,chat.example"}, 2, `--allowed-origins: "chat.example": expected * or origins such as`},
		{[]string{"stub", "--fleet", "demo", "--time-scale", "NaN"}, 2, "time scale NaN: expected a finite number >= 0"},
		{[]string{"sim", "--trace", "demo", "--rates", "1e-9"}, 2, "would offer about 9e-08 requests: expected a rate that offers at least one"},
		{[]string{"sim", "--trace", "demo", "--seed", "5", "--seeds", "1..3"}, 2, "--seed with --seeds 1..3"},
		{[]string{"sim", "--replay", dir, "--rates", "2x"}, 2, "--rates with --replay: the journal fixes it"},
		{[]string{"sim", "--trace", "demo", "--rates", "1.5xx"}, 2, `rate "1.5xx"`},
		{[]string{"sim", "--trace", "demo", "--batch-mean", "0.5"}, 2, "--batch-mean: 0.5: expected a mean batch size >= 1"},
		{[]string{"live", "--target", "http://127.0.0.1:1", "--arrival-cv", "-1"}, 2, "--arrival-cv: -1: expected a coefficient of variation > 0"},
		{[]string{"live", "--target", "http://127.0.0.1:1", "--batch-mean", "0.5"}, 2, "--batch-mean: 0.5: expected a mean batch size >= 1"},
		{[]string{"live", "--target", "http://127.0.0.1:1", "--prefix-cache"}, 2, "--prefix-cache: needs --fleet"},
		{[]string{"serve", "--fleet", "demo", "--engine-cert", "c.pem"}, 2, "--engine-cert and --engine-key: expected both or neither"},
		{[]string{"serve", "--fleet", "demo", "--engine-cacert", "/nonexistent/ca.pem"}, 2, `--engine-cacert "/nonexistent/ca.pem"`},
		{[]string{"live", "--fleet", "demo", "--engine-key", "k.pem"}, 2, "--engine-cert and --engine-key: expected both or neither"},
		{[]string{"live", "--fleet", "demo", "--engine-cacert", "/nonexistent/ca.pem"}, 2, `--engine-cacert "/nonexistent/ca.pem"`},
		{[]string{"live", "--target", "https://127.0.0.1:1", "--engine-cacert", "ca.pem"}, 2, "--engine-cacert: needs --fleet (the router this process runs reaches the fleet's engines with it"},
		{[]string{"serve", "--fleet", "demo", "--tls-client-ca", "ca.pem"}, 2, "--tls-client-ca: needs --tls-cert and --tls-key (client certificates are asked for in the TLS handshake"},
		{append(tlsServe, "/nonexistent/ca.pem"), 2, "--tls-client-ca /nonexistent/ca.pem: open /nonexistent/ca.pem: no such file or directory: expected a PEM bundle of the CA certificates"},
		{append(tlsServe, notPEM), 2, "--tls-client-ca " + notPEM + ": " + notPEM + ": no PEM certificate in it: expected a PEM bundle"},
		{[]string{"live", "--target", "https://127.0.0.1:1", "--cert", "c.pem"}, 2, "--cert and --key: expected both or neither"},
		{[]string{"live", "--target", "https://127.0.0.1:1", "--cacert", "/nonexistent/ca.pem"}, 2, `--cacert "/nonexistent/ca.pem", --cert "", --key "": open /nonexistent/ca.pem`},
		{[]string{"live", "--fleet", "demo", "--cacert", "ca.pem"}, 2, "--cacert: needs --target"},
		{[]string{"bundle", "--out", filepath.Join(dir, "b.tar.gz"), "--cert", "c.pem", "--key", "k.pem"}, 2, "--cert: needs --router"},
		{[]string{"live", "--fleet", "demo", "--stub", "--engine-api-key-env", "NWB_T_ENGINE"}, 2, "--engine-api-key-env: not with --stub (the stub engines this process starts serve plain http://"},
		{[]string{"live", "--target", "http://127.0.0.1:1", "--rate", "inf", "--max-concurrency", "8"}, 2, `--rate "inf": expected a finite rate; for vllm bench serve's --request-rate inf`},
		{[]string{"live", "--target", "http://127.0.0.1:1", "--rate", "0"}, 2, `--rate: rate "0"`},
		{[]string{"live", "--target", "http://127.0.0.1:1", "--limit", "1"}, 1, "--target http://127.0.0.1:1: GET /v1/models: "},
		{[]string{"sim", "foo"}, 2, `narwhal-bench: sim: unexpected argument "foo"`},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"sim", "--seed", "-1"}, 2, "seed"},
		{[]string{"sim", "--rates", "1e6"}, 2, "--rates: 1e+06 req/s"},
		{[]string{"sim", "--rates", "1e9"}, 2, "expected at most 1e+07 req/s"},
		{[]string{"sim", "--rates", "0"}, 2, `--rates: rate "0"`},
		{[]string{"sim", "--speedup", "0"}, 2, "--speedup 0: expected a factor > 0"},
		{[]string{"sim", "--workers", "-3"}, 2, "--workers: -3"},
		{[]string{"sim", "--refine", "9"}, 2, "--refine: 9: expected 0 (the grid alone) to 8 bisections"},
		{[]string{"sim", "--refine", "2", "--journal", filepath.Join(dir, "j")}, 2, "--refine with --journal"},
		{[]string{"sim", "--arms", "static:4P4D,static:4P4D"}, 2, "--arms: static:4P4D given twice"},
		{[]string{"sim", "--trace", zero}, 2, "no phase has arrivals"},
		{[]string{"sim", "--trace", bad}, 2, "--trace: " + bad + ": invalid YAML at line 2"},
		{[]string{"sim", "--resume"}, 2, "--resume: only with --journal"},
		{[]string{"run", "--out", t.TempDir(), exp}, 2, "experiment " + exp + ": field rates: "},
	}
	for _, c := range cases {
		code, _, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errs, c.code, c.want)
		}
		if strings.Contains(errs, "narwhal-bench: --"+filepath.Base(bad)) {
			t.Errorf("%v: stray -- before a file name: %q", c.args, errs)
		}
	}
	if got := exitCode(errors.New("a run failed")); got != cliexit.Failed {
		t.Errorf("plain error: exit %d, want 1", got)
	}
	if got := exitCode(cliexit.ErrInterrupted); got != cliexit.Interrupted {
		t.Errorf("interrupted: exit %d, want 130", got)
	}
}

// TestBuiltinByFileName: --trace and --fleet take a built-in by its file
// name from any directory (the tests run in cmd/narwhal-bench, where no
// chatdoc.yaml exists).
func TestBuiltinByFileName(t *testing.T) {
	for _, args := range [][]string{
		{"--trace", "chatdoc.yaml"},
		{"--trace", "traces/chatdoc.yaml", "--fleet", "eval8.yaml"},
		{"--trace", "chatdoc", "--fleet", "fleet/eval8.yaml"},
	} {
		code, out, errs := runCLI(t, append([]string{"sim", "--arms", "static:4P4D", "--json"}, args...)...)
		if code != 0 || !strings.Contains(out, `"trace": "chatdoc"`) || !strings.Contains(out, `"fleet": "eval8"`) {
			t.Errorf("%v: exit %d: %s", args, code, errs)
		}
	}
}

// TestHelpListsEveryArm: sim --help has one line per arm.
func TestHelpListsEveryArm(t *testing.T) {
	_, out, _ := runCLI(t, "sim", "--help")
	lines := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			lines[f[0]] = true
		}
	}
	for _, arm := range []string{"static:kPmD", "aggregated", "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray", "oracle"} {
		if !lines[arm] {
			t.Errorf("sim --help has no line for %s:\n%s", arm, out)
		}
	}
	if strings.Contains(out, "(default: the trace's seed) (default:") {
		t.Error("doubled default in --seed's help")
	}
}

// TestJournalDir: --journal refuses a directory holding runs; --resume
// keeps whole runs (and refuses another sweep's), redoing partial ones;
// --force starts over.
func TestJournalDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	sweepArgs := []string{"sim", "--trace", "demo", "--arms", "static:4P4D,adaptive", "--rates", "1.6,2.4", "--journal", dir}
	if code, _, errs := runCLI(t, sweepArgs...); code != 0 {
		t.Fatalf("first sweep: exit %d: %s", code, errs)
	}
	code, _, errs := runCLI(t, sweepArgs...)
	if code != 2 || !strings.Contains(errs, "already holds 4 runs") || !strings.Contains(errs, "--resume") {
		t.Fatalf("second sweep into the same directory: exit %d: %s", code, errs)
	}
	// Damage one run: --resume redoes it and keeps the others untouched.
	hurt := filepath.Join(dir, "adaptive@2.4")
	journaltest.Damages[0].Do(t, hurt) // its writer "killed": no end-of-run record
	keep := filepath.Join(dir, "static-4P4D@1.6", "JOURNAL")
	before, _ := os.Stat(keep)
	if code, _, errs := runCLI(t, append(sweepArgs, "--resume")...); code != 0 {
		t.Fatalf("--resume: exit %d: %s", code, errs)
	}
	if after, _ := os.Stat(keep); !after.ModTime().Equal(before.ModTime()) {
		t.Error("--resume rewrote a whole run")
	}
	r, err := journal.Open(hurt)
	if err != nil {
		t.Fatalf("--resume did not redo the incomplete run: %v", err)
	}
	r.Close()
	// Another sweep's settings or runs are refused under --resume.
	if code, _, errs := runCLI(t, append(sweepArgs, "--resume", "--seed", "9")...); code != 2 || !strings.Contains(errs, "other settings") {
		t.Errorf("--resume with another seed: exit %d: %s", code, errs)
	}
	other := []string{"sim", "--trace", "demo", "--arms", "static:4P4D", "--rates", "1.6", "--journal", dir}
	if code, _, errs := runCLI(t, append(other, "--resume")...); code != 2 || !strings.Contains(errs, "does not make") {
		t.Errorf("--resume with other arms: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, append(other, "--force")...); code != 0 {
		t.Fatalf("--force: exit %d: %s", code, errs)
	}
	runs, _ := journal.Runs(dir)
	if len(runs) != 1 {
		t.Errorf("after --force: %d runs, want 1: %v", len(runs), runs)
	}
}

// TestInterrupt: an interrupted sweep exits 130 and leaves only whole runs
// or runs marked partial, never one without its end-of-run record.
func TestInterrupt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cliexit.ErrInterrupted)
	var out, errb bytes.Buffer
	code := run(ctx, []string{"narwhal-bench", "sim", "--trace", "chatdoc", "--arms", "static:4P4D,adaptive,arrow", "--rates", "1x,2x", "--workers", "2", "--journal", dir}, &out, &errb)
	if code != cliexit.Interrupted {
		t.Fatalf("exit %d, want 130: %s", code, errb.String())
	}
	runs, err := journal.Runs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range runs {
		r, err := journal.OpenWith(d, journal.OpenOptions{Partial: true})
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if _, ok := r.End(); !ok {
			t.Errorf("%s: no end-of-run record after an interrupt", d)
		}
		r.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "parquet")); err == nil {
		t.Error("an interrupted sweep exported")
	}
}

// TestExportDamageExit2: export exits 2 on every kind of damage, naming the
// run and the damage.
func TestExportDamageExit2(t *testing.T) {
	for _, d := range journaltest.Damages {
		t.Run(d.Name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "j")
			if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D,adaptive", "--rates", "1.6", "--journal", dir, "--no-parquet"); code != 0 {
				t.Fatalf("sim: exit %d: %s", code, errs)
			}
			d.Do(t, filepath.Join(dir, "static-4P4D@1.6"))
			code, out, errs := runCLI(t, "export", dir)
			if code != 2 || !strings.Contains(errs, d.Want) || !strings.Contains(errs, "static-4P4D@1.6") || strings.Contains(out, "exported") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 naming the run and %q", code, out, errs, d.Want)
			}
			if n := strings.Count(strings.TrimSpace(errs), "\n"); n > 2 {
				t.Errorf("stderr has %d lines (a stack trace?); want a message of a line or two:\n%s", n+1, errs)
			}
		})
	}
}

// TestExportOutputFailsExit1: a whole journal whose export cannot be
// written (the output directory cannot be made) is a failure (exit 1),
// not bad input (exit 2).
func TestExportOutputFailsExit1(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D", "--rates", "1.6", "--journal", dir, "--no-parquet"); code != 0 {
		t.Fatalf("sim: exit %d: %s", code, errs)
	}
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "export", "--out", filepath.Join(file, "pq"), dir)
	if code != 1 || !strings.Contains(errs, "writing the export") {
		t.Errorf("exit %d, stderr %q; want exit 1, writing the export", code, errs)
	}
}

// An imported trace names no fleet: without --fleet it is refused (exit
// 2, naming the built-in fleets), never run on the demo fleet, whose
// profile its prompts may not fit; with --fleet it runs.
func TestImportedTraceNeedsFleet(t *testing.T) {
	trace := "../../traces/azure/code.csv"
	code, _, errs := runCLI(t, "sim", "--trace", trace, "--arms", "static:4P4D", "--rates", "0.5x")
	if code != 2 || !strings.Contains(errs, "--fleet") || !strings.Contains(errs, "eval8") {
		t.Fatalf("exit %d: %s: expected exit 2 naming --fleet and the built-in fleets", code, errs)
	}
	code, _, errs = runCLI(t, "sim", "--trace", trace, "--fleet", "eval8", "--arms", "static:4P4D", "--rates", "0.5x")
	if code != 0 {
		t.Fatalf("with --fleet: exit %d: %s", code, errs)
	}
}

// TestServeBadTLSExit2: a certificate or key that cannot be loaded stops
// serve at start (exit 2, naming the flags), rather than a router that
// says it serves and answers nothing.
func TestServeBadTLSExit2(t *testing.T) {
	dir := t.TempDir()
	fleetFile := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(fleetFile, []byte(`name: two
instances:
  list:
    - {name: a, url: "http://127.0.0.1:1", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
    - {name: b, url: "http://127.0.0.1:2", profile: {a: 0, b: 1.0e-5, c: 0.0005, slope: 1.0e-7, intercept: 0.002}}
slo: {ttft: 2s, tpot: 100ms}
`), 0o644)
	notPEM := filepath.Join(dir, "cert.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	for _, files := range [][2]string{{filepath.Join(dir, "missing.pem"), filepath.Join(dir, "missing.key")}, {notPEM, notPEM}} {
		code, out, errs := runCLI(t, "serve", "--fleet", fleetFile, "--listen", "127.0.0.1:0", "--tls-cert", files[0], "--tls-key", files[1])
		if code != 2 || !strings.Contains(errs, "--tls-cert "+files[0]) || strings.Contains(out+errs, "serving") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 naming --tls-cert", files, code, out, errs)
		}
	}
}

// TestCloseRatesJournal: rates closer than two decimals journal as runs
// of their own (their names used to collide, and the sweep stopped).
func TestCloseRatesJournal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	code, out, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D", "--rates", "1.001,1.002", "--journal", dir, "--no-parquet")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	for _, name := range []string{"static-4P4D@1.001", "static-4P4D@1.002"} {
		if !journal.LooksLikeRun(filepath.Join(dir, name)) {
			t.Errorf("no run %s in %s", name, dir)
		}
	}
}

// TestExportInterrupted: a signal stops the export (exit 130) and it
// writes no manifest, so no reader takes a half export for a whole one.
func TestExportInterrupted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	if code, _, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D", "--rates", "1.6", "--journal", dir, "--no-parquet"); code != 0 {
		t.Fatalf("sim: exit %d: %s", code, errs)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(fmt.Errorf("%w by SIGINT", cliexit.ErrInterrupted))
	var out, errb bytes.Buffer
	out2 := filepath.Join(t.TempDir(), "pq")
	if code := run(ctx, []string{"narwhal-bench", "export", "--out", out2, dir}, &out, &errb); code != 130 {
		t.Fatalf("exit %d, stderr %q: want 130", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(out2, journal.ManifestFile)); err == nil {
		t.Error("an interrupted export wrote its manifest")
	}
}

// A router listening on every interface campaigns under its host's name,
// which says where the leader is; a specific address is kept.
func TestHANameOfUnspecifiedHost(t *testing.T) {
	host, _ := os.Hostname()
	for addr, want := range map[string]string{"[::]:8000": net.JoinHostPort(host, "8000"), "0.0.0.0:8000": net.JoinHostPort(host, "8000"),
		"10.0.0.1:8000": "10.0.0.1:8000"} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := haName(a); got != want {
			t.Errorf("haName(%s) = %q, want %q", addr, got, want)
		}
	}
	rec := httptest.NewRecorder()
	startingHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/ready", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"starting"`) {
		t.Errorf("/ready while starting: %d %s", rec.Code, rec.Body)
	}
}

// TestServeBadHASecurityExit2: etcd's TLS and login flags are checked
// before any connection, each refusal naming its flag.
func TestServeBadHASecurityExit2(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	t.Setenv("NWB_TEST_ETCD_PW", "")
	ha := []string{"--ha", "etcd://127.0.0.1:1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ha-cacert", notPEM}, "only with --ha"},
		{[]string{"--ha-user", "r"}, "only with --ha"},
		{append([]string{"--ha-cacert", notPEM}, ha...), "no PEM certificate"},
		{append([]string{"--ha-cacert", filepath.Join(dir, "missing.pem")}, ha...), "missing.pem"},
		{append([]string{"--ha-cert", notPEM}, ha...), "--ha-cert and --ha-key: expected both or neither"},
		{append([]string{"--ha-user", "r"}, ha...), "--ha-user and --ha-password-env or --ha-password-file: expected both or neither"},
		{append([]string{"--ha-password-file", empty}, ha...), "--ha-password-file: " + empty + " is empty"},
		{append([]string{"--ha-user", "r", "--ha-password-env", "NWB_TEST_ETCD_PW"}, ha...), "--ha-password-env: NWB_TEST_ETCD_PW is not set"},
		{append([]string{"--ha-user", "r", "--ha-password-env", "X", "--ha-password-file", empty}, ha...), "expected one"},
	} {
		args := append([]string{"serve", "--fleet", "demo", "--listen", "127.0.0.1:0"}, c.args...)
		code, out, errs := runCLI(t, args...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(out+errs, "serving") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 with %q", c.args, code, out, errs, c.want)
		}
	}
}

// A simulation with --prefix-cache says so in its journal and in
// runs.parquet's prefix_cache, as a live run with caches does; one without
// says nothing.
func TestSimPrefixCacheMeta(t *testing.T) {
	for _, cached := range []bool{true, false} {
		dir := filepath.Join(t.TempDir(), "j")
		args := []string{"sim", "--trace", "demo", "--arms", "static:4P4D", "--rates", "0.5x", "--journal", dir}
		if cached {
			args = append(args, "--prefix-cache")
		}
		if code, out, errs := runCLI(t, args...); code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errs)
		}
		runs, err := journal.Runs(dir)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs %v, %v", runs, err)
		}
		r, err := journal.Open(runs[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Meta().PrefixCache; got != cached {
			t.Errorf("--prefix-cache %v: journal prefix_cache %v", cached, got)
		}
		r.Close()
		n := 0
		if err := journal.ReadExport(filepath.Join(dir, "parquet"), func(run *journal.ExportedRun) error {
			n++
			if run.Meta.PrefixCache != cached {
				t.Errorf("--prefix-cache %v: runs.parquet prefix_cache %v", cached, run.Meta.PrefixCache)
			}
			return nil
		}); err != nil || n != 1 {
			t.Fatalf("export: %v, %d runs", err, n)
		}
	}
}

// TestJournalFilesIdentical: the same simulation journals the same files,
// byte for byte, whatever GOMAXPROCS, except Pebble's MANIFEST, which
// records each table's creation time (in seconds); the Parquet export is
// identical whole.
func TestJournalFilesIdentical(t *testing.T) {
	var dirs [2]string
	for i, procs := range []int{1, 2} {
		old := runtime.GOMAXPROCS(procs)
		dirs[i] = filepath.Join(t.TempDir(), "j")
		code, out, errs := runCLI(t, "sim", "--trace", "demo", "--arms", "static:4P4D,adaptive", "--rates", "0.5x,1x", "--journal", dirs[i])
		runtime.GOMAXPROCS(old)
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errs)
		}
	}
	files := 0
	err := filepath.WalkDir(dirs[0], func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), "MANIFEST-") {
			return err
		}
		rel, _ := filepath.Rel(dirs[0], p)
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(dirs[1], rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between GOMAXPROCS 1 and 2 (%v)", rel, err)
		}
		files++
		return nil
	})
	if err != nil || files < 20 {
		t.Fatalf("walk: %v, %d files compared", err, files)
	}
}

// A secret read from a file or the environment keeps its spaces, drops a
// file's last line end, and is refused blank or spanning lines, naming
// its flag.
func TestSecretFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(v), 0o600)
		return p
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--engine-api-key-file", write("blank", "  \n")}, "is empty"},
		{[]string{"--engine-api-key-file", write("two", "a\nb\n")}, "--engine-api-key-file: " + filepath.Join(dir, "two") + " holds a line break"},
		{[]string{"--engine-api-key-env", "NWB_TEST_BLANK"}, "--engine-api-key-env: NWB_TEST_BLANK is not set in the environment, or blank"},
	} {
		t.Setenv("NWB_TEST_BLANK", "   ")
		code, out, errs := runCLI(t, append([]string{"serve", "--fleet", "demo", "--listen", "127.0.0.1:0"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(out+errs, "serving") {
			t.Errorf("serve %v: exit %d, %q: expected exit 2 with %q", c.args, code, errs, c.want)
		}
		// live --fleet reads the engine key the same way, before any run.
		code, out, errs = runCLI(t, append([]string{"live", "--fleet", "demo", "--limit", "1"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(out+errs, "requests at") {
			t.Errorf("live %v: exit %d, %q: expected exit 2 with %q", c.args, code, errs, c.want)
		}
	}
}

// serve --stub reads its security flags before any stub starts: a bad one
// is the only thing on stderr, not the last of eight stub lines.
func TestServeStubBadFlagFirst(t *testing.T) {
	for _, args := range [][]string{{"--tls-cert", "c.pem"}, {"--ha", "etcd://127.0.0.1:1", "--ha-user", "r"}} {
		code, out, errs := runCLI(t, append([]string{"serve", "--fleet", "demo", "--stub", "--listen", "127.0.0.1:0", "--base-port", "19481"}, args...)...)
		if code != 2 || strings.Contains(errs, "stub e0 at") || strings.Contains(out+errs, "serving") {
			t.Errorf("%v: exit %d, stderr %q: expected exit 2 before any stub starts", args, code, errs)
		}
	}
}
