package main

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
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
	if got := string(doc[m[4]:m[5]]); got != out {
		if *update {
			doc = append(append(append([]byte{}, doc[:m[4]]...), out...), doc[m[5]:]...)
			if err := os.WriteFile(path, doc, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s: the JSON example differs from what `narwhal-bench %s` prints (rerun with -update and review):\n%s", path, strings.Join(args, " "), out)
	}
}
