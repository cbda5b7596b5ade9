// Package core is the scheduling and control state machine shared by the
// simulator and the live router. It is pure: inputs are timestamped facts
// (a request arrived, a prefill finished, a request ended, a tick), outputs
// are decisions (placements, refusals, role moves) and the records that
// explain them, plus the next time it wants a tick. It reads no clock,
// starts no goroutine and does no I/O, so a run is a function of its
// inputs.
//
// Start with Core in core.go; controllers (static splits, aggregated, and
// the adaptive ones) implement Controller in controller.go.
package core
