//go:build unix

package sim

import "syscall"

// cpuTime is the process's user and system CPU time so far, ns: on a
// shared machine it moves less with other load than wall time does.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
