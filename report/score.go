package report

import "github.com/narwhal-bench/narwhal-bench/score"

// The scoring rules live in package score, which carries no rendering (the
// simulator's sweep uses them without pulling in gonum/plot); these names
// keep report's API whole.

type (
	// Summary counts one run's outcomes (score.Summary).
	Summary = score.Summary
	// SplitChange is the prefill pool's size from At on (score.SplitChange).
	SplitChange = score.SplitChange
	// PhaseTarget is the oracle's split for one phase (score.PhaseTarget).
	PhaseTarget = score.PhaseTarget
)

// AttainmentTarget is score.AttainmentTarget.
const AttainmentTarget = score.AttainmentTarget

// DefaultThrashWindow is score.DefaultThrashWindow.
const DefaultThrashWindow = score.DefaultThrashWindow

// Scoring functions, as in package score.
var (
	Summarize = score.Summarize
	Sustained = score.Sustained
	Splits    = score.Splits
	SplitAt   = score.SplitAt
	Moves     = score.Moves
	Thrash    = score.Thrash
	Changes   = score.Changes
	Lag       = score.Lag
)
