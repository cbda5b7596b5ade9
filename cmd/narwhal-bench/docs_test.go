package main

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/report"
)

var update = flag.Bool("update", false, "rewrite the JSON example in docs/sim.md from the command's output")

// simJSONRE finds the JSON example in docs/sim.md: the command line in
// backticks, then the fenced block of its output.
var simJSONRE = regexp.MustCompile("(?s)`narwhal-bench (sim [^`]*--json)`\nprints:\n\n```json\n(.*?)```\n")

// TestSimDocJSON: docs/sim.md's JSON example is exactly what its command
// prints (go test ./cmd/narwhal-bench -run SimDocJSON -update rewrites it).
func TestSimDocJSON(t *testing.T) {
	const path = "../../docs/sim.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := simJSONRE.FindSubmatchIndex(doc)
	if m == nil {
		t.Fatalf("%s: no JSON example (a `narwhal-bench sim ... --json` line, \"prints:\", a ```json block)", path)
	}
	args := strings.Fields(string(doc[m[2]:m[3]]))
	code, out, errs := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errs)
	}
	if !docBlockIs(t, path, doc, m[4], m[5], out) {
		t.Errorf("%s: the JSON example differs from what `narwhal-bench %s` prints (rerun with -update and review):\n%s", path, strings.Join(args, " "), out)
	}
}

// docBlockIs reports whether doc[from:to] is out; with -update it rewrites
// the file at path with out there instead and reports true.
func docBlockIs(t *testing.T, path string, doc []byte, from, to int, out string) bool {
	t.Helper()
	if string(doc[from:to]) == out {
		return true
	}
	if !*update {
		return false
	}
	doc = append(append(append([]byte{}, doc[:from]...), out...), doc[to:]...)
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return true
}

// TestReportDocExample: docs/report.md's example prints exactly what the
// report of its sweep prints (go test ./cmd/narwhal-bench -run
// ReportDocExample -update rewrites it). The sweep runs here; the report
// is narwhal-report's text, which is report.Load and Write.
func TestReportDocExample(t *testing.T) {
	const path = "../../docs/report.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := reportExampleRE.FindSubmatchIndex(doc)
	if m == nil {
		t.Fatalf("%s: no example (## Example, a block with the sim and narwhal-report lines, \"prints\", a block)", path)
	}
	cmd := strings.ReplaceAll(string(doc[m[2]:m[3]]), "\\\n", " ")
	args := strings.Fields(cmd)
	dir := t.TempDir()
	for i, a := range args {
		if a == "/tmp/rj" {
			args[i] = dir
		}
	}
	if code, _, errs := runCLI(t, args[1:]...); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errs)
	}
	rep, err := report.Load(dir, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.Write(&b, report.FormatText); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !docBlockIs(t, path, doc, m[4], m[5], out) {
		t.Errorf("%s: the example differs from what its report prints (rerun with -update and review the diff)", path)
	}
}

// reportExampleRE finds docs/report.md's example: the sim command (up to
// its --journal), the narwhal-report line, then the printed block.
var reportExampleRE = regexp.MustCompile("(?s)## Example\n\n```\n(narwhal-bench sim .*?--journal /tmp/rj)\nnarwhal-report [^\n]*\n```\n\nprints[^\n]*\n[^\n]*\n\n```\n(.*?)```\n")

// TestReadmeDemo: the README's `make demo` output is what make demo's sim
// command prints, up to the README's "..." (its arms and rates read from
// the Makefile).
func TestReadmeDemo(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(DEMOARMS|DEMORATES)\s*:=\s*(\S+)`).FindAllSubmatch(mk, -1) {
		vars[string(m[1])] = string(m[2])
	}
	if vars["DEMOARMS"] == "" || vars["DEMORATES"] == "" {
		t.Fatalf("Makefile: no DEMOARMS or DEMORATES: %v", vars)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```\n(trace: demo \\(base rate.*?\n)\\.\\.\\.\n```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: no demo output block (from \"trace: demo (base rate\" to \"...\")")
	}
	code, out, errs := runCLI(t, "sim", "--trace", "demo", "--arms", vars["DEMOARMS"], "--rates", vars["DEMORATES"])
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.HasPrefix(out, string(m[1])) {
		t.Errorf("README.md's demo output is not what make demo prints; it prints:\n%s", out)
	}
}
