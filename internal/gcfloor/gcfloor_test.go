package gcfloor

import (
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// The floor is process-wide, so each case runs in a child process.
func TestMain(m *testing.M) {
	switch os.Getenv("GCFLOOR_CHILD") {
	case "":
		os.Exit(m.Run())
	case "restores":
		os.Exit(childRestores())
	case "env":
		if Set(Default) {
			os.Exit(3) // the user's GOGC must win
		}
		os.Exit(0)
	}
}

// childRestores: below the floor the collector is off and the limit is
// the floor; after the first collection the defaults are back.
func childRestores() int {
	if !Set(64 << 20) {
		return 3
	}
	if p := debug.SetGCPercent(-1); p != -1 {
		return 4 // collection was on
	}
	if l := debug.SetMemoryLimit(-1); l != 64<<20 {
		return 5
	}
	runtime.GC()
	// The finalizer runs on its own goroutine after the collection;
	// bounded wait (never a timing assertion: only a deadline for a hang).
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if debug.SetMemoryLimit(-1) == math.MaxInt64 {
			if p := debug.SetGCPercent(100); p != 100 {
				return 6
			}
			return 0
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	return 7
}

func child(t *testing.T, mode string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "GCFLOOR_CHILD="+mode)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", mode, err, out)
	}
}

func TestFloorThenDefaults(t *testing.T) { child(t, "restores", "GOGC=", "GOMEMLIMIT=") }

func TestUserSettingsWin(t *testing.T) {
	child(t, "env", "GOGC=200")
	child(t, "env", "GOMEMLIMIT=1GiB")
}
