// Package traces reads trace specifications (strict YAML) and generates the
// request arrivals they describe, deterministically from a seed.
//
// A trace is a sequence of load phases over a set of request classes:
//
//	name: demo                      # required; letters, digits, _ - .
//	description: "..."              # optional free text
//	seed: 7                         # default seed for the CLI; 1 if omitted
//	fleet: demo                     # optional fleet name the trace suggests
//	slo: {ttft: 10s, tpot: 125ms}   # optional; stored only
//	arrival: {process: poisson}     # poisson (default) | uniform | gamma
//	base_rate: 2.4                  # req/s; required iff a phase uses rate_multiplier
//	classes:
//	  short:
//	    input:  {dist: uniform, min: 200, max: 400}
//	    output: {dist: uniform, min: 400, max: 600}
//	    output_cap: 0               # optional; 0 = no cap
//	    prefix: {groups: 20, tokens: {dist: fixed, value: 1500}}   # optional
//	phases:
//	  - {name: chat, duration: 30s, rate: 2.4, mix: {short: 1}}
//	  - {duration: 30s, rate_multiplier: 0.5, mix: {short: 1}}
//	  - {duration: 60s, requests: 500, mix: {short: 1}}
//	  - {duration: 60s, counts: {short: 120}}
//
// SCHEMA.md in this directory is the full reference. In short:
//
//   - Durations are Go duration strings with a unit ("30s", "5m", "1h30m",
//     "250ms"); a bare number is rejected, so seconds and milliseconds are
//     never confused.
//   - Length distributions (dist): fixed {value}; uniform {min, max},
//     integers, inclusive; normal {mean, stddev, min, max}; lognormal
//     {median, sigma, min, max}, where the length is median*exp(sigma*Z) for
//     a standard normal Z (sigma is the standard deviation of the log;
//     the mean is median*exp(sigma²/2)); empirical {values, weights}
//     (weights optional, one per value, not all zero). Normal and lognormal
//     draws are rounded to the nearest integer and clipped to [min, max];
//     min defaults to 1 for them. Every length is an integer in
//     [1, MaxTokens].
//   - A phase sets exactly one of rate (req/s), rate_multiplier (times
//     base_rate), requests (exactly N arrivals at scale 1) or counts
//     (exactly N arrivals of each named class at scale 1). mix gives
//     relative class weights and goes with rate, rate_multiplier and
//     requests; it may be omitted only when the phase is idle (0).
//   - arrival may be overridden per phase. gamma needs burstiness, the
//     shape k of the gamma gaps (1 = Poisson, < 1 burstier), within
//     [MinBurstiness, MaxBurstiness].
//
// # Strictness and errors
//
// Unknown fields, values of the wrong type (1.5 or "5" for an integer, a
// number for a duration), null list or map entries, duplicate keys and
// more than one YAML document are errors. Anchors, aliases and merge keys
// are resolved before checking. Each problem is one line of the form
//
//	file.yaml: phases[1].mix.long: unknown class "long": expected one of chat, document
//
// naming the field path, the value and what was expected. Parse reports all
// type and unknown-field problems, or, when the file decodes, every rule
// violation found by Validate, in schema order (top-level fields, classes by
// name, phases by index).
//
// # Generation
//
// Phases follow each other: phase p occupies [start_p, start_p+duration_p)
// with start_0 = 0. Generate(seed, scale) multiplies every phase's rate by
// scale; a requests phase gets round(N*scale) arrivals and a counts phase
// round(N*scale) of each class. Durations never change.
//
// Each phase draws from three independent streams, rand.NewPCG seeded from
// (seed, stream, phase index) through SplitMix64: arrival gaps, class
// choice, and lengths (input, output, prefix group, in that order per
// request). A phase's draws therefore never depend on other phases or on
// the scale. Arrivals come from a unit-rate process whose cumulative gaps
// are divided by the phase rate, so at any scale the k-th request of a
// phase has the same class and lengths, and raising the rate compresses the
// same arrival sequence in time. The first draw that reaches the phase end
// is discarded and the next phase starts exactly at its own start: phase
// boundaries never drift.
//
// Unit-rate gaps: poisson draws exponential gaps; uniform uses gaps of
// exactly 1, so a rate phase has arrivals at start + k/rate for k = 1, 2, …
// while before its end; gamma draws Gamma(k, 1/k) gaps (Marsaglia–Tsang,
// with the U^(1/k) boost for k < 1), mean 1 and squared coefficient of
// variation 1/k.
//
// requests and counts phases draw N+1 unit-rate gaps, scale them to sum to
// the phase duration, and use the first N partial sums as arrival offsets.
// For poisson these are N sorted uniform times (a Poisson process
// conditioned on N arrivals); for uniform they are duration*k/(N+1). A
// counts phase shuffles its class sequence with the class stream, so its
// classes stay exact, but the k-th request's class is the same across
// scales only at scale 1.
//
// Classes are indexed by their sorted names. A class with prefix gets
// PrefixGroup = classIndex<<32 | (g+1) for a group g drawn uniformly from
// [0, groups), so group IDs are unique across classes. Each group's prefix
// length is drawn once from its own stream (seed, group ID), the same in
// every phase and at every scale; a request's PrefixTokens is that length
// clipped to its InputTokens.
//
// Times are rounded to whole nanoseconds (event.Time). Phases are generated
// in order and arrivals within a phase never go backwards, so the result is
// sorted by At with ties in generation order. The same spec, seed and scale
// always give the identical slice.
//
// # Built-in traces
//
// demo, chatdoc and mixed are embedded from the .yaml files of this
// directory (see Builtin and Load); their comments state their origin and
// assumptions.
package traces
