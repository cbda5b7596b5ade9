package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// buildBoth builds narwhal-bench and narwhal-sim into one directory, as
// make build does.
func buildBoth(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "./cmd/narwhal-bench", "./cmd/narwhal-sim")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type result struct {
	stdout, stderr string
	code           int
}

func runBin(t *testing.T, env []string, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return result{out.String(), errb.String(), code}
}

// narwhal-sim is narwhal-bench sim: the same output, errors and exit
// codes for the same command line (its name in messages aside).
func TestSameAsNarwhalBenchSim(t *testing.T) {
	bin := buildBoth(t)
	for _, args := range [][]string{
		{"--trace", "demo", "--arms", "static:4P4D,adaptive", "--rates", "0.5x,1x"},
		{"--trace", "demo", "--arms", "static:4P4D,oracle", "--rates", "1x", "--json"},
		{"--trace", "steady", "--arms", "aggregated", "--seeds", "2", "--rates", "1x", "--json", "--arrival-cv", "2"},
		{"--trace", "nope"},                  // bad input, exit 2
		{"--trace", "demo", "--rates", "-1"}, // bad input, exit 2
		{"--bogus"},                          // an unknown flag, exit 2
		{"--trace", "demo", "--resume"},      // --resume without --journal
		{"--trace", "demo", "extra"},         // a positional argument
		{"--trace", "demo", "--seeds", "2", "--journal", t.TempDir()}, // refused before any hand-over
	} {
		want := runBin(t, nil, filepath.Join(bin, "narwhal-bench"), append([]string{"sim"}, args...)...)
		got := runBin(t, nil, filepath.Join(bin, "narwhal-sim"), args...)
		// Messages start with the program's name; the one for a positional
		// argument names the command (sim there, narwhal-sim here).
		want.stderr = strings.Replace(want.stderr, "narwhal-bench: ", "narwhal-sim: ", 1)
		want.stderr = strings.ReplaceAll(want.stderr, "narwhal-sim: sim: ", "narwhal-sim: ")
		want.stderr = strings.ReplaceAll(want.stderr, " sim takes", " narwhal-sim takes")
		if got != want {
			t.Errorf("%v:\nnarwhal-sim:       %+v\nnarwhal-bench sim: %+v", args, got, want)
		}
	}
}

// A journaled sweep is handed over to narwhal-bench whole: the journal,
// its Parquet export and the output are narwhal-bench's.
func TestJournalHandedOver(t *testing.T) {
	bin := buildBoth(t)
	a, b := t.TempDir(), t.TempDir()
	args := []string{"--trace", "demo", "--arms", "static:4P4D", "--rates", "1x", "--json", "--journal"}
	got := runBin(t, nil, filepath.Join(bin, "narwhal-sim"), append(args, a)...)
	want := runBin(t, nil, filepath.Join(bin, "narwhal-bench"), append(append([]string{"sim"}, args...), b)...)
	if got.code != 0 || got.stdout != want.stdout || strings.ReplaceAll(got.stderr, a, b) != want.stderr {
		t.Fatalf("narwhal-sim --journal:\n%+v\nnarwhal-bench sim --journal:\n%+v", got, want)
	}
	for _, p := range []string{"static-4P4D@2.4", "parquet/requests.parquet"} {
		if _, err := os.Stat(filepath.Join(a, p)); err != nil {
			t.Errorf("narwhal-sim --journal wrote no %s: %v", p, err)
		}
	}
}

// Without narwhal-bench beside it or on PATH, a journaled command line is
// refused, saying what is missing, with the bad-input exit code.
func TestJournalWithoutNarwhalBench(t *testing.T) {
	bin := buildBoth(t)
	alone := filepath.Join(t.TempDir(), "narwhal-sim")
	data, err := os.ReadFile(filepath.Join(bin, "narwhal-sim"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	got := runBin(t, []string{"PATH=" + t.TempDir()}, alone, "--trace", "demo", "--arms", "static:4P4D", "--journal", dir)
	if got.code != 2 || !strings.Contains(got.stderr, "need narwhal-bench") || !strings.Contains(got.stderr, "make build") {
		t.Fatalf("got %+v: expected exit 2 and a message naming narwhal-bench and make build", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("--journal %s: %d entries written by a refused command", dir, len(ents))
	}
}

// In-process: exit codes of the lean command (no build needed).
func TestRunExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"narwhal-sim", "--trace", "demo", "--arms", "static:4P4D", "--rates", "1x"}, 0},
		{[]string{"narwhal-sim", "--fleet", "nope"}, 2},
		{[]string{"narwhal-sim", "--speedup", "0"}, 2},
	} {
		var out, errb bytes.Buffer
		if got := run(context.Background(), c.args, &out, &errb); got != c.code {
			t.Errorf("%v: exit %d, expected %d (stderr %q)", c.args, got, c.code, errb.String())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	if got := run(ctx, []string{"narwhal-sim", "--trace", "demo", "--arms", "adaptive", "--rates", "1x"}, &out, &errb); got != 130 {
		t.Errorf("cancelled: exit %d, expected 130 (stderr %q)", got, errb.String())
	}
}

// BenchmarkDemoSweepProcess times the demo sweep the Python reference runs
// (7 static splits, aggregated and adaptive at the 8 demo rates) as a
// whole narwhal-sim process, start-up included: issue 12's side-by-side
// figure without the reference (bench/vs-python.sh runs both).
func BenchmarkDemoSweepProcess(b *testing.B) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(b.TempDir(), "narwhal-sim")
	build := exec.Command("go", "build", "-o", bin, "./cmd/narwhal-sim")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	args := []string{"--trace", "demo", "--rates", "0.6,1.0,1.6,2.4,3.2,4.4,5.4,6.4",
		"--arms", "static:1P7D,static:2P6D,static:3P5D,static:4P4D,static:5P3D,static:6P2D,static:7P1D,aggregated,adaptive"}
	b.ResetTimer()
	for range b.N {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			b.Fatalf("narwhal-sim: %v\n%s", err, out)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/process")
}
