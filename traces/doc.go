// Package traces reads trace specifications (strict YAML) and generates the
// request arrivals they describe, deterministically from a seed. It also
// imports real traces (Mooncake JSONL, Azure LLM inference CSV), and Trace
// wraps either kind as one replayable workload (see Open).
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
// docs/trace-format.md is the full reference. In short:
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
//     [MinBurstiness, MaxBurstiness], or cv, the gaps' coefficient of
//     variation (k = 1/cv²), not both. batch_mean (arrivals in batches at
//     one instant) is top-level only.
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
//
// # Traces and imported files
//
// Open returns a Trace: a built-in name or a .yaml/.yml path gives a
// synthetic trace over its Spec; a .jsonl (Mooncake) or .csv (Azure) path
// is imported; several imported paths joined with "+" are concatenated. A
// format argument forces one format on every path. Trace.Hash is the
// SHA-256 of the source bytes (every file, in order) for run metadata.
//
// An imported trace is data: Generate ignores the seed and scales time,
// sending the request imported at t at round(t/scale), so the mean rate
// becomes scale×MeanRate while counts and lengths stay as recorded. Times
// are relative to the first arrival of the first file, which is at 0.
// Every request of a file has the class named by the file's base name
// without extension (traces/azure/code.csv gives "code").
//
// Each file's mean gap is (last − first arrival)/(N − 1), or 1 s
// (SingleSegmentGap) when the file has one request or all its arrivals at
// one instant. Files are placed one after another: file k+1's first
// arrival comes one mean gap of file k+1 after file k's last arrival, and
// the trace ends one mean gap of the last file after its last arrival. A
// file therefore lasts N mean gaps, and MeanRate, the requests over the
// trace's span, is 1/gap for a single file.
//
// Bounds gives the phases: one per file of a concatenation, starting at
// the file's first arrival; a single file is split into equal windows,
// ceil(span/5 min) of them but at least 10 and at most 20 (an hour gives 12
// windows of 5 minutes), so that a hindsight oracle can choose one split
// per window. Bounds scale like arrival times (rounded to the nanosecond;
// a phase is kept at least 1 ns wide at absurd scales, its requests kept
// inside it). A Spec's bounds are its cumulative phase durations at every
// scale, since Spec scaling keeps durations.
//
// Open reads an imported file once, whole, checking every row, but keeps
// no row of a regular file whose rows are in time order: only its
// statistics, size, modification time and SHA-256. Trace.Stream reads
// such a file again, parsing rows as the stream is read (with the same
// row reader), and stops with an error (Stream.Err) if the file changed:
// different size or time when the stream starts, a row that no longer
// parses or is out of place, or another SHA-256 at its end. A file whose
// rows must be sorted, and input that cannot be read twice (a pipe), are
// held in memory as read at Open. The Mooncake prefix groups are rebuilt
// by each stream as it goes; their trie grows with the distinct block
// prefixes of the file.
//
// Both importers are strict about what they read, read one record per
// line (blank lines are skipped; "\r\n" line ends and a UTF-8 byte order
// mark are accepted), sort rows stably by time (with a note), and report
// up to 10 problems per file, each naming file, line (and column where one
// applies), the value and what was expected:
//
//	trace.jsonl:12: input_length: "12": expected an integer in [1, 10000000]
//	code.csv:7:29: ContextTokens: "-4": expected an integer in [0, 10000000]
//
// Mooncake JSONL: one object per line with timestamp (milliseconds, a
// number in [0, 3.6e9], kept to the nanosecond), input_length and
// output_length (integers in [1, MaxTokens]; integral spellings such as
// 1e3 are accepted, 1.5 and "12" are not), and optional hash_ids (an array
// of integers, or null). Key names match exactly; a known field given
// twice is an error; unknown fields (session_id, delay, …) are ignored and
// listed in Trace.Notes. Each hash_ids entry stands for one 512-token
// block of the prompt. A request's shared prefix is the longest leading
// run of its hash_ids that an earlier request (by time, then file order)
// also started with; PrefixTokens is 512 per shared block, clipped to
// InputTokens−1 since the last prompt token is always computed, and
// PrefixGroup names that block sequence: the chained SplitMix64 hash of
// the file's position in the concatenation and the shared hash_ids,
// shifted right by one bit (1 if that is 0). Requests whose shared runs
// are the same block sequence therefore have the same group, different
// sequences and different files have different groups (barring a 63-bit
// hash collision), and a request without an earlier match (including the
// first request of each sequence) has group 0.
//
// Azure CSV (2023): a header naming TIMESTAMP, ContextTokens and
// GeneratedTokens, case-sensitively, each once, in any order, then rows of
// exactly three unquoted fields. TIMESTAMP is "YYYY-MM-DD hh:mm:ss" with an
// optional fraction of 1 to 9 digits, read as an integer so no precision
// is lost (the published files have 7 digits, 100 ns); it is taken as UTC
// since only differences matter. The counts are decimal integers in [0,
// MaxTokens]; a count of 0 is replaced by 1 (a request has at least one
// prompt and one output token) and the replacements are counted in
// Trace.Notes.
//
// traces/azure/ ships the two Azure LLM inference traces of 2023 (code.csv,
// conv.csv), CC-BY-4.0, from Patel et al., "Splitwise: Efficient
// generative LLM inference using phase splitting", ISCA 2024; see its
// README.md. They are data files read at run time, not embedded.
package traces
