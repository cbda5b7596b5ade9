//go:build !unix

package sim

// cpuTime is not measured here (0: the benchmark reports wall time only).
func cpuTime() int64 { return 0 }
