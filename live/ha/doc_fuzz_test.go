package ha

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/live"
)

// FuzzDecodeDoc: any published state document is read without a panic;
// an error says it is the published state's. A document read is of
// DocVersion, and re-encodes to one that reads the same. Resumed by a
// fleet of its own engines' names (live.ResumeFrom), it either errors,
// naming the resume, or gives one role, generation, health and start per
// engine, the roles the document's, the starts 0 (unknown) or after the
// epoch, and a move count of 0 or more; a fleet of other names or
// another size is refused.
func FuzzDecodeDoc(f *testing.F) {
	for _, s := range []string{
		// What Publish writes (a leader's GET /state).
		`{"version":1,"epoch":7,"leader":"10.0.0.5:8000","at_unix_nano":1712345678901234567,"state":{"arm":"adaptive","now_s":12.5,"split":{"prefill":1,"decode":1},"moves":3,` +
			`"counts":{},"engines":[{"name":"e0","url":"http://10.0.0.1:8100","role":"prefill","online":true,"down":false,"generation":2,"process_start_s":1712345600.25,"prefill_legs":1,"prefill_tokens":512,"decode_legs":0,"decode_tokens":0,"mean_interval_s":0},` +
			`{"name":"e1","url":"http://10.0.0.2:8100","role":"decode","online":false,"down":true,"generation":1,"prefill_legs":0,"prefill_tokens":0,"decode_legs":2,"decode_tokens":900,"mean_interval_s":0.021,"last_move_s":4.5}]}}`,
		`{"version":1,"epoch":1,"leader":"a","state":{"arm":"static:1P1D","engines":[]}}`,
		`{"version":1,"state":{"moves":-1,"engines":[{"name":"e0","role":"mixed","process_start_s":-5}]}}`,
		`{"version":1,"state":{"engines":[{"name":"e0","role":"none"},{"name":"e0","role":"decode","generation":18446744073709551615}]}}`,
		`{"version":2,"state":{}}`, `{"version":1,"state":{"engines":null}}`, `{"version":1,"state":null}`,
		`{"version":"1"}`, `null`, `[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeDoc(b)
		if err != nil {
			if d != nil || !strings.HasPrefix(err.Error(), "ha: published state: ") {
				t.Fatalf("%q: %v, %v", b, d, err)
			}
			return
		}
		if d.Version != DocVersion {
			t.Fatalf("%q: read as version %d", b, d.Version)
		}
		again, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("%q: re-encode: %v", b, err)
		}
		d2, err := decodeDoc(again)
		if err != nil || !reflect.DeepEqual(d, d2) {
			t.Fatalf("%q: re-encoded as %s, read back as %+v, %v; want %+v", b, again, d2, err, d)
		}

		names := make([]string, len(d.State.Engines))
		for i, e := range d.State.Engines {
			names[i] = e.Name
		}
		rs, err := live.ResumeFrom(d.State, names)
		if err != nil {
			if rs != nil || !strings.HasPrefix(err.Error(), "live: resume: ") {
				t.Fatalf("%q: %v, %v", b, rs, err)
			}
		} else {
			n := len(names)
			if len(rs.Roles) != n || len(rs.Generations) != n || len(rs.Down) != n || len(rs.Starts) != n || rs.Moves < 0 {
				t.Fatalf("%q: resume %+v for %d engines", b, rs, n)
			}
			for i, e := range d.State.Engines {
				if rs.Roles[i].String() != e.Role || rs.Generations[i] != e.Generation || rs.Down[i] != e.Down {
					t.Fatalf("%q: engine %d resumed as %v, generation %d, down %v", b, i, rs.Roles[i], rs.Generations[i], rs.Down[i])
				}
				if s := rs.Starts[i]; s != 0 && !(s > 0 && !math.IsInf(s, 0)) {
					t.Fatalf("%q: engine %d resumed with start %v", b, i, s)
				}
			}
		}
		if _, err := live.ResumeFrom(d.State, append(names, "extra")); err == nil {
			t.Fatalf("%q: resumed by a fleet of another size", b)
		}
		if len(names) > 0 {
			other := append([]string(nil), names...)
			other[0] += "-other"
			if _, err := live.ResumeFrom(d.State, other); err == nil {
				t.Fatalf("%q: resumed by a fleet of other names", b)
			}
		}
	})
}
