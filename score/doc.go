// Package score holds the scoring rules every consumer of a run's records
// shares, with no rendering: outcome counts and attainment (Summarize), the
// sustained rate (Sustained), the prefill pool over time (Splits, SplitAt),
// thrash and adaptation lag. The simulator's sweep (sweep/) and the report
// (report/) both use it; only report/ draws, so the simulator's dependency
// graph carries no plotting library.
package score
