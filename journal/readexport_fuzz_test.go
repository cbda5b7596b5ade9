package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadExport: an export whose table bytes are anything, with a
// manifest that matches them (so the checksum lets them through to the
// Parquet decoder), reads without panicking: it either returns an error
// or reads every run of the untouched export, each with all its rows
// (never a smaller whole). The seeds are testdata/export-v1's requests and
// runs tables, cut and flipped.
func FuzzReadExport(f *testing.F) {
	src := filepath.Join("testdata", "export-v1")
	whole := map[string]int{}
	if err := ReadExport(src, func(run *ExportedRun) error {
		whole[run.Name] = len(run.Rows)
		return nil
	}); err != nil || len(whole) == 0 {
		f.Fatalf("the untouched export: %v, %d runs", err, len(whole))
	}
	for _, name := range []string{RequestsFile, RunsFile} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			f.Fatal(err)
		}
		which := uint8(0)
		if name == RunsFile {
			which = 1
		}
		f.Add(which, b)
		f.Add(which, b[:len(b)/2])
		flipped := append([]byte(nil), b...)
		flipped[len(flipped)/3] ^= 0xff
		f.Add(which, flipped)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		dir := t.TempDir()
		var m manifest
		b, err := os.ReadFile(filepath.Join(src, ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		target := []string{RequestsFile, RunsFile}[which%2]
		for i, e := range m.Files {
			b := data
			if e.Name != target {
				if b, err = os.ReadFile(filepath.Join(src, e.Name)); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name), b, 0o644); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			m.Files[i].Bytes, m.Files[i].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
		}
		if err := writeManifest(dir, m); err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		err = ReadExport(dir, func(run *ExportedRun) error {
			got[run.Name] = len(run.Rows)
			return nil
		})
		if err != nil {
			return
		}
		if len(got) != len(whole) {
			t.Fatalf("read %d runs without an error: expected the untouched export's %d or an error", len(got), len(whole))
		}
		for name, n := range whole {
			if got[name] != n {
				t.Fatalf("run %s read with %d rows without an error: expected %d or an error", name, got[name], n)
			}
		}
	})
}
