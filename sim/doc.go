// Package sim is the discrete-event driver: a virtual clock, an event heap,
// and simulated engines that do continuous batching (decode first, then
// chunked prefill within a token budget), priced by timing profiles, with
// KV transfers between instances. Placement and role decisions come from the
// same core the live router runs.
//
// Start with Sim.Run in sim.go. Decode-only stretches of an engine are
// advanced in closed form between changes of batch membership (see
// spanEnd), so a run costs events per request, not per token.
package sim
