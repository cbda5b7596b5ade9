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
