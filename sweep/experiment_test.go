package sweep

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestExperimentFiles(t *testing.T) {
	for _, p := range []string{"../experiments/seed-chatdoc.yaml", "../experiments/seed-mixed.yaml"} {
		e, err := LoadExperiment(p)
		if err != nil {
			t.Fatal(err)
		}
		// The published shares are keyed "on" and "off" (YAML 1.2 reads
		// them as text, not as booleans).
		if v, ok := e.Published.Lookup(e.Published.Qualified, "adaptive", true); !ok || !(v > 0) {
			t.Errorf("%s: published adaptive qualified with caching: %v, %v", p, v, ok)
		}
		// Every evaluation table shows the best static split and aggregated
		// beside the controllers, and the bound (issue 10).
		for _, a := range []string{"adaptive", "dynamo", "ray", "aggregated", "static:4P4D", "oracle"} {
			if !slices.Contains(e.Arms, a) {
				t.Errorf("%s: arms %v: expected %s among them", p, e.Arms, a)
			}
		}
		if len(e.PrefixCache) != 2 || len(e.Seeds) < 5 {
			t.Fatalf("%s: %+v: expected caching off and on, at least 5 seeds", p, e)
		}
		cfg, _, err := Resolve(Options{Trace: e.Trace, Fleet: e.Fleet, Arms: e.Arms, Rates: strings.Join(e.Rates, ",")})
		if err != nil || cfg.Fleet.Size() != 8 {
			t.Fatalf("%s: resolve: %v", p, err)
		}
	}
}

func TestBadExperiments(t *testing.T) {
	cases := []struct{ src, want string }{
		{"name: x\ntrace: demo\narms: [adaptive]\ncolour: red\n", `colour: unknown field: expected one of name, description, trace`},
		{"name: x\ntrace: demo\narms: [adaptive]\nseeds: [1.5]\n", `seeds[0]: 1.5: expected an integer`},
		{"name: x\ntrace: demo\narms: [adaptive]\nseeds: [-1]\n", `seeds[0]: -1: expected an integer between 0 and`},
		{"name: x\ntrace: demo\narms: [adaptive]\nprefix_cache: [yes]\n", `prefix_cache[0]: "yes": expected true or false`},
		{"name: 'a b'\ntrace: demo\narms: [adaptive]\n", `name: "a b": expected`},
		{"name: x\narms: [adaptive]\n", "trace: missing"},
		{"name: x\ntrace: demo\n", "arms: none"},
		{"name: x\ntrace: demo\narms: [adaptive, adaptive]\n", `arms[1]: "adaptive" twice`},
		{"name: x\ntrace: demo\narms: [adaptive]\nrates: [fast]\n", `rates[0]: rate "fast"`},
		{"name: x\ntrace: demo\narms: [adaptive]\nslo: {ttft: 2}\n", "slo.ttft"},
		{"name: x\ntrace: demo\narms: [adaptive]\nprefix_cache: [true, true]\n", "prefix_cache"},
		{"name: x\ntrace: demo\narms: [adaptive]\ntrace_format: csv\n", `trace_format: "csv"`},
		{"name: x\ntrace: demo\narms: [adaptive]\npublished: {qualified: {ray: {on: 3}}}\n", `published.qualified.ray: not one of the arms: expected an arm the experiment runs (adaptive)`},
	}
	// Rates and SLOs may be written as numbers: they are kept as text,
	// for the rate parser's and the duration check's own messages.
	if e, err := ParseExperiment([]byte("name: x\ntrace: demo\narms: [adaptive]\nrates: [2.4, 1.5x]\n"), "x.yaml"); err != nil || strings.Join(e.Rates, ",") != "2.4,1.5x" {
		t.Errorf("numeric rates: %+v, %v", e, err)
	}
	for _, c := range cases {
		_, err := ParseExperiment([]byte(c.src), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.src, err, c.want)
		}
	}
}

// FuzzParseExperiment: no input makes the experiment parser panic, and
// whatever it accepts is a valid experiment.
func FuzzParseExperiment(f *testing.F) {
	for _, p := range []string{"../experiments/seed-chatdoc.yaml", "../experiments/topology-azure.yaml"} {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("name: x\ntrace: demo\narms: [adaptive]\nrates: ['1x']\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseExperiment(data, "fuzz.yaml")
		if err != nil {
			return
		}
		if e.Name == "" || e.Trace == "" || len(e.Arms) == 0 || len(e.PrefixCache) == 0 {
			t.Fatalf("accepted an invalid experiment: %+v", e)
		}
	})
}
