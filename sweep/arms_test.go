package sweep

import (
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
)

// TestArmHelpCoversEveryArm: --help's arm list names every arm core knows
// (read from core's own "expected one of" list) and nothing else.
func TestArmHelpCoversEveryArm(t *testing.T) {
	_, err := core.NewController("no-such-arm", 8)
	if err == nil {
		t.Fatal("core accepted no-such-arm")
	}
	_, list, ok := strings.Cut(err.Error(), "expected one of ")
	if !ok {
		t.Fatalf("core's error %q lists no arms", err)
	}
	list, _, _ = strings.Cut(list, " (")
	help := map[string]bool{}
	for _, h := range ArmHelp {
		help[h.Arm] = true
		arm := h.Arm
		arm = strings.Replace(arm, "static:kPmD", "static:3P5D", 1)
		arm = strings.Replace(arm, "hybrid:kPmM", "hybrid:1P7M", 1)
		if err := CheckArm(arm, 8); err != nil {
			t.Errorf("ArmHelp lists %s: %v", h.Arm, err)
		}
	}
	for _, a := range strings.Split(list, ", ") {
		if a == "static:kPmD" || help[a] {
			continue
		}
		t.Errorf("arm %s has no line in ArmHelp", a)
	}
}
