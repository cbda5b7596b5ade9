// Package journaltest holds test fixtures for journals that several
// packages' tests need.
package journaltest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// BumpSchema rewrites a closed journal's run metadata (the record with Seq
// 0: key 0 as 8 big-endian bytes) to claim the next schema version. The
// JSON keeps its length, so the value stays well formed.
func BumpSchema(t testing.TB, dir string) {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, "events"), &pebble.Options{Logger: quietLog{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := make([]byte, 8)
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf(`"schema":%d`, event.SchemaVersion)
	nv := bytes.Replace(v, []byte(old), []byte(fmt.Sprintf(`"schema":%d`, event.SchemaVersion+1)), 1)
	closer.Close()
	if bytes.Equal(nv, v) || len(nv) != len(v) {
		t.Fatalf("metadata value %q: cannot bump its schema", v)
	}
	if err := db.Set(key, nv, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// quietLog keeps Pebble's informational messages out of the test output.
type quietLog struct{}

func (quietLog) Infof(string, ...any)         {}
func (quietLog) Errorf(string, ...any)        {}
func (quietLog) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// A Damage breaks a closed, whole run directory (as journal.Writer.Close
// leaves it) in one way; Want is a fragment every reader's error must
// contain.
type Damage struct {
	Name string
	Want string
	Do   func(t testing.TB, dir string)
}

// Damages are the ways a run's journal can be broken: its writer killed
// before the end-of-run record, its files truncated, deleted or altered,
// records dropped or changed.
var Damages = []Damage{
	{"writer killed", "no end-of-run record", func(t testing.TB, dir string) { deleteKey(t, dir, endKey) }},
	{"table truncated", "damaged: ", func(t testing.TB, dir string) {
		p := largestTable(t, dir)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, st.Size()/2); err != nil {
			t.Fatal(err)
		}
	}},
	{"table deleted", "damaged: ", func(t testing.TB, dir string) {
		if err := os.Remove(largestTable(t, dir)); err != nil {
			t.Fatal(err)
		}
	}},
	{"bytes flipped", "damaged: ", func(t testing.TB, dir string) { flip(t, largestTable(t, dir), 0.4) }},
	{"store deleted", "no events/ store", func(t testing.TB, dir string) {
		if err := os.RemoveAll(filepath.Join(dir, "events")); err != nil {
			t.Fatal(err)
		}
	}},
	{"marker deleted", "no JOURNAL marker", func(t testing.TB, dir string) {
		if err := os.Remove(filepath.Join(dir, "JOURNAL")); err != nil {
			t.Fatal(err)
		}
	}},
	{"record dropped", "records read, the end-of-run record says", func(t testing.TB, dir string) {
		deleteKey(t, dir, seqKey(2))
	}},
	{"record altered", "damaged: records checksum", func(t testing.TB, dir string) {
		// Seq 1's value moved onto seq 2: a well-formed record, not the
		// one written.
		db := openRW(t, dir)
		defer db.Close()
		v, closer, err := db.Get(seqKey(1))
		if err != nil {
			t.Fatal(err)
		}
		v = bytes.Clone(v)
		closer.Close()
		if err := db.Set(seqKey(2), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}},
}

// endKey is the journal's end-of-run record key (journal/end.go).
var endKey = []byte{0xff, 'e', 'n', 'd'}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func openRW(t testing.TB, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, "events"), &pebble.Options{Logger: quietLog{}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func deleteKey(t testing.TB, dir string, key []byte) {
	t.Helper()
	db := openRW(t, dir)
	defer db.Close()
	if _, closer, err := db.Get(key); err != nil {
		t.Fatalf("%s: key %x: %v", dir, key, err)
	} else {
		closer.Close()
	}
	if err := db.Delete(key, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// largestTable returns the run's largest Pebble table file.
func largestTable(t testing.TB, dir string) string {
	t.Helper()
	store := filepath.Join(dir, "events")
	ents, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	best, size := "", int64(-1)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".sst") {
			continue
		}
		if st, err := e.Info(); err == nil && st.Size() > size {
			best, size = filepath.Join(store, e.Name()), st.Size()
		}
	}
	if best == "" {
		t.Fatalf("%s: no table files", store)
	}
	return best
}

// flip inverts 16 bytes of the file at the given fraction of its length.
func flip(t testing.TB, path string, at float64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := int(float64(len(b)) * at)
	for k := i; k < i+16 && k < len(b); k++ {
		b[k] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ExportDamages are the ways a Parquet export can be broken; Want is a
// fragment of every reader's error.
var ExportDamages = []Damage{
	{"role_moves.parquet deleted", "role_moves.parquet: missing", func(t testing.TB, dir string) {
		if err := os.Remove(filepath.Join(dir, "role_moves.parquet")); err != nil {
			t.Fatal(err)
		}
	}},
	{"requests.parquet truncated", "requests.parquet: damaged", func(t testing.TB, dir string) {
		p := filepath.Join(dir, "requests.parquet")
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, st.Size()/2); err != nil {
			t.Fatal(err)
		}
	}},
	{"runs.parquet bytes flipped", "runs.parquet: damaged", func(t testing.TB, dir string) {
		flip(t, filepath.Join(dir, "runs.parquet"), 0.5)
	}},
	{"manifest deleted", "no manifest.json", func(t testing.TB, dir string) {
		if err := os.Remove(filepath.Join(dir, "manifest.json")); err != nil {
			t.Fatal(err)
		}
	}},
}
