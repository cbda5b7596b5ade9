// Package event is the contract between every part of narwhal-bench: the
// simulator and the live router emit Records, the journal stores them, and
// the report scores them. Start with Record and Kind in record.go; Fold in
// fold.go turns a run's records into one Row per offered request.
//
// Time is int64 nanoseconds since the run started, so a run never depends
// on the wall clock.
package event
