package sim

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/core"
	eng "github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// recordLog keeps a copy of every record.
type recordLog []event.Record

func (l *recordLog) Record(r *event.Record) { *l = append(*l, *r) }

// funcSource hands out requests from a function, holding none.
type funcSource struct {
	next func(*Request) bool
	err  error
}

func (s *funcSource) Next(r *Request) bool { return s.next(r) }
func (s *funcSource) Err() error           { return s.err }

// withPrefixes gives every third request a shared prefix of one of 7
// groups.
func withPrefixes(r *Request, i int) {
	if i%3 == 0 {
		r.PrefixGroup, r.PrefixTokens = int64(i%7+1), min(r.InputTokens, 40+i%300)
	}
}

// A run streamed from a source makes exactly the records (and the stats)
// of the same requests handed over as a slice, on every arm, with prefix
// caching, the admission queue, bounded KV and a drain limit that cuts
// requests off.
func TestStreamMatchesSlice(t *testing.T) {
	type variant struct {
		name string
		edit func(*Config)
		rate float64
	}
	variants := []variant{
		{"plain", func(*Config) {}, 3},
		{"overloaded", func(*Config) {}, 12},
		{"prefix cache", func(c *Config) {
			c.Cache = PrefixCache{Enabled: true, PrefixCache: eng.PrefixCache{BlockTokens: 16, CapacityTokens: 5000}}
		}, 4},
		{"admission queue", func(c *Config) { c.Admission = core.Admission{Mode: core.AdmitQueue, Depth: 50} }, 10},
		{"kv capacity", func(c *Config) { c.Batch.KVCapacityTokens = 30000; c.Batch.MaxSeqs = 16 }, 6},
		{"drain limit", func(c *Config) { c.DrainLimit = 5 * event.Second }, 15},
	}
	arms := []string{"static:2P2D", "aggregated", "adaptive", "arrow", "planner", "coldswap", "dynamo", "ray"}
	const n = 600
	for _, v := range variants {
		for _, arm := range arms {
			cfg := refConfig(4)
			v.edit(&cfg)
			reqs := randomTrace(21, n, v.rate)
			for i := range reqs {
				withPrefixes(&reqs[i], i)
			}
			var want recordLog
			s, err := New(cfg, mustController(t, arm, 4), reqs, &want)
			if err != nil {
				t.Fatal(err)
			}
			wantSt, err := s.Run()
			if err != nil {
				t.Fatal(err)
			}
			src := newRandomSource(21, n, v.rate)
			i := 0
			var got recordLog
			s, err = NewStream(cfg, mustController(t, arm, 4), &funcSource{next: func(r *Request) bool {
				if !src.Next(r) {
					return false
				}
				withPrefixes(r, i)
				i++
				return true
			}}, &got)
			if err != nil {
				t.Fatal(err)
			}
			gotSt, err := s.Run()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s, %s: %+v", v.name, arm, gotSt)
			if gotSt != wantSt {
				t.Errorf("%s, %s: streamed stats %+v, from a slice %+v", v.name, arm, gotSt, wantSt)
			}
			if v.name == "kv capacity" && gotSt.Preemptions == 0 {
				t.Errorf("%s, %s: no preemption: expected the KV capacity to bind", v.name, arm)
			}
			if !reflect.DeepEqual(got, want) {
				k := 0
				for k < min(len(got), len(want)) && reflect.DeepEqual(got[k], want[k]) {
					k++
				}
				t.Fatalf("%s, %s: %d records streamed, %d from a slice; first difference at record %d", v.name, arm, len(got), len(want), k)
			}
		}
	}
}

// A streamed run keeps every invariant the checker knows: each offered
// request ends exactly once, tokens in order, decode after the first
// token.
func TestStreamedRunInvariants(t *testing.T) {
	for _, arm := range []string{"static:4P4D", "adaptive", "dynamo"} {
		cfg := refConfig(8)
		c := newChecker(t)
		cfg.TokenHook = c.hook
		reqs := randomTrace(5, 1500, 9)
		s, err := NewStream(cfg, mustController(t, arm, 8), newRandomSource(5, 1500, 9), c)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		if st.Offered != len(reqs) {
			t.Fatalf("%s: %d offered, want %d", arm, st.Offered, len(reqs))
		}
		c.finish(reqs, st)
	}
}

// The request states a run holds follow the requests in flight, not the
// requests offered: twenty times the requests at the same load leave the
// ring of states about as large, and far smaller than the run. (The ring
// spans the requests from the oldest still open to the newest, here about
// twice the 400-odd in flight at most, rounded up to a power of two; its
// longest span grows only with the rarest long-lived request.)
func TestStateFollowsRequestsInFlight(t *testing.T) {
	slots := func(n int) int {
		s, err := NewStream(refConfig(8), mustController(t, "adaptive", 8), newRandomSource(3, n, 4), nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		if st.Offered != n || st.Finished != n {
			t.Fatalf("%d requests: %+v", n, st)
		}
		return s.Slots()
	}
	small, large := slots(5000), slots(100000)
	t.Logf("request states held: %d for 5,000 requests, %d for 100,000", small, large)
	if large > 2*small || large > 2048 {
		t.Fatalf("request states held: %d for 5,000 requests, %d for 100,000: expected about the same, a few hundred", small, large)
	}
}

// A request out of order or malformed from a source ends the run with an
// error naming it; so does the source's own error.
func TestStreamErrors(t *testing.T) {
	cfg := refConfig(2)
	for _, c := range []struct {
		reqs []Request
		err  error
		want string
	}{
		{[]Request{{At: 5 * event.Second, InputTokens: 1, OutputTokens: 1}, {At: 4 * event.Second, InputTokens: 1, OutputTokens: 1}}, nil, "request 2 at 4.000s before request 1 at 5.000s"},
		{[]Request{{At: 5, InputTokens: 0, OutputTokens: 1}}, nil, "request 1: input 0"},
		{[]Request{{At: 5, InputTokens: 1 << 40, OutputTokens: 1}}, nil, "expected at most 2147483647 tokens"},
		{[]Request{{At: 5, InputTokens: 10, OutputTokens: 10}}, errors.New("disk on fire"), "disk on fire"},
	} {
		i := 0
		src := &funcSource{err: c.err, next: func(r *Request) bool {
			if i >= len(c.reqs) {
				return false
			}
			*r = c.reqs[i]
			i++
			return true
		}}
		s, err := NewStream(cfg, mustController(t, "static:1P1D", 2), src, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
}
