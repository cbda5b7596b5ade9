package event

import (
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeRunMeta: any run metadata text is read without a panic; an
// error says it is the run metadata's, and wraps ErrNewerSchema only for
// a schema newer than this build's (and does for one, checked once). Metadata read is of a
// schema from 1 to SchemaVersion and re-encodes (Encode) to text that
// reads the same.
func FuzzDecodeRunMeta(f *testing.F) {
	for _, m := range []RunMeta{
		{Schema: 1, Version: "v0.9.0", Driver: "sim", Arm: "static:3P5D", Rate: 4.5, Seed: 7, Trace: "chatdoc",
			TraceHash: "ab12", Fleet: "h100x8", ConfigHash: "cd34", Instances: 8, GPUs: 8, TTFTSLO: 2, TPOTSLO: 0.1, PrefixCache: true},
		{Schema: 1, Version: "dev", Driver: "live", Arm: "dynamo:start=30s", Rate: 2, Seed: 1, Trace: "burst", Fleet: "target",
			Instances: 1, TTFTSLO: 0.5, TPOTSLO: 0.05, StartUnixNano: 1712345678901234567, Target: "http://10.0.0.5:8000",
			Partial: true, Planned: 500, Sent: 213, LagP50: 0.001, LagP90: 0.02, LagP99: 0.7, Degraded: true},
	} {
		f.Add(m.Encode())
	}
	for _, s := range []string{
		`{"schema":2,"arm":"x"}`, `{"schema":0}`, `{"schema":-1}`, `{}`, `{"schema":1.5}`, `{"schema":1,"rate":1e400}`,
		`{"schema":1,"instances":-3,"rate":-1}`, `{"schema":1,"version":"\xff"}`, `null`, `[]`, `{`, ``,
	} {
		f.Add(s)
	}
	if _, err := DecodeRunMeta(`{"schema":2,"arm":"x"}`); !errors.Is(err, ErrNewerSchema) {
		f.Fatalf("schema 2: %v, want ErrNewerSchema", err)
	}
	f.Fuzz(func(t *testing.T, text string) {
		m, err := DecodeRunMeta(text)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "run metadata: ") {
				t.Fatalf("%q: %v", text, err)
			}
			if errors.Is(err, ErrNewerSchema) && m.Schema <= SchemaVersion {
				t.Fatalf("%q: schema %d, error %v", text, m.Schema, err)
			}
			return
		}
		if m.Schema < 1 || m.Schema > SchemaVersion {
			t.Fatalf("%q: read as schema %d", text, m.Schema)
		}
		if again, err := DecodeRunMeta(m.Encode()); err != nil || again != m {
			t.Fatalf("%q: re-encoded as %s, read back as %+v, %v; want %+v", text, m.Encode(), again, err, m)
		}
	})
}
