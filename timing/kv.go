package timing

import (
	"errors"
	"fmt"
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// KV prices moving a request's KV cache between instances:
// Latency + tokens·BytesPerToken/Bandwidth seconds. With Bandwidth 0 the
// transfer costs the flat Latency, the Narwhal reference's model (50 ms).
type KV struct {
	// Latency is the fixed cost of one transfer, seconds (default 0.05).
	Latency float64 `yaml:"latency" json:"latency"`
	// BytesPerToken is the KV size of one context token, bytes (0 = flat).
	BytesPerToken float64 `yaml:"bytes_per_token" json:"bytes_per_token"`
	// Bandwidth is one source instance's egress, bytes per second (0 =
	// unlimited: only Latency is charged and transfers never queue).
	Bandwidth float64 `yaml:"bandwidth" json:"bandwidth"`
}

// FlatKV is the reference's constant 50 ms transfer.
var FlatKV = KV{Latency: 0.05}

// Validate reports every negative or non-finite field.
func (k KV) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"latency", k.Latency}, {"bytes_per_token", k.BytesPerToken}, {"bandwidth", k.Bandwidth}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %v: expected a finite number >= 0", f.name, f.v))
		}
	}
	if k.BytesPerToken > 0 && k.Bandwidth == 0 {
		errs = append(errs, fmt.Errorf("bandwidth: 0 with bytes_per_token %v: expected a bandwidth > 0 to price the bytes", k.BytesPerToken))
	}
	if k.Latency > MaxSpan {
		errs = append(errs, fmt.Errorf("latency: %v s: expected at most %g s (1000 h)", k.Latency, MaxSpan))
	}
	if w := k.Wire(MaxProfileTokens); w > MaxSpan {
		errs = append(errs, fmt.Errorf("bytes_per_token, bandwidth: moving %d tokens takes %.4g s: expected at most %g s (1000 h); a transfer this slow overflows the simulated clock", MaxProfileTokens, w, MaxSpan))
	}
	return errors.Join(errs...)
}

// serialized reports whether transfers share the source link (and queue).
func (k KV) serialized() bool { return k.Bandwidth > 0 && k.BytesPerToken > 0 }

// Wire returns the seconds the link is busy moving tokens of context.
func (k KV) Wire(tokens int64) float64 {
	if !k.serialized() {
		return 0
	}
	return float64(tokens) * k.BytesPerToken / k.Bandwidth
}

// Link is one source instance's egress queue: transfers leave one at a
// time in the order they were started (FCFS, Arrow §5.4), each occupying
// the link for its bytes/bandwidth, then arriving Latency later.
type Link struct {
	busyUntil event.Time
}

// Transfer schedules moving tokens of context over the link starting no
// earlier than now, and returns when the KV is ready at the destination.
func (l *Link) Transfer(k KV, now event.Time, tokens int64) event.Time {
	if !k.serialized() {
		return now + event.Seconds(k.Latency)
	}
	start := max(now, l.busyUntil)
	l.busyUntil = start + event.Seconds(k.Wire(tokens))
	return l.busyUntil + event.Seconds(k.Latency)
}
