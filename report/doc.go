// Package report scores runs from their records alone: which requests
// qualified under the SLOs, attainment, the sustained rate of a sweep,
// splits over time, thrash and adaptation lag (the rules live in package
// score; score.go here keeps their names), and the narwhal-report
// command's report (docs/report.md).
//
// Load reads a journal root, one run, or a Parquet export, one run at a
// time, into a Report: per run, outcomes and the four disjoint groups,
// latency percentiles, refusals by cause, goodput (AIPerf/vLLM, per GPU),
// role moves, thrash and lag against the oracle, and answer quality (token
// F1); per arm, the DistServe goodput. Report.Write prints it as a
// terminal table, Markdown, JSON or CSV; Report.Plot draws the plots.
package report
