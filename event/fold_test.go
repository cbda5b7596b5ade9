package event

import (
	"strings"
	"testing"
)

func rec(at Time, k Kind, req RequestID) *Record {
	return &Record{At: at, Kind: k, Req: req, Inst: NoInstance, Peer: NoInstance}
}

func TestFoldLifeCycle(t *testing.T) {
	var f Fold
	a := rec(Second, KindArrival, 1)
	a.Ref, a.Tokens, a.Want, a.Class = Second/2, 100, 20, "chat"
	f.Record(a)
	f.Record(&Record{At: Second, Kind: KindAdmit, Req: 1, Inst: 2})
	f.Record(&Record{At: 2 * Second, Kind: KindPrefillDone, Req: 1, Inst: 2})
	f.Record(&Record{At: 2 * Second, Kind: KindDecodeStart, Req: 1, Inst: 5, Peer: 2, Cause: CauseCrossed})
	f.Record(&Record{At: 4 * Second, Kind: KindFinish, Req: 1, Inst: 5, Tokens: 21, Cause: CauseStop})
	f.Record(rec(3*Second, KindArrival, 2))
	f.Record(&Record{At: 3 * Second, Kind: KindRefuse, Req: 2, Cause: CauseOverload})
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	r := f.Rows()[0]
	if r.TTFT() != 3*Second/2 || r.TPOT() != 2*Second/20 || !r.Crossed || r.PrefillInst != 2 || r.DecodeInst != 5 {
		t.Fatalf("row %+v: ttft %v tpot %v", r, r.TTFT(), r.TPOT())
	}
	slo := SLO{TTFT: 2 * Second, TPOT: 200 * Millisecond}
	if c := Qualify(&r, slo); c != CheckOK {
		t.Fatalf("qualify = %v", c)
	}
	if c := Qualify(&r, SLO{TTFT: Second, TPOT: Second}); c != CheckTTFT {
		t.Fatalf("qualify with a 1 s TTFT SLO = %v, want ttft (TTFT counts from the scheduled send)", c)
	}
	r2 := f.Rows()[1]
	if r2.TTFT() != Never || r2.TPOT() != Never || Qualify(&r2, slo) != CheckNotDone {
		t.Fatalf("refused row %+v", r2)
	}
}

// A request admitted twice (re-placed after a failed leg) keeps its first
// admission as the end of its queue wait, the last one's prefill engine,
// and the spill of either.
func TestFoldReplacedRequest(t *testing.T) {
	var f Fold
	f.Record(rec(Second, KindArrival, 1))
	f.Record(&Record{At: 2 * Second, Kind: KindAdmit, Req: 1, Inst: 2, Cause: CauseSpilled})
	f.Record(&Record{At: 5 * Second, Kind: KindAdmit, Req: 1, Inst: 3})
	f.Record(&Record{At: 6 * Second, Kind: KindPrefillDone, Req: 1, Inst: 3})
	f.Record(&Record{At: 7 * Second, Kind: KindFinish, Req: 1, Inst: 3, Tokens: 2, Cause: CauseStop})
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	r := f.Rows()[0]
	if r.Admit != 2*Second || r.PrefillInst != 3 || !r.Spilled {
		t.Fatalf("row %+v: expected admit at 2 s (the first), prefill on 3 (the last), spilled", r)
	}
}

func TestQualifyRule(t *testing.T) {
	slo := SLO{TTFT: Second, TPOT: 100 * Millisecond}
	base := Row{Scheduled: 0, FirstToken: Second / 2, End: Second, Terminal: KindFinish, Cause: CauseStop, OutputTokens: 6}
	cases := []struct {
		name string
		edit func(*Row)
		want Check
	}{
		{"ok", func(*Row) {}, CheckOK},
		{"at the cap", func(r *Row) { r.Cause = CauseLength }, CheckLength},
		{"cancelled", func(r *Row) { r.Cause = CauseCancel }, CheckCancelled},
		{"one token", func(r *Row) { r.OutputTokens = 1 }, CheckTooShort},
		{"slow first token", func(r *Row) { r.FirstToken = 2 * Second; r.End = 3 * Second }, CheckTTFT},
		{"slow tokens", func(r *Row) { r.End = 2 * Second }, CheckTPOT},
		{"expired", func(r *Row) { r.Terminal = KindExpire }, CheckNotDone},
		{"TTFT exactly at the SLO", func(r *Row) { r.FirstToken = Second; r.End = Second + 500*Millisecond }, CheckOK},
	}
	for _, c := range cases {
		r := base
		c.edit(&r)
		if got := Qualify(&r, slo); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// The fold reports broken life cycles: two terminal records, records
// before the arrival, a request that never ended.
func TestFoldViolations(t *testing.T) {
	cases := []struct {
		recs []*Record
		want string
	}{
		{[]*Record{rec(0, KindArrival, 1), rec(1, KindFinish, 1), rec(2, KindFinish, 1)}, "after it ended"},
		{[]*Record{rec(0, KindAdmit, 1)}, "before its arrival"},
		{[]*Record{rec(0, KindArrival, 1)}, "never ended"},
		{[]*Record{rec(0, KindArrival, 1), rec(0, KindArrival, 1)}, "arrived twice"},
	}
	for _, c := range cases {
		var f Fold
		for _, r := range c.recs {
			f.Record(r)
		}
		if err := f.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Err() = %v, want %q", err, c.want)
		}
	}
}

func TestRunMeta(t *testing.T) {
	m := RunMeta{Schema: SchemaVersion, Arm: "adaptive", Rate: 2.4}
	got, err := DecodeRunMeta(m.Encode())
	if err != nil || got != m {
		t.Fatalf("round trip %+v, %v", got, err)
	}
	m.Schema = SchemaVersion + 1
	if _, err := DecodeRunMeta(m.Encode()); err == nil || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("newer schema: %v", err)
	}
	if _, err := DecodeRunMeta("{"); err == nil {
		t.Fatal("corrupt metadata accepted")
	}
}

func TestNames(t *testing.T) {
	for k := KindNone; k < kindCount; k++ {
		if strings.HasPrefix(k.String(), "kind(") {
			t.Errorf("kind %d has no name", k)
		}
	}
	for c := CauseNone + 1; c < causeCount; c++ {
		if c.String() == "" || strings.HasPrefix(c.String(), "cause(") {
			t.Errorf("cause %d has no name", c)
		}
	}
	if Seconds(1.5) != 1500*Millisecond || (1500*Millisecond).String() != "1.500s" {
		t.Error("time conversion")
	}
}

// A fold over several chunks keeps every row, and Reset reuses them.
func TestFoldChunks(t *testing.T) {
	var f Fold
	for round := 0; round < 2; round++ {
		n := 2*foldChunk + 7 - round*foldChunk
		for i := 1; i <= n; i++ {
			f.Record(&Record{At: Time(i), Kind: KindArrival, Req: RequestID(i), Tokens: int64(i)})
			f.Record(&Record{At: Time(i + 1), Kind: KindFinish, Req: RequestID(i), Tokens: 2})
		}
		if err := f.Err(); err != nil || f.Len() != n {
			t.Fatalf("round %d: %d rows, %v", round, f.Len(), err)
		}
		rows := f.Rows()
		for i := range rows {
			if rows[i].InputTokens != int64(i+1) || rows[i].End != Time(i+2) || !f.Ended(i) {
				t.Fatalf("round %d: row %d: %+v", round, i, rows[i])
			}
		}
		if f.Ended(n) || f.Ended(-1) {
			t.Fatal("Ended beyond the rows")
		}
		f.Reset()
	}
}

// Release lets whole chunks of ended rows go: the rows after them read as
// before, a record for a released request is a violation, and after a
// Reset the fold is whole again.
func TestFoldRelease(t *testing.T) {
	var f Fold
	n := 2*foldChunk + 100
	for i := 1; i <= n; i++ {
		f.Record(&Record{At: Time(i), Kind: KindArrival, Req: RequestID(i), Tokens: int64(i)})
		f.Record(&Record{At: Time(i + 1), Kind: KindFinish, Req: RequestID(i), Tokens: 2})
		f.Release(i) // every row below i has ended
	}
	if f.Released() != 2*foldChunk {
		t.Fatalf("released %d: expected whole chunks, %d", f.Released(), 2*foldChunk)
	}
	if err := f.Err(); err != nil || f.Len() != n || !f.Ended(0) {
		t.Fatalf("%d rows, %v", f.Len(), err)
	}
	var o Row
	f.RowAt(n-1, &o)
	seen := 0
	if err := f.Each(func(r *Row) error { seen++; return nil }); err != nil || seen != 100 || o.InputTokens != int64(n) {
		t.Fatalf("Each saw %d rows (%v), the last row %+v: expected the 100 kept", seen, err, o)
	}
	f.Record(&Record{At: Time(n + 5), Kind: KindFinish, Req: 3, Tokens: 2})
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), "request 3: finish") || !strings.Contains(err.Error(), "after it ended") {
		t.Fatalf("a record for a released request: %v", err)
	}
	f.Reset()
	for i := 1; i <= n; i++ {
		f.Record(&Record{At: Time(i), Kind: KindArrival, Req: RequestID(i)})
		f.Record(&Record{At: Time(i + 1), Kind: KindFinish, Req: RequestID(i)})
	}
	if err := f.Err(); err != nil || len(f.Rows()) != n || f.Rows()[5].End != 7 {
		t.Fatalf("after Reset: %v, %d rows", err, len(f.Rows()))
	}
}
