package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/internal/cliexit"
	"github.com/narwhal-bench/narwhal-bench/internal/journaltest"
	"github.com/narwhal-bench/narwhal-bench/journal"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"narwhal-report"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// writeRun writes a small run: opening roles 2P2D, a move, and requests
// that finish, miss their TTFT, and are refused.
func writeRun(t *testing.T, dir, arm string, rate float64) {
	t.Helper()
	w, err := journal.Create(dir, event.RunMeta{Version: "test", Driver: "sim", Arm: arm, Rate: rate, Trace: "t", Fleet: "f",
		Instances: 4, GPUs: 4, TTFTSLO: 1, TPOTSLO: 0.1}, journal.Options{Sync: journal.SyncOnClose})
	if err != nil {
		t.Fatal(err)
	}
	put := func(r event.Record) {
		if r.Kind != event.KindRoleMove && r.Inst == 0 {
			r.Inst = event.NoInstance
		}
		r.Peer = event.NoInstance
		w.Record(&r)
	}
	for i, to := range []event.Role{event.RolePrefill, event.RolePrefill, event.RoleDecode, event.RoleDecode} {
		put(event.Record{Kind: event.KindRoleMove, Inst: event.Instance(i), From: event.RoleNone, To: to})
	}
	put(event.Record{At: 5 * event.Second, Kind: event.KindRoleMove, Inst: 2, From: event.RoleDecode, To: event.RolePrefill, Cause: event.CauseController})
	s := event.Second
	for i := 1; i <= 10; i++ {
		id := event.RequestID(i)
		at := event.Time(i) * s
		put(event.Record{At: at, Kind: event.KindArrival, Req: id, Ref: at, Tokens: 100, Want: 5, Class: "chat"})
		if i == 10 {
			put(event.Record{At: at, Kind: event.KindRefuse, Req: id, Cause: event.CauseOverload})
			continue
		}
		ttft := s / 4
		if i == 9 {
			ttft = 2 * s
		}
		put(event.Record{At: at, Kind: event.KindAdmit, Req: id, Inst: 1})
		put(event.Record{At: at + ttft, Kind: event.KindPrefillDone, Req: id, Inst: 1})
		put(event.Record{At: at + ttft + s/4, Kind: event.KindFinish, Req: id, Inst: 1, Tokens: 5, Cause: event.CauseStop})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func writeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeRun(t, filepath.Join(root, "static-2P2D@1"), "static:2P2D", 1)
	writeRun(t, filepath.Join(root, "oracle@1"), "oracle", 1)
	writeRun(t, filepath.Join(root, "static-2P2D@2"), "static:2P2D", 2)
	return root
}

func TestFormats(t *testing.T) {
	root := writeRoot(t)
	for _, f := range []string{"text", "markdown", "json", "csv"} {
		code, out, errs := runCLI(t, "--format", f, root)
		if code != 0 || errs != "" {
			t.Fatalf("--format %s: exit %d: %s", f, code, errs)
		}
		switch f {
		case "text":
			if !strings.Contains(out, "Outcomes") || !strings.Contains(out, "static:2P2D") {
				t.Errorf("text output:\n%s", out)
			}
		case "markdown":
			if !strings.Contains(out, "| arm | rate |") {
				t.Errorf("markdown output:\n%s", out)
			}
		case "json":
			var v struct {
				Runs []struct {
					Run       string `json:"run"`
					Offered   int    `json:"offered"`
					Qualified int    `json:"qualified"`
				} `json:"runs"`
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Runs) != 3 || v.Runs[0].Offered != 10 || v.Runs[0].Qualified != 8 {
				t.Errorf("json: %v %+v", err, v)
			}
		case "csv":
			if n := strings.Count(out, "\n"); n != 4 {
				t.Errorf("csv: %d lines, want a header and 3 runs", n)
			}
		}
	}
	// A single run, and the Parquet export, read the same way.
	code, one, _ := runCLI(t, filepath.Join(root, "oracle@1"))
	if code != 0 || !strings.Contains(one, "1 run, 1 arm") {
		t.Errorf("one run: exit %d\n%s", code, one)
	}
	out := filepath.Join(t.TempDir(), "pq")
	if _, err := journal.Export(root, out); err != nil {
		t.Fatal(err)
	}
	_, a, _ := runCLI(t, "--format", "json", root)
	code, b, errs := runCLI(t, "--format", "json", out)
	if code != 0 || a != b {
		t.Errorf("Parquet export: exit %d (%s); same output as the journal: %v", code, errs, a == b)
	}
}

func TestSLOFlags(t *testing.T) {
	root := writeRoot(t)
	_, base, _ := runCLI(t, "--format", "csv", root)
	code, loose, errs := runCLI(t, "--format", "csv", "--ttft-slo", "3s", "--tpot-slo", "200ms", root)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if base == loose || !strings.Contains(loose, ",3,0.2,") {
		t.Errorf("the SLO flags changed nothing:\n%s", loose)
	}
}

func TestPlots(t *testing.T) {
	root := writeRoot(t)
	dir := filepath.Join(t.TempDir(), "plots")
	code, _, errs := runCLI(t, "--plots", dir, root)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, name := range []string{"attainment", "prefill_share", "ttft_cdf", "tpot_cdf", "moves"} {
		for _, ext := range []string{".png", ".svg"} {
			if st, err := os.Stat(filepath.Join(dir, name+ext)); err != nil || st.Size() == 0 {
				t.Errorf("%s%s: %v", name, ext, err)
			}
		}
	}
	if code, _, errs := runCLI(t, "--plots", dir, "--plot-rate", "2", root); code != 0 {
		t.Errorf("--plot-rate 2: exit %d: %s", code, errs)
	}
}

// Bad usage and bad input exit with 2 and say what is wrong; nothing
// panics.
func TestExitCodes(t *testing.T) {
	root := writeRoot(t)
	garbage := t.TempDir()
	os.WriteFile(filepath.Join(garbage, "x.bin"), bytes.Repeat([]byte{0xff, 0}, 300), 0o644)
	corrupt := filepath.Join(t.TempDir(), "run")
	writeRun(t, corrupt, "static:2P2D", 1)
	ents, _ := os.ReadDir(filepath.Join(corrupt, "events"))
	for _, e := range ents {
		os.WriteFile(filepath.Join(corrupt, "events", e.Name()), []byte("garbage garbage garbage"), 0o644)
	}
	newer := filepath.Join(t.TempDir(), "run")
	writeRun(t, newer, "static:2P2D", 1)
	journaltest.BumpSchema(t, newer)

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no directory", nil, "expected a directory"},
		{"one directory twice", []string{root, root}, "is in both"},
		{"missing", []string{filepath.Join(root, "nope")}, "no such directory"},
		{"empty", []string{t.TempDir()}, "empty directory"},
		{"garbage", []string{garbage}, "no journal runs"},
		{"corrupt journal", []string{corrupt}, "event store"},
		{"newer schema", []string{newer}, "upgrade"},
		{"bad format", []string{"--format", "xml", root}, "--format"},
		{"bad SLO", []string{"--ttft-slo", "fast", root}, "--ttft-slo"},
		{"negative SLO", []string{"--tpot-slo", "-1s", root}, "--tpot-slo"},
		{"bad plot rate", []string{"--plots", t.TempDir(), "--plot-rate", "x", root}, "--plot-rate"},
		{"plot rate not swept", []string{"--plots", t.TempDir(), "--plot-rate", "9", root}, "no run at that rate"},
		{"unknown flag", []string{"--bogus", root}, "bogus"},
	}
	for _, c := range cases {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(errs, "internal error") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 mentioning %q", c.name, code, errs, c.want)
		}
	}
}

// Several directories (the shards of run --shard I/N) make one report
// with every run of each, the same as one directory holding them all.
func TestShardsMakeOneReport(t *testing.T) {
	whole := writeRoot(t)
	a, b := t.TempDir(), t.TempDir()
	writeRun(t, filepath.Join(a, "static-2P2D@1"), "static:2P2D", 1)
	writeRun(t, filepath.Join(a, "oracle@1"), "oracle", 1)
	writeRun(t, filepath.Join(b, "static-2P2D@2"), "static:2P2D", 2)
	code, one, errs := runCLI(t, "--format", "csv", whole)
	if code != 0 {
		t.Fatalf("report whole: exit %d: %s", code, errs)
	}
	code, two, errs := runCLI(t, "--format", "csv", a, b)
	if code != 0 {
		t.Fatalf("report shards: exit %d: %s", code, errs)
	}
	if one != two {
		t.Fatalf("the shards' report differs from the whole root's:\n%s\n---\n%s", one, two)
	}
}

// --plot-rate takes the rate as the report prints it (four significant
// digits) for a swept rate that has more; a rate not swept is refused
// before anything is printed.
func TestPlotRateAsPrinted(t *testing.T) {
	root := t.TempDir()
	writeRun(t, filepath.Join(root, "static-2P2D@5.9375"), "static:2P2D", 5.9375)
	writeRun(t, filepath.Join(root, "static-2P2D@3.958"), "static:2P2D", 3.958)
	for _, r := range []string{"5.938", "5.94", "5.9375"} {
		if code, _, errs := runCLI(t, "--plots", filepath.Join(t.TempDir(), "p"), "--plot-rate", r, root); code != 0 {
			t.Errorf("--plot-rate %s: exit %d: %s", r, code, errs)
		}
	}
	code, out, errs := runCLI(t, "--plots", filepath.Join(t.TempDir(), "p"), "--plot-rate", "9.9", root)
	if code != 2 || out != "" || !strings.Contains(errs, "rates here: 3.958, 5.9375") {
		t.Errorf("--plot-rate 9.9: exit %d, stdout %d bytes, stderr %q: want exit 2, nothing printed, the exact rates", code, len(out), errs)
	}
}

// --compare writes text or json only, plots nothing, and with --partial
// pairs runs that are not whole, saying so.
func TestCompareOptions(t *testing.T) {
	root := writeRoot(t)
	cut := t.TempDir()
	w, err := journal.Create(filepath.Join(cut, "static-2P2D@1"), event.RunMeta{Version: "test", Driver: "live", Arm: "static:2P2D", Rate: 1,
		Trace: "t", Fleet: "f", Instances: 4, TTFTSLO: 1, TPOTSLO: 0.1}, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(&event.Record{Kind: event.KindArrival, Req: 1, Tokens: 10, Want: 5, Inst: event.NoInstance, Peer: event.NoInstance})
	if err := w.ClosePartial("interrupted"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--format", "csv"}, {"--format", "markdown"}, {"--plots", t.TempDir()}} {
		if code, _, errs := runCLI(t, append(append([]string{"--compare"}, args...), root, root)...); code != 2 {
			t.Errorf("--compare %v: exit %d (%s): want 2", args, code, errs)
		}
	}
	if code, _, errs := runCLI(t, "--compare", cut, root); code != 2 || !strings.Contains(errs, "--partial") {
		t.Errorf("--compare of a partial run without --partial: exit %d, %s", code, errs)
	}
	code, out, errs := runCLI(t, "--compare", "--partial", cut, root)
	if code != 0 || !strings.Contains(out, "PARTIAL: A's run is not whole (interrupted)") {
		t.Errorf("--compare --partial: exit %d, %s%s", code, out, errs)
	}
}

// A signal during the report (here: before it starts) stops it with 130,
// nothing printed.
func TestReportInterrupted(t *testing.T) {
	root := writeRoot(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(fmt.Errorf("%w by SIGTERM", cliexit.ErrInterrupted))
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"narwhal-report", root}, &out, &errb); code != 130 || out.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q: want 130 and no report", code, out.String(), errb.String())
	}
}
