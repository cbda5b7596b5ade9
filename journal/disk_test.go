package journal

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// diskUsage sums the space the files under dir take on disk (allocated
// blocks, so preallocated space counts) and their apparent sizes.
func diskUsage(t *testing.T, dir string) (alloc, apparent int64) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			apparent += info.Size()
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				alloc += st.Blocks * 512
			} else {
				alloc += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return alloc, apparent
}

// TestDiskCost: a closed journal takes on disk at most its data plus 1 MB:
// no preallocated write-ahead log and no stale logs are left, so the space
// allocated is the apparent size of the store's files (its tables and a
// few kilobytes of Pebble metadata), and those hold the records with at
// most 25% overhead (Pebble's internal key trailers and block indexes;
// blocks are stored uncompressed).
func TestDiskCost(t *testing.T) {
	sizes := []int{142, 20000}
	if !testing.Short() {
		sizes = append(sizes, 200000) // past one 32 MiB memtable: several logs and tables
	}
	for _, n := range sizes {
		dir := filepath.Join(t.TempDir(), "run")
		w, err := Create(dir, testMeta("disk", 1), Options{})
		if err != nil {
			t.Fatal(err)
		}
		data := int64(keyLen + len(appendValue(nil, &event.Record{Kind: event.KindRunMeta, Text: testMeta("disk", 1).Encode()})))
		synth(n, 5, func(r *event.Record) {
			w.Record(r)
			data += keyLen + int64(len(appendValue(nil, r)))
		})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		alloc, apparent := diskUsage(t, dir)
		t.Logf("%d requests: %d bytes of records, %d bytes on disk (%d apparent)", n, data, alloc, apparent)
		if alloc > apparent+1<<20 {
			t.Errorf("%d requests: the journal takes %d bytes on disk for files of %d bytes: over data + 1 MB", n, alloc, apparent)
		}
		if apparent > data+data/4+64<<10 {
			t.Errorf("%d requests: the journal's files take %d bytes for %d bytes of records: over 125%% + 64 KiB", n, apparent, data)
		}
		ents, err := os.ReadDir(filepath.Join(dir, eventsName))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if filepath.Ext(e.Name()) == ".log" {
				t.Errorf("%d requests: write-ahead log %s left behind", n, e.Name())
			}
		}
		if err := readWhole(dir); err != nil {
			t.Fatal(err)
		}
	}
}
