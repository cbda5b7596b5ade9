package importrule

import (
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/narwhal-bench/narwhal-bench"

// allowed lists, per package, the project packages it may import (directly
// or not). A package is named by its first path element (live covers
// live/api, live/ha, ...), except under internal/, where each package has
// a row of its own; internal packages are named in full in the rows too.
// cmd/ may import anything but the test-only packages.
var allowed = map[string][]string{
	"event":   {},
	"timing":  {"event"},
	"core":    {"event", "timing"},
	"engine":  {"event", "timing"},
	"sim":     {"core", "engine", "event", "timing"},
	"traces":  {"event", "internal/strictyaml"},
	"fleet":   {"core", "engine", "event", "timing", "internal/strictyaml"},
	"journal": {"event"},
	"score":   {"event"},
	"report":  {"event", "journal", "score"},
	"live":    {"core", "engine", "event", "timing", "fleet", "internal/strictyaml"},
	"sweep":   {"core", "engine", "event", "fleet", "score", "sim", "timing", "traces", "internal/strictyaml"},

	"internal/cliexit":       {},
	"internal/gcfloor":       {},
	"internal/strictyaml":    {},
	"internal/etcdtest":      {},
	"internal/staleserver":   {},
	"internal/journaltest":   {"event"},
	"internal/simcheck":      {"event"},
	"internal/importrule":    {},
	"internal/docscheck":     {},
	"internal/campaigncheck": {},
}

// testOnly are the packages whose purpose is tests: fixtures, checkers and
// an embedded etcd server. Only _test.go files may import them (go list's
// TestImports and XTestImports, never Imports), so no binary links them:
// internal/etcdtest would put etcd's server into narwhal-bench
// (docs/decisions/0001-dependencies.md). The last three hold only tests.
var testOnly = map[string]bool{
	"internal/etcdtest":      true,
	"internal/staleserver":   true,
	"internal/journaltest":   true,
	"internal/simcheck":      true,
	"internal/importrule":    true,
	"internal/docscheck":     true,
	"internal/campaigncheck": true,
}

// ruleName is the name a project package goes by in the tables: its
// first path element, or internal/NAME for internal packages.
func ruleName(rel string) string {
	parts := strings.SplitN(rel, "/", 3)
	if parts[0] == "internal" && len(parts) > 1 {
		return "internal/" + parts[1]
	}
	return parts[0]
}

// noPlotting are the packages of the simulator's dependency graph: none may
// reach a plotting library (scoring lives in score/, drawing in report/).
var noPlotting = []string{"event", "timing", "core", "engine", "sim", "traces", "fleet", "journal", "score", "sweep"}

// forbiddenInCore are imports that would give the core a clock, I/O,
// global randomness or logging (ARCHITECTURE: "one core, two clocks").
var forbiddenInCore = []string{"net", "net/http", "os", "os/exec", "time", "math/rand", "math/rand/v2", "log", "log/slog", "io/fs", "syscall"}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func list(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// checkTestOnly fails when p's non-test build reaches a test-only package
// (Deps holds what the package links, not what its tests add), and when a
// package that is not listed as test-only imports "testing" outside its
// _test.go files (a new fixture package: list it in testOnly).
func checkTestOnly(t *testing.T, rel, top string, p pkg) {
	t.Helper()
	if testOnly[top] {
		return
	}
	for _, d := range p.Deps {
		if !strings.HasPrefix(d, module+"/") {
			continue
		}
		if dn := ruleName(strings.TrimPrefix(d, module+"/")); testOnly[dn] {
			t.Errorf("%s links %s outside its tests: test-only packages may be imported by _test.go files only", rel, dn)
		}
	}
	for _, imp := range p.Imports {
		if imp == "testing" {
			t.Errorf("%s imports \"testing\" outside its _test.go files: a package for tests belongs in importrule's testOnly list", rel)
		}
	}
}

func TestImportRule(t *testing.T) {
	pkgs := list(t)
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages: expected the whole module", len(pkgs))
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		top := ruleName(rel)
		seen[top] = true
		checkTestOnly(t, rel, top, p)
		if top == "cmd" {
			continue
		}
		ok, known := allowed[top]
		if !known {
			t.Errorf("package %s is not in the import rule's table: add it (and to docs/architecture.md)", rel)
			continue
		}
		okSet := map[string]bool{top: true}
		for _, a := range ok {
			okSet[a] = true
		}
		var bad []string
		for _, d := range p.Deps {
			if !strings.HasPrefix(d, module+"/") {
				continue
			}
			if !okSet[ruleName(strings.TrimPrefix(d, module+"/"))] {
				bad = append(bad, strings.TrimPrefix(d, module+"/"))
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%s imports %v: the import rule allows only %v", rel, bad, ok)
		}
		for _, np := range noPlotting {
			if top != np {
				continue
			}
			for _, d := range p.Deps {
				if strings.HasPrefix(d, "gonum.org/v1/plot") {
					t.Errorf("%s depends on %s: the simulator's dependency graph carries no plotting (score/ scores, report/ draws)", rel, d)
					break
				}
			}
		}
		if top == "core" {
			for _, imp := range p.Imports {
				for _, f := range forbiddenInCore {
					if imp == f {
						t.Errorf("%s imports %q: the core reads no clock, does no I/O and uses no global randomness", rel, imp)
					}
				}
			}
		}
	}
	// A row for a package that no longer exists would let a new package of
	// that name in unreviewed.
	for _, table := range []map[string]bool{keys(allowed), testOnly} {
		for name := range table {
			if !seen[name] {
				t.Errorf("the import rule names %s, which go list does not find: remove or rename its row", name)
			}
		}
	}
}

func keys(m map[string][]string) map[string]bool {
	k := map[string]bool{}
	for n := range m {
		k[n] = true
	}
	return k
}

// leanSim are the modules narwhal-sim must never link: the journal's
// storage and Parquet, the live router's etcd, gRPC and Prometheus client,
// and plotting (their package initialisation is what makes narwhal-bench
// start in 10 ms; docs/decisions/0008-lean-sim-binary.md).
var leanSim = []string{
	"github.com/cockroachdb/pebble", "github.com/parquet-go/", "go.etcd.io/", "google.golang.org/grpc",
	"google.golang.org/protobuf", "github.com/prometheus/", "gonum.org/v1/plot", "github.com/narwhal-bench/narwhal-bench/journal",
	"github.com/narwhal-bench/narwhal-bench/live", "github.com/narwhal-bench/narwhal-bench/report",
}

func TestLeanSimBinary(t *testing.T) {
	for _, p := range list(t) {
		if p.ImportPath != module+"/cmd/narwhal-sim" {
			continue
		}
		for _, d := range p.Deps {
			for _, heavy := range leanSim {
				if strings.HasPrefix(d, heavy) {
					t.Errorf("cmd/narwhal-sim depends on %s: the lean binary links the simulator's packages only", d)
				}
			}
		}
		return
	}
	t.Fatal("go list found no cmd/narwhal-sim")
}
