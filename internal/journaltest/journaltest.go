// Package journaltest holds test fixtures for journals that several
// packages' tests need.
package journaltest

import (
	"bytes"
	"fmt"
	"path/filepath"
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
