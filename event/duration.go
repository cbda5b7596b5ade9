package event

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Duration is a span of Time read from configuration files. In YAML it is
// either a Go duration string ("30s", "125ms", "1h30m") or a plain number
// of seconds (30, 0.125).
type Duration Time

// Seconds returns d in float seconds.
func (d Duration) Seconds() float64 { return Time(d).Seconds() }

// String prints d in Go duration syntax.
func (d Duration) String() string { return time.Duration(d).String() }

// ParseDuration reads a Go duration string or a number of seconds.
func ParseDuration(s string) (Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return durationFromSeconds(f, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: expected a duration such as 30s, 125ms, 1h30m, or a number of seconds", s)
	}
	return Duration(d), nil
}

func durationFromSeconds(f float64, text string) (Duration, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 9e9 {
		return 0, fmt.Errorf("%s: expected a finite number of seconds", text)
	}
	return Duration(Seconds(f)), nil
}

// UnmarshalYAML reads a duration string or a number of seconds.
func (d *Duration) UnmarshalYAML(unmarshal func(any) error) error {
	var v any
	if err := unmarshal(&v); err != nil {
		return err
	}
	switch x := v.(type) {
	case string:
		p, err := ParseDuration(x)
		if err != nil {
			return err
		}
		*d = p
	case int:
		return d.set(float64(x), fmt.Sprint(x))
	case int64:
		return d.set(float64(x), fmt.Sprint(x))
	case uint64:
		return d.set(float64(x), fmt.Sprint(x))
	case float64:
		return d.set(x, fmt.Sprint(x))
	default:
		return fmt.Errorf("%v: expected a duration such as 30s or a number of seconds", v)
	}
	return nil
}

func (d *Duration) set(f float64, text string) error {
	p, err := durationFromSeconds(f, text)
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// MarshalYAML writes d in Go duration syntax.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }
