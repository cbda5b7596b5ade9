package sweep

import (
	"strings"
	"testing"
)

// The table compares arms with the best static split only when static
// splits ran: without any it says nothing about them; with some that all
// fail it says none reaches 90%.
func TestTableStaticComparison(t *testing.T) {
	two := 2.0
	base := Result{Trace: "t", Fleet: "f", Instances: 2, Rates: []float64{1},
		Runs: []Run{{Arm: "adaptive", Rate: 1, Attainment: 1}}, Arms: []string{"adaptive"},
		Sustained: map[string]*float64{"adaptive": &two}}
	var b strings.Builder
	if err := WriteTable(&b, &base); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "static split") {
		t.Fatalf("a table without static splits mentions them:\n%s", b.String())
	}
	withStatic := base
	withStatic.Arms = []string{"static:1P1D", "adaptive"}
	withStatic.Runs = []Run{{Arm: "static:1P1D", Rate: 1, Attainment: 0.5}, {Arm: "adaptive", Rate: 1, Attainment: 1}}
	withStatic.Sustained = map[string]*float64{"static:1P1D": nil, "adaptive": &two}
	b.Reset()
	if err := WriteTable(&b, &withStatic); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "no static split reaches 90%") {
		t.Fatalf("a table whose static splits all fail does not say so:\n%s", b.String())
	}
}

// A cell under the target never rounds up to it (89.7% is not "90%"
// beside a sustained rate that excludes it); others round.
func TestFmtPercent(t *testing.T) {
	for _, c := range []struct {
		att  float64
		want string
	}{{286.0 / 319, "89"}, {0.9, "90"}, {0.8951, "89"}, {0.8949, "89"}, {0.904, "90"}, {0.996, "100"}, {0.005, "1"}, {0, "0"}} {
		if got := fmtPercent(c.att); got != c.want {
			t.Errorf("fmtPercent(%v) = %s, want %s", c.att, got, c.want)
		}
	}
}

// Columns never run together: a long rate or a sustained rate at the
// grid's top ("100%>= 126.67, grid top" read as one word) keeps a space.
func TestTableColumnsApart(t *testing.T) {
	top := 126.67
	r := Result{Trace: "t", Fleet: "f", Instances: 2, Rates: []float64{10000, top},
		Runs: []Run{{Arm: "adaptive", Rate: 10000, Attainment: 1}, {Arm: "adaptive", Rate: top, Attainment: 1}}, Arms: []string{"adaptive"},
		Sustained: map[string]*float64{"adaptive": &top}, SustainedGridTop: map[string]bool{"adaptive": true}}
	var b strings.Builder
	if err := WriteTable(&b, &r); err != nil {
		t.Fatal(err)
	}
	for _, glued := range []string{"%>=", "10000.0126", "%100%"} {
		if strings.Contains(b.String(), glued) {
			t.Errorf("columns run together (%q):\n%s", glued, b.String())
		}
	}
	if !strings.Contains(b.String(), "100% >= 126.67, grid top") {
		t.Errorf("no space between the last cell and the sustained rate:\n%s", b.String())
	}
}

// With no arms named, a small fleet runs every static split; a large one
// the searches' grid (fleet1024 ran 1,023 static arms).
func TestDefaultStaticArms(t *testing.T) {
	if got := DefaultStaticArms(8); len(got) != 7 || got[0] != "static:1P7D" || got[6] != "static:7P1D" {
		t.Errorf("8 engines: %v", got)
	}
	got := DefaultStaticArms(1024)
	if len(got) != ExhaustiveSplits || got[0] != "static:1P1023D" || got[len(got)-1] != "static:1023P1D" {
		t.Errorf("1024 engines: %d arms, %v ... %v: expected %d from 1P to 1023P", len(got), got[0], got[len(got)-1], ExhaustiveSplits)
	}
}

// A sweep with the oracle on a production-size trace or fleet says, before
// it starts, that the searches may take long; a small one says nothing.
func TestOracleScaleNote(t *testing.T) {
	for _, c := range []struct {
		trace, fleet, arms, rates string
		note                      bool
	}{
		{"demo", "", "oracle", "1x", false},
		{"demo", "", "adaptive", "1x", false},
		{"day", "fleet512", "oracle,adaptive", "8x", true},
		{"day", "fleet512", "adaptive", "8x", false},
		{"steady", "fleet512", "phase-oracle", "1x", true},
	} {
		_, notes, err := Resolve(Options{Trace: c.trace, Fleet: c.fleet, Arms: strings.Split(c.arms, ","), Rates: c.rates})
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		said := false
		for _, n := range notes {
			said = said || strings.Contains(n, "the oracle's searches replay the trace many times")
		}
		if said != c.note {
			t.Errorf("%+v: notes %q", c, notes)
		}
	}
}

// The KV note names the run with the most requests over an engine's KV,
// and says nothing when none is.
func TestOverKVNote(t *testing.T) {
	r := Result{Runs: []Run{{Arm: "static:4P4D", Rate: 1, Offered: 100, OverKV: 3}, {Arm: "adaptive", Rate: 2, Offered: 200, OverKV: 7}, {Arm: "x", Rate: 3}}}
	if n := OverKVNote(52448, &r); !strings.HasPrefix(n, "7 of 200 requests (adaptive at 2.0 req/s") || !strings.Contains(n, "kv_capacity_tokens 52448") {
		t.Errorf("note %q", n)
	}
	if n := OverKVNote(100, &Result{Runs: []Run{{Arm: "a", Rate: 1, Offered: 5}}}); n != "" {
		t.Errorf("note %q with no request over the capacity", n)
	}
	// Over seeds (sim --seeds): the worst run of any seed, its seed named.
	r2 := Result{Seed: 9, Runs: []Run{{Arm: "static:4P4D", Rate: 1, Offered: 100, OverKV: 11}}}
	r.Seed = 8
	if n := OverKVNote(52448, &r, &r2); !strings.HasPrefix(n, "11 of 100 requests (static:4P4D at 1.0 req/s, seed 9;") {
		t.Errorf("note over seeds %q", n)
	}
}
