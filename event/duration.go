package event

import (
	"fmt"
	"strconv"
	"time"
)

// Duration is a span of Time read from configuration files. In YAML it is a
// Go duration string with a unit ("30s", "125ms", "1h30m"); a bare number is
// refused, so seconds and milliseconds are never confused (the same rule as
// trace files).
type Duration Time

// Seconds returns d in float seconds.
func (d Duration) Seconds() float64 { return Time(d).Seconds() }

// String prints d in Go duration syntax.
func (d Duration) String() string { return time.Duration(d).String() }

// ParseDuration reads a Go duration string with a unit.
func ParseDuration(s string) (Duration, error) {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("%s: a bare number is not a duration: expected a unit, such as 30s or 125ms", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: expected a duration such as 30s, 125ms or 1h30m", s)
	}
	return Duration(d), nil
}

// UnmarshalYAML reads a duration string or a number of seconds.
func (d *Duration) UnmarshalYAML(unmarshal func(any) error) error {
	var v any
	if err := unmarshal(&v); err != nil {
		return err
	}
	x, ok := v.(string)
	if !ok {
		return fmt.Errorf("%v: a bare number is not a duration: expected a unit, such as 30s or 125ms", v)
	}
	p, err := ParseDuration(x)
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// MarshalYAML writes d in Go duration syntax.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }
