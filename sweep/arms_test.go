package sweep

import (
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
)

// TestArmHelpCoversEveryArm: --help's arm list names every arm core knows
// (read from core's own "expected one of" list) and nothing else.
func TestArmHelpCoversEveryArm(t *testing.T) {
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
	for _, a := range core.ArmKinds() {
		if a == "static:kPmD" || strings.HasSuffix(a, ":KEY=V") || help[a] {
			continue
		}
		t.Errorf("arm %s has no line in ArmHelp", a)
	}
}
