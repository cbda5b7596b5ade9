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
// or not). cmd/ and internal/ may import anything.
var allowed = map[string][]string{
	"event":   {},
	"timing":  {"event"},
	"core":    {"event", "timing"},
	"engine":  {"event", "timing"},
	"sim":     {"core", "engine", "event", "timing"},
	"traces":  {"event"},
	"fleet":   {"core", "engine", "event", "timing"},
	"journal": {"event"},
	"score":   {"event"},
	"report":  {"event", "journal", "score"},
	"live":    {"core", "engine", "event", "timing", "fleet", "journal"},
	"sweep":   {"core", "engine", "event", "fleet", "score", "sim", "timing", "traces"},
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

func TestImportRule(t *testing.T) {
	pkgs := list(t)
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages: expected the whole module", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		top := strings.SplitN(rel, "/", 2)[0]
		if top == "cmd" || top == "internal" {
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
			dt := strings.SplitN(strings.TrimPrefix(d, module+"/"), "/", 2)[0]
			if dt == "internal" && top != "internal" {
				continue
			}
			if !okSet[dt] {
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
