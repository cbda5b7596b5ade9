package event

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Time is a point in a run: int64 nanoseconds since the run started.
// The simulator's virtual clock and the live router's monotonic clock both
// speak it, so a journal never depends on wall-clock time.
type Time int64

// Common durations in Time units.
const (
	Nanosecond  Time = 1
	Microsecond Time = 1000
	Millisecond Time = 1000 * Microsecond
	Second      Time = 1000 * Millisecond
)

// Never is a time later than any run reaches; it means "no time".
const Never Time = math.MaxInt64

// Seconds converts float seconds to Time, rounding to the nearest nanosecond.
func Seconds(s float64) Time {
	if s >= float64(Never)/1e9 {
		return Never
	}
	return Time(math.Round(s * 1e9))
}

// Seconds returns t in float seconds.
func (t Time) Seconds() float64 { return float64(t) / 1e9 }

// String prints t as seconds with millisecond precision, e.g. "12.345s".
func (t Time) String() string {
	if t == Never {
		return "never"
	}
	return strconv.FormatFloat(t.Seconds(), 'f', 3, 64) + "s"
}

// RequestID names one offered request within a run. IDs start at 1; 0 means
// "not about a request".
type RequestID int64

// Instance is an engine's index in its fleet (0-based, registration order).
// NoInstance means "not about an instance".
type Instance int32

// NoInstance marks a record that concerns no instance.
const NoInstance Instance = -1

// Role is the pool an instance serves. Phase is a property of a request;
// role is only a label that steers new placements (Arrow §5.2).
type Role uint8

// Roles.
const (
	RoleNone    Role = iota
	RolePrefill      // takes new prefill placements
	RoleDecode       // takes new decode placements
	RoleMixed        // aggregated: takes both phases in one batch
)

var roleNames = [...]string{"none", "prefill", "decode", "mixed"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// ParseRole reads a role name as printed by Role.String.
func ParseRole(s string) (Role, error) {
	for i, n := range roleNames {
		if n == s {
			return Role(i), nil
		}
	}
	return RoleNone, fmt.Errorf("role %q: expected one of prefill, decode, mixed", s)
}

// ParseDuration reads a Go duration with a unit ("2.1s", "45ms", "10m").
// A bare number is refused, so seconds and milliseconds are never confused
// (the rule of every file narwhal-bench reads).
func ParseDuration(s string) (Time, error) {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("%q: a bare number is not a duration: expected a unit, such as 2.1s or 45ms", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: expected a duration such as 2.1s, 45ms or 10m", s)
	}
	return Time(d), nil
}
