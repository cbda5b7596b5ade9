// Package live is the live driver: an OpenAI-compatible HTTP router that
// places each request on real engines (vLLM with the NIXL connector, or
// the stub engines of live/stub) with the same core, and so the same
// controllers and admission gate, as the simulator, on the wall clock.
// narwhal-bench serve runs it (docs/serve.md); narwhal-bench live runs it
// in-process in front of a fleet's engines or stub engines and drives it
// with live/loadgen (docs/live.md).
//
// Start with router.go: Config (the fleet, the controller, the admission
// gate, the Recorder that receives every record, and the timeouts and
// limits), New, Run and Handler. Then:
//
//   - owner.go: the one goroutine that holds the core.Core. Handlers send
//     it facts over a channel and wait for their request's placement; it
//     stamps each fact with the router clock, applies the core's Ready
//     (placements, refusals, role moves, ticks) and is the only writer of
//     records.
//   - proxy.go: the HTTP API (/v1/completions, /v1/chat/completions,
//     /v1/models, /health, /ready, /state, /metrics) and each request's
//     legs: the prefill leg, the KV handoff (kv_transfer_params) and the
//     streamed decode leg, or one ordinary request to an engine that
//     serves the whole answer.
//   - retry.go: the one re-placement of a request whose leg failed
//     (core.Replace).
//   - health.go: a breaker per engine, the probes that readmit an ejected
//     engine, and the liveness sweep over idle ones.
//   - auth.go: the tenant gate (serve --tenants): keys, shares of
//     admission, rates, and the admin-only routes.
//   - metrics.go: the router's Prometheus series; state.go: GET /state.
//   - tokenize.go: counting prompts with an engine's /tokenize; prefix.go:
//     the router's picture of the engines' prefix caches.
//   - resume.go: what a router taking over from another starts from
//     (live/ha runs routers active-passive on etcd; docs/ha.md).
//
// The package writes no journal itself: the caller's Recorder receives
// the records (narwhal-bench hands it a journal writer).
package live
