package journal

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// allKinds returns one record of every Kind a driver may record (all but
// KindRunMeta, which Create writes), with every field set to a non-zero
// value, plus records probing the edges of each field's range.
func allKinds() []event.Record {
	var out []event.Record
	for k := event.KindNone; !strings.HasPrefix(k.String(), "kind("); k++ {
		if k == event.KindRunMeta {
			continue
		}
		i := int64(k)
		out = append(out, event.Record{
			At: event.Time(1000*i + 7), Kind: k, Cause: event.Cause(i%13 + 1),
			From: event.RolePrefill, To: event.RoleDecode, Inst: event.Instance(i), Peer: event.Instance(i + 1),
			Req: event.RequestID(i + 100), Tokens: 4096 + i, Want: 512 + i, Ref: event.Time(-3 * i),
			Class: "class-" + k.String(), Text: `{"kind":"` + k.String() + `"}`,
		})
	}
	if len(out) < 16 {
		panic("expected every kind")
	}
	out = append(out,
		event.Record{At: math.MinInt64, Kind: event.KindDecision, Cause: 255, From: 255, To: event.RoleMixed,
			Inst: math.MaxInt32, Peer: math.MinInt32, Req: math.MaxInt64, Tokens: math.MinInt64, Want: math.MaxInt64,
			Ref: event.Never, Class: "ünïcode ✓", Text: strings.Repeat("long text ", 20000)},
		event.Record{At: event.Never, Kind: event.KindHealth, Inst: 0, Peer: 0, Req: -5, Tokens: -1, Want: -1, Ref: 1},
		event.Record{Kind: event.KindArrival, Inst: event.NoInstance, Peer: event.NoInstance}, // all defaults
		event.Record{Kind: event.KindAdmit, Inst: 3, Peer: event.NoInstance, Req: 9, Epoch: 1 << 40},
		event.Record{Kind: event.KindArrival, Inst: event.NoInstance, Peer: event.NoInstance, Req: 10, Tokens: 7000,
			PrefixGroup: math.MaxInt64, PrefixTokens: 5120},
		event.Record{Kind: event.KindArrival, Inst: event.NoInstance, Peer: event.NoInstance, PrefixGroup: -3}, // a bad group still reads back
		event.Record{Kind: 200, Inst: event.NoInstance, Peer: event.NoInstance, Class: "\x00", Text: "\xff\xfe"},
	)
	return out
}

func replayAll(t *testing.T, r *Reader) []event.Record {
	t.Helper()
	var got []event.Record
	if err := r.Replay(func(rec *event.Record) error {
		got = append(got, *rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestRoundTrip(t *testing.T) {
	for _, pol := range []SyncPolicy{SyncEveryBatch, SyncOnClose} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			meta := testMeta("static:3P5D", 2.4)
			w, err := Create(dir, meta, Options{Sync: pol, BatchRecords: 3})
			if err != nil {
				t.Fatal(err)
			}
			meta.Schema = event.SchemaVersion
			want := []event.Record{{Seq: 0, Kind: event.KindRunMeta, Inst: event.NoInstance, Peer: event.NoInstance, Text: meta.Encode()}}
			for i, r := range allKinds() {
				// Alternate writer-assigned and explicit (gapped) seqs.
				if i%3 == 2 {
					r.Seq = want[len(want)-1].Seq + 10
				}
				in := r
				w.Record(&in)
				in.Text = "mutated after Record" // Record must have copied it
				if r.Seq == 0 {
					r.Seq = want[len(want)-1].Seq + 1
				}
				want = append(want, r)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if !IsJournal(dir) {
				t.Fatal("IsJournal = false after Close")
			}
			r, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := r.Meta(); got != meta {
				t.Errorf("Meta = %+v, want %+v", got, meta)
			}
			got := replayAll(t, r)
			if len(got) != len(want) {
				t.Fatalf("replayed %d records, want %d", len(got), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("record %d:\n got %+v\nwant %+v", i, trunc(got[i]), trunc(want[i]))
				}
			}
		})
	}
}

func trunc(r event.Record) event.Record {
	if len(r.Text) > 80 {
		r.Text = r.Text[:80] + "..."
	}
	return r
}

func TestCodecProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var d decoder
	str := func() string {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return string(b)
	}
	i64 := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return int64(rng.Uint64())
		default:
			return rng.Int64N(1 << 20)
		}
	}
	for n := 0; n < 20000; n++ {
		in := event.Record{
			Seq: rng.Uint64(), At: event.Time(i64()), Kind: event.Kind(rng.UintN(256)), Cause: event.Cause(rng.UintN(256)),
			From: event.Role(rng.UintN(4)), To: event.Role(rng.UintN(4)), Inst: event.Instance(int32(i64())), Peer: event.Instance(int32(i64())),
			Req: event.RequestID(i64()), Tokens: i64(), Want: i64(), Ref: event.Time(i64()), Epoch: uint64(i64()),
			PrefixGroup: i64(), PrefixTokens: i64(),
		}
		if rng.IntN(2) == 0 {
			in.Class, in.Text = str(), str()
		}
		v := appendValue(nil, &in)
		var out event.Record
		if err := d.decode(in.Seq, v, &out); err != nil {
			t.Fatalf("decode(%+v): %v", in, err)
		}
		if out != in {
			t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
		}
		// Every strict prefix is malformed, and so is any trailing byte.
		for cut := 0; cut < len(v); cut++ {
			if err := d.decode(in.Seq, v[:cut], &out); err == nil {
				t.Fatalf("decode of %d-byte prefix of %x succeeded", cut, v)
			}
		}
		if err := d.decode(in.Seq, append(v, 0), &out); err == nil {
			t.Fatal("decode with a trailing byte succeeded")
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, r := range allKinds() {
		f.Add(appendValue(nil, &r))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{1, 2, 0x80, 0x02, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, v []byte) {
		var d decoder
		var r event.Record
		err := d.decode(42, v, &r)
		if err != nil {
			if !strings.Contains(err.Error(), "seq 42") {
				t.Fatalf("error does not name the key: %v", err)
			}
			return
		}
		// A value that decodes re-encodes to one that decodes the same.
		var again event.Record
		if err := d.decode(42, appendValue(nil, &r), &again); err != nil || again != r {
			t.Fatalf("re-encode: %v, %+v vs %+v", err, again, r)
		}
	})
}

func TestWriterSeqRules(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := Create(dir, testMeta("a", 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(&event.Record{Seq: 5, Kind: event.KindQueue, Inst: event.NoInstance, Peer: event.NoInstance})
	w.Record(&event.Record{Kind: event.KindQueue, Inst: event.NoInstance, Peer: event.NoInstance}) // 6
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	w.Record(&event.Record{Seq: 6, Kind: event.KindQueue, Inst: event.NoInstance, Peer: event.NoInstance})
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "seq 6") || !strings.Contains(err.Error(), "increase") {
		t.Fatalf("Err = %v, want a sequence error naming seq 6", err)
	}
	w.Record(&event.Record{Seq: 100, Kind: event.KindQueue}) // dropped: the error is sticky
	if err := w.Flush(); err == nil {
		t.Fatal("Flush after a sequence error returned nil")
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after a sequence error returned nil")
	}
	// A writer that failed writes no end-of-run record: the run reads as
	// incomplete, and as partial it holds what was committed before.
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "no end-of-run record") || !strings.Contains(err.Error(), "seq 6") {
		t.Fatalf("Open of a failed run = %v, want an incomplete-run error naming seq 6", err)
	}
	r, err := OpenWith(dir, OpenOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var seqs []uint64
	for _, rec := range replayAll(t, r) {
		seqs = append(seqs, rec.Seq)
	}
	if !reflect.DeepEqual(seqs, []uint64{0, 5, 6}) {
		t.Fatalf("seqs = %v, want [0 5 6]", seqs)
	}

	// A journal whose writer is open cannot be read yet.
	wo, err := Create(filepath.Join(t.TempDir(), "open"), testMeta("a", 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := Open(wo.Dir()); err == nil || !strings.Contains(err.Error(), "Writer is still open") {
		if r != nil {
			r.Close()
		}
		t.Errorf("Open of a journal being written: %v", err)
	}
	wo.Close()

	// A second run-metadata record is refused.
	w2, err := Create(filepath.Join(t.TempDir(), "run"), testMeta("a", 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	w2.Record(&event.Record{Kind: event.KindRunMeta, Text: "{}"})
	if err := w2.Close(); err == nil || !strings.Contains(err.Error(), "metadata") {
		t.Fatalf("Close = %v, want a run-metadata error", err)
	}
	// Use after Close is an error, not a panic.
	w2.Record(&event.Record{Kind: event.KindQueue})
	if err := w2.Flush(); err == nil {
		t.Fatal("Flush after Close returned nil")
	}
}

func TestCreateRefusesExistingJournal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeSynth(t, dir, testMeta("a", 1), 10, 1, Options{})
	_, err := Create(dir, testMeta("a", 1), Options{})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "already holds a journal") {
		t.Fatalf("Create over a journal: %v", err)
	}
	if _, err := Create(filepath.Join(t.TempDir(), "x"), testMeta("a", 1), Options{BatchRecords: -1}); err == nil {
		t.Fatal("negative BatchRecords accepted")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "x"), testMeta("a", 1), Options{Sync: 9}); err == nil {
		t.Fatal("unknown sync policy accepted")
	}
	// A marker's temporary file there (a crash's remains, or a link an
	// attacker planted) is refused too, and its target never written.
	planted := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep me"), 0o644)
	if err := os.Symlink(victim, filepath.Join(planted, markerName+".tmp")); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(planted, testMeta("a", 1), Options{}); err == nil || !strings.Contains(err.Error(), "already holds a journal") {
		t.Fatalf("Create over a planted %s.tmp: %v", markerName, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me" {
		t.Fatalf("the link's target was written: %q", b)
	}
	// An existing empty directory is fine.
	empty := t.TempDir()
	w, err := Create(empty, testMeta("a", 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// rawSet writes value under seq's key straight into a closed journal's
// Pebble store, bypassing the writer.
func rawSet(t *testing.T, dir string, seq uint64, value []byte) {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, eventsName), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	var k [keyLen]byte
	putKey(&k, seq)
	if err := db.Set(k[:], value, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBadInputs(t *testing.T) {
	mustFail := func(t *testing.T, dir string, wants ...string) {
		t.Helper()
		r, err := Open(dir)
		if err == nil {
			r.Close()
			t.Fatalf("Open(%s) succeeded", dir)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open error %q does not mention %q", err, w)
			}
		}
		t.Logf("Open: %v", err)
	}
	t.Run("missing", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "nope")
		mustFail(t, dir, dir, "no such directory")
	})
	t.Run("not a directory", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, []byte("x"), 0o644)
		mustFail(t, f, "not a directory")
	})
	t.Run("empty", func(t *testing.T) {
		dir := t.TempDir()
		mustFail(t, dir, dir, "empty directory")
		if IsJournal(dir) {
			t.Error("IsJournal(empty dir) = true")
		}
	})
	t.Run("garbage file", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "data.bin"), bytes.Repeat([]byte{0xde, 0xad}, 1000), 0o644)
		mustFail(t, dir, dir, "not a journal")
	})
	t.Run("garbage marker", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, markerName), []byte("\x00\x01garbage"), 0o644)
		os.Mkdir(filepath.Join(dir, eventsName), 0o755)
		mustFail(t, dir, dir, "not a narwhal-bench journal marker")
	})
	t.Run("newer layout", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, markerName), []byte("narwhal-bench journal\nlayout 2\n"), 0o644)
		os.Mkdir(filepath.Join(dir, eventsName), 0o755)
		mustFail(t, dir, dir, "layout 2", "upgrade")
	})
	t.Run("garbage store", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, markerName), []byte(markerText), 0o644)
		os.Mkdir(filepath.Join(dir, eventsName), 0o755)
		for _, name := range []string{"CURRENT", "MANIFEST-000001", "000002.log", "OPTIONS-000003", "marker.manifest.000001.MANIFEST-000001"} {
			os.WriteFile(filepath.Join(dir, eventsName, name), bytes.Repeat([]byte("garbage!"), 512), 0o644)
		}
		mustFail(t, dir, dir, "event store")
	})
	t.Run("empty store", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, markerName), []byte(markerText), 0o644)
		os.Mkdir(filepath.Join(dir, eventsName), 0o755)
		mustFail(t, dir, dir, "event store")
	})
	t.Run("newer schema", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		writeSynth(t, dir, testMeta("a", 1), 10, 1, Options{})
		m := testMeta("a", 1)
		m.Schema = event.SchemaVersion + 1
		rec := event.Record{Kind: event.KindRunMeta, Inst: event.NoInstance, Peer: event.NoInstance, Text: m.Encode()}
		rawSet(t, dir, 0, appendValue(nil, &rec))
		mustFail(t, dir, dir, "schema", "upgrade")
	})
	t.Run("no metadata", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		writeSynth(t, dir, testMeta("a", 1), 10, 1, Options{})
		db, err := pebble.Open(filepath.Join(dir, eventsName), &pebble.Options{Logger: quietLogger{}})
		if err != nil {
			t.Fatal(err)
		}
		var k [keyLen]byte
		putKey(&k, 0)
		db.Delete(k[:], pebble.Sync)
		db.Close()
		mustFail(t, dir, dir, "no run-metadata record")
	})
	t.Run("corrupt metadata", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		writeSynth(t, dir, testMeta("a", 1), 10, 1, Options{})
		rawSet(t, dir, 0, []byte{valueFormat, byte(event.KindRunMeta), 0xff})
		mustFail(t, dir, dir, "seq 0")
	})
	t.Run("metadata not JSON", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		writeSynth(t, dir, testMeta("a", 1), 10, 1, Options{})
		rec := event.Record{Kind: event.KindRunMeta, Inst: event.NoInstance, Peer: event.NoInstance, Text: "{not json"}
		rawSet(t, dir, 0, appendValue(nil, &rec))
		mustFail(t, dir, dir, "run metadata")
	})
	t.Run("corrupt value", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		writeSynth(t, dir, testMeta("a", 1), 50, 1, Options{})
		for i, bad := range [][]byte{
			{},                                    // empty
			{9, 2, 0, 0},                          // unknown format
			{valueFormat, 2, 0x80},                // truncated flags
			{valueFormat, 2, 0x80, 0x40, 0},       // unknown flag bits
			{valueFormat, 2, 0, 0, 0},             // trailing byte
			{valueFormat, 2, 0x80, 0x02, 0, 0x7f}, // class longer than the value
			{valueFormat, 2, flagInst, 0, 0xff, 0xff, 0xff, 0xff, 0x7f}, // inst out of int32
		} {
			rawSet(t, dir, 17, bad)
			r, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			err = r.Replay(func(*event.Record) error { n++; return nil })
			r.Close()
			if err == nil || !strings.Contains(err.Error(), "seq 17") || !strings.Contains(err.Error(), dir) {
				t.Errorf("case %d: Replay = %v, want an error naming %s and seq 17", i, err, dir)
			} else {
				t.Logf("Replay: %v", err)
			}
			if n != 17 {
				t.Errorf("case %d: fn saw %d records before the bad one, want 17", i, n)
			}
			// Fold, the table readers and Export report it too.
			r, _ = Open(dir)
			if _, err := Fold(r); err == nil {
				t.Errorf("case %d: Fold accepted a corrupt journal", i)
			}
			r.Close()
			if _, err := Export(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), "seq 17") {
				t.Errorf("case %d: Export = %v", i, err)
			}
		}
	})
}

func TestReplayStopsOnCallbackError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeSynth(t, dir, testMeta("a", 1), 100, 1, Options{})
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	stop := os.ErrDeadlineExceeded
	n := 0
	if err := r.Replay(func(*event.Record) error {
		n++
		if n == 10 {
			return stop
		}
		return nil
	}); err != stop || n != 10 {
		t.Fatalf("Replay = %v after %d records", err, n)
	}
	r.Close()
	if err := r.Replay(func(*event.Record) error { return nil }); err == nil {
		t.Fatal("Replay after Close succeeded")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRuns(t *testing.T) {
	root := writeSynthRoot(t)
	os.Mkdir(filepath.Join(root, "not-a-run"), 0o755)
	os.WriteFile(filepath.Join(root, "notes.txt"), []byte("x"), 0o644)
	runs, err := Runs(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range runs {
		names = append(names, filepath.Base(r))
	}
	want := []string{"aggregated_r2.4", "static-3P5D_r2.4", "static-3P5D_r6.4"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("Runs = %v, want %v", names, want)
	}
	one, err := Runs(runs[1])
	if err != nil || len(one) != 1 || one[0] != runs[1] {
		t.Fatalf("Runs(run dir) = %v, %v", one, err)
	}
	if _, err := Runs(filepath.Join(root, "missing")); err == nil {
		t.Fatal("Runs of a missing root succeeded")
	}
	if none, err := Runs(t.TempDir()); err != nil || len(none) != 0 {
		t.Fatalf("Runs(empty) = %v, %v", none, err)
	}
	if _, err := Export(t.TempDir(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "no journals") {
		t.Fatalf("Export of an empty root: %v", err)
	}
}

func TestTables(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	var want []event.Record
	w, err := Create(dir, testMeta("a", 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	synth(2000, 9, func(r *event.Record) {
		w.Record(r)
		want = append(want, *r)
	})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, rows := foldRun(t, dir)
	if len(rows) != 2000 {
		t.Fatalf("Fold: %d rows, want 2000", len(rows))
	}
	moves, err := RoleMoves(r)
	if err != nil {
		t.Fatal(err)
	}
	decs, err := Decisions(r)
	if err != nil {
		t.Fatal(err)
	}
	faults, err := Faults(r)
	if err != nil {
		t.Fatal(err)
	}
	var nm, nd, nf int
	for i, rec := range want {
		seq := uint64(i + 1)
		switch rec.Kind {
		case event.KindRoleMove:
			m := moves[nm]
			if m.Seq != seq || m.At != rec.At || m.Inst != rec.Inst || m.From != rec.From || m.To != rec.To ||
				m.Cause != rec.Cause || m.ResidentDecodeTokens != rec.Tokens || m.ResidentPrefill != rec.Ref || m.Reason != rec.Text {
				t.Fatalf("role move %d = %+v, record %+v", nm, m, rec)
			}
			nm++
		case event.KindDecision:
			if d := decs[nd]; d.Seq != seq || d.At != rec.At || d.Text != rec.Text {
				t.Fatalf("decision %d = %+v", nd, d)
			}
			nd++
		case event.KindFail, event.KindHealth:
			if f := faults[nf]; f.Seq != seq || f.Kind != rec.Kind || f.Inst != rec.Inst || f.Req != rec.Req || f.Cause != rec.Cause || f.Tokens != rec.Tokens {
				t.Fatalf("fault %d = %+v", nf, f)
			}
			nf++
		}
	}
	if nm != len(moves) || nd != len(decs) || nf != len(faults) || nm == 0 || nd == 0 || nf == 0 {
		t.Fatalf("moves %d/%d decisions %d/%d faults %d/%d", len(moves), nm, len(decs), nd, len(faults), nf)
	}
}

// TestEpochLeavesOldEncodingAlone checks that a record without an epoch
// encodes exactly as before the field existed (simulator journals keep
// their bytes), and that an epoch costs three bytes here (the flags
// uvarint grows to two bytes, the epoch takes one more).
func TestEpochLeavesOldEncodingAlone(t *testing.T) {
	r := event.Record{At: 5, Kind: event.KindAdmit, Inst: 2, Peer: event.NoInstance, Req: 7}
	old := appendValue(nil, &r)
	// format, kind, flags (inst|req), at, inst, req
	want := []byte{valueFormat, byte(event.KindAdmit), flagInst | flagReq, 10, 4, 14}
	if string(old) != string(want) {
		t.Fatalf("encoding without epoch = %x, want %x", old, want)
	}
	r.Epoch = 300
	v := appendValue(nil, &r)
	if len(v) != len(old)+3 {
		t.Fatalf("epoch 300 added %d bytes, want 3", len(v)-len(old))
	}
	var d decoder
	var out event.Record
	if err := d.decode(1, v, &out); err != nil || out.Epoch != 300 {
		t.Fatalf("decode: %+v, %v", out, err)
	}
	// The prefix pair (live arrivals with --prefix-cache) likewise: absent,
	// the old bytes; present, its own flag and two varints.
	r.Epoch = 0
	r.PrefixGroup, r.PrefixTokens = 1, 64
	v = appendValue(nil, &r)
	if len(v) != len(old)+4 || v[2]&0x80 == 0 {
		t.Fatalf("prefix 1/64 added %d bytes (%x), want 4 with a two-byte flags uvarint", len(v)-len(old), v)
	}
	if err := d.decode(1, v, &out); err != nil || out.PrefixGroup != 1 || out.PrefixTokens != 64 {
		t.Fatalf("decode: %+v, %v", out, err)
	}
}
