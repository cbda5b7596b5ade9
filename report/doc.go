// Package report scores runs from their records alone: which requests
// qualified under the SLOs, attainment, the sustained rate of a sweep.
// Start with Qualify in score.go.
package report
