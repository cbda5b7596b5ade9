package simcli

import (
	"strings"
	"testing"
	"time"
)

// Off a terminal, progress is a line as a step ends, at most one a
// minute, none in the first minute nor at the end: a short sweep's log
// holds none, a long one's a line a minute.
func TestProgressLines(t *testing.T) {
	var b strings.Builder
	clock := time.Unix(0, 0)
	p := progressLines(&b, "narwhal-sim", func() time.Time { return clock }, time.Minute)
	for done, at := range []time.Duration{10 * time.Second, 50 * time.Second, 61 * time.Second, 90 * time.Second, 125 * time.Second, 200 * time.Second} {
		clock = time.Unix(0, 0).Add(at)
		p(done+1, 6)
	}
	want := "narwhal-sim: progress: 3 of 6 steps done after 1m1s\nnarwhal-sim: progress: 5 of 6 steps done after 2m5s\n"
	if b.String() != want {
		t.Fatalf("lines:\n%s\nwant:\n%s", b.String(), want)
	}
}
