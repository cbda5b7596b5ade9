// Package gcfloor lets a short command run without garbage collection
// until its heap first reaches a floor, then hands the heap back to the
// runtime's default pacing (GOGC=100, no memory limit).
//
// A Go process starts with a 4 MB heap goal, so a command that allocates a
// few megabytes in 20 ms (a sweep of the demo trace) spends several
// of those milliseconds in collections that free almost nothing, with one
// of the two cores of a small machine lent to the collector. Below the
// floor nothing is collected; the first collection happens when the heap
// reaches it (the runtime's memory limit), and from then on the process
// behaves as if untouched: a long run pays one collection at the floor and
// holds at most the floor more in its peak resident memory.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
)

// Default is the floor the commands use: 16 MiB, about four times what
// the demo sweep allocates (4 MB), and well under what a 10-million-request run
// holds at its peak (47 MB), so that peak does not move (at 32 MiB it
// rose to 63 MB).
const Default = 16 << 20

// sentinel is collected by the first garbage collection; its finalizer
// restores the default pacing. It holds a pointer so that the allocator
// never packs it with other objects (tiny allocations are collected
// together).
type sentinel struct{ _ *byte }

// Set turns collection off until the heap reaches floor bytes, unless the
// user chose the collector's settings (GOGC or GOMEMLIMIT in the
// environment), which always win. It returns whether it took effect.
func Set(floor int64) bool {
	if floor <= 0 || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return false
	}
	percent := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(floor)
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
	return true
}
