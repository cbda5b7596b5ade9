// Package stub serves stub inference engines that behave, over HTTP, as
// vLLM engines with the NIXL connector do: OpenAI completions and chat
// completions (streamed and not), /v1/models, /health, /tokenize,
// /metrics with vLLM's metric names, and the prefill/decode handoff
// (kv_transfer_params) with pinned KV under a lease. Timing comes from the
// fleet's Arrow profiles through the engine package, whose continuous
// batching is the simulator's, so a stub fleet and the simulator agree by
// construction; answers are deterministic text drawn from a seed and the
// prompt.
//
// One Server is one engine: an HTTP server whose handlers talk over a
// channel to one owner goroutine that runs an engine.Engine on the wall
// clock (a timer per iteration, durations multiplied by the time scale).
// A Fleet is several servers in one process; a decode leg pulls KV from
// a server of its own Fleet directly, and from any other process over the
// internal route PullPath on the side channel the handoff names (the
// prefill server's own listener).
//
// Faults (crash, stall, slow down, refuse, broken stream, no handoff) are
// injected per server with SetFaults or POST /stub/faults. docs/stub.md
// is the user's guide.
package stub
