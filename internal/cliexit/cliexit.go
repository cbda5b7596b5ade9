// Package cliexit is the one exit-code policy of narwhal-bench's commands:
// 0 success, 2 bad input, 1 a run (or writing its output) failed, 130
// interrupted. The code is decided from the error's type (errors.As and
// errors.Is), never from its text.
package cliexit

import (
	"context"
	"errors"
)

// Exit codes.
const (
	OK          = 0
	Failed      = 1
	BadInput    = 2
	Interrupted = 130 // 128 + SIGINT, as a shell reports a command killed by Ctrl-C
)

// InputError marks bad input: a flag, argument, file or field the user
// can fix. Its message names what was wrong.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Input wraps err as bad input (nil stays nil).
func Input(err error) error {
	if err == nil {
		return nil
	}
	return &InputError{Err: err}
}

// BadInputError is an error type that is bad input wherever it occurs
// (a damaged or partial journal given to read: journal.IncompleteError and
// journal.CorruptError), without this package linking the packages that
// define them.
type BadInputError interface {
	error
	BadInput()
}

// ErrInterrupted is returned when a signal stopped the command.
var ErrInterrupted = errors.New("interrupted")

// Code returns the exit code for err.
func Code(err error) int {
	var in *InputError
	var bad BadInputError
	switch {
	case err == nil:
		return OK
	case errors.Is(err, ErrInterrupted) || errors.Is(err, context.Canceled):
		return Interrupted
	case errors.As(err, &in), errors.As(err, &bad):
		return BadInput
	}
	return Failed
}
