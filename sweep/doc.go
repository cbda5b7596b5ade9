// Package sweep runs a grid of simulations, every arm at every rate, on one
// trace and fleet, in parallel across runs, and scores each from its
// records. It is what `narwhal-bench sim` does; start with Run in sweep.go.
package sweep
