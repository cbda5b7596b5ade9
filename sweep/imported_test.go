package sweep

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/traces"
)

// headCSV writes the header and the first n rows of a shipped Azure trace
// to dir/name and returns the path.
func headCSV(t *testing.T, src, dir, name string, n int) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines[:n+1], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// openFDs counts the process's open file descriptors (Linux).
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

// endSink records how a run's journal was closed.
type endSink struct {
	mu      *sync.Mutex
	ends    map[string]string // run name: "whole" or the partial reason
	name    string
	records int
}

func (s *endSink) Record(*event.Record) { s.records++ }
func (s *endSink) Close() error         { s.end("whole"); return nil }
func (s *endSink) ClosePartial(reason string) error {
	s.end("partial: " + reason)
	return nil
}
func (s *endSink) end(how string) {
	s.mu.Lock()
	s.ends[s.name] = how
	s.mu.Unlock()
}

// A sweep of an imported trace, streamed from its files by every run (up
// to Workers at once) and generated whole for the oracle, leaves no file
// open.
func TestImportedSweepClosesFiles(t *testing.T) {
	dir := t.TempDir()
	a := headCSV(t, "../traces/azure/code.csv", dir, "a.csv", 300)
	b := headCSV(t, "../traces/azure/conv.csv", dir, "b.csv", 300)
	fl, err := fleet.Load("eval8")
	if err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t)
	tr, err := traces.Open(a+"+"+b, "")
	if err != nil {
		t.Fatal(err)
	}
	base := tr.MeanRate()
	for _, arms := range [][]string{{"static:4P4D", "adaptive", "aggregated"}, {"static:4P4D", "oracle"}} {
		res, err := Execute(Config{Trace: tr, Fleet: fl, Arms: arms, Rates: []float64{base, 1.5 * base, 2 * base}, Seed: 1, Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Runs {
			if r.Offered != 600 {
				t.Fatalf("%s at %v: %d offered, want 600", r.Arm, r.Rate, r.Offered)
			}
		}
	}
	// An interrupted sweep stops runs in the middle of their streams.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = Execute(Config{Trace: tr, Fleet: fl, Arms: []string{"static:4P4D", "adaptive", "aggregated"}, Rates: []float64{base, 2 * base},
		Seed: 1, Workers: 4, Context: ctx, Progress: func(done, total int) { cancel() }})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted sweep: %v", err)
	}
	if got := openFDs(t); got != fds {
		t.Fatalf("%d files open after the sweeps, %d before", got, fds)
	}
}

// A file changed under a sweep fails the sweep with the stream's error:
// no run is reported, every journal is closed partial, and no file is
// left open.
func TestImportedSweepFileChanged(t *testing.T) {
	dir := t.TempDir()
	path := headCSV(t, "../traces/azure/code.csv", dir, "a.csv", 400)
	fl, err := fleet.Load("eval8")
	if err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t)
	tr, err := traces.Open(path, "")
	if err != nil {
		t.Fatal(err)
	}
	// The last row's output count gets another digit, in place: same size,
	// same modification time, other bytes.
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := len(strings.TrimRight(string(data), "\r\n")) - 1
	if data[i] == '9' {
		data[i] = '1'
	} else {
		data[i]++
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ends := map[string]string{}
	journal := func(name string, meta event.RunMeta) (Sink, error) {
		return &endSink{mu: &mu, ends: ends, name: name}, nil
	}
	res, err := Execute(Config{Trace: tr, Fleet: fl, Arms: []string{"static:4P4D", "adaptive"}, Seed: 1, Workers: 2, Journal: journal})
	if err == nil {
		t.Fatalf("a sweep over a changed file: no error, %d runs", len(res.Runs))
	}
	if res != nil {
		t.Errorf("a failed sweep returned a result")
	}
	for _, w := range []string{"changed since the trace was opened", path, "SHA-256"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %v\nwant %q", err, w)
		}
	}
	if len(ends) != 2 {
		t.Errorf("journals %v: want both runs'", ends)
	}
	for name, how := range ends {
		if !strings.HasPrefix(how, "partial: failed: ") || !strings.Contains(how, "changed since the trace was opened") {
			t.Errorf("run %s's journal closed %s: want partial, failed", name, how)
		}
	}
	if got := openFDs(t); got != fds {
		t.Fatalf("%d files open after the sweep, %d before", got, fds)
	}
}
