// Package engine is one inference engine's continuous batching as a pure
// state machine: no clock, no goroutines, no I/O. A driver adds work
// (AddPrefill, AddDecode), cancels it (Cancel), starts an iteration
// (Start returns how long it takes) and, when that time has passed on its
// clock, ends it (Finish returns the prefills done, tokens produced and
// requests done). The stub engines (live/stub) drive it on the wall
// clock; tests drive it on a virtual clock.
//
// The semantics are the simulator's (sim/sim.go, docs/sim.md "The engine
// model"): decode streams join at iteration boundaries up to max_seqs and,
// FCFS, within the KV capacity; past the capacity the newest admitted
// stream is preempted and later recomputes its prompt and answer so far
// (vLLM's recompute preemption); prompt chunks of at most chunk_tokens
// fill what the running streams leave of the token budget; an iteration
// costs I(ctx) when it decodes plus T(to)-T(from) per chunk; a run of
// decode-only iterations over the same streams is timed with the
// simulator's closed form, each iteration being the difference of two
// rounded span ends, so durations add up to the simulator's to the
// nanosecond.
//
// Stub and simulator agree by construction: sim_agree_test.go runs the
// same mixed workloads through sim (with its TokenHook) and through
// engines on a virtual clock, on one engine (aggregated, with binding
// chunk, budget, max_seqs and KV-capacity limits) and on a 1P1D pair with
// the flat 50 ms KV transfer, and finds every token at the same
// nanosecond. The simulator keeps its own copy of the loop for speed (it
// skips whole decode spans in one event); the test is what ties the two.
package engine
