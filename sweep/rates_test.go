package sweep

import "testing"

// Rates a sweep tells apart get run names (and table columns) that tell
// them apart too: a slow trace's 5% grid, and rates past two decimals.
func TestRunNamesTellRatesApart(t *testing.T) {
	for rate, want := range map[float64]string{2.4: "static-4P4D@2.4", 5.9375: "static-4P4D@5.9375", 0.165: "static-4P4D@0.165",
		0.17: "static-4P4D@0.17", 1.00001: "static-4P4D@1.00001", 1e-5: "static-4P4D@0.00001"} {
		if got := RunName("static:4P4D", rate); got != want {
			t.Errorf("RunName(%v) = %q, want %q", rate, got, want)
		}
	}
	for rate, want := range map[float64]string{2.4: "2.4", 3.0: "3.0", 5.9375: "5.94", 0.165: "0.165", 0.17: "0.17", 0.06: "0.06", 0.065: "0.065", 0.0125: "0.0125"} {
		if got := fmtRate(rate); got != want {
			t.Errorf("fmtRate(%v) = %q, want %q", rate, got, want)
		}
	}
}
