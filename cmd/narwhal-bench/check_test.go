package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	opts := stub.Options{Model: "stub", TimeScale: &zero}
	insts, err := stub.FromFleet(spec, 0, &opts)
	if err != nil {
		t.Fatal(err)
	}
	insts = insts[:3]
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
	defer sf.Close()
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
	if n := strings.Count(out.String(), "  ok\n"); n != 3+6 {
		t.Errorf("%d ok rows, expected 3 engines and 6 pairs:\n%s", n, out.String())
	}
	sf.Servers()[0].SetFaults(stub.Faults{NoHandoff: true})
	out.Reset()
	code := run(context.Background(), []string{"narwhal-bench", "check", "--fleet", path, "--probe", "--model", "stub"}, &out, &errb)
	if code != 1 || strings.Count(out.String(), "FAIL") != 2 {
		t.Fatalf("exit %d, expected 1 with e0's two pairs failed:\n%s", code, out.String())
	}
	t.Log("\n" + out.String())
}
