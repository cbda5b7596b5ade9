package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeEnd: any end-of-run record is read without a panic; an error
// says it is the end-of-run record's. A record read counts one record or
// more (the run metadata alone is one) and re-encodes to one that reads
// the same.
func FuzzDecodeEnd(f *testing.F) {
	for _, e := range []End{
		{Records: 1, LastSeq: 0, CRC32C: 0x1234abcd},
		{Records: 1043, LastSeq: 1042, CRC32C: 0xffffffff},
		{Records: 17, LastSeq: 40, CRC32C: 7, Partial: "interrupted (SIGINT) after 16 of 500 requests"},
	} {
		f.Add(e.encode())
	}
	for _, s := range []string{
		`{"records":0,"last_seq":0,"crc32c":0}`, `{"records":-1}`, `{"records":1,"crc32c":4294967296}`,
		`{"records":1.5}`, `{"records":18446744073709551615,"last_seq":72057594037927935}`, `{"records":1,"partial":null}`,
		`null`, `[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnd(b)
		if err != nil {
			if e != (End{}) || !strings.HasPrefix(err.Error(), "end-of-run record: ") {
				t.Fatalf("%q: %+v, %v", b, e, err)
			}
			return
		}
		if e.Records < 1 {
			t.Fatalf("%q: %d records", b, e.Records)
		}
		if again, err := decodeEnd(e.encode()); err != nil || again != e {
			t.Fatalf("%q: re-encoded as %s, read back as %+v, %v; want %+v", b, e.encode(), again, err, e)
		}
	})
}

// FuzzManifest: any manifest.json is read without a panic, and every
// failure names the file (the manifest, or the table it lists). One read
// is this narwhal-bench's format, lists every table and re-encodes (as
// writeManifest writes it) to one that reads the same. Checked against
// testdata/export-v1's tables, one accepted lists only those tables, by
// their plain names, with their sizes and SHA-256 sums.
func FuzzManifest(f *testing.F) {
	src := filepath.Join("testdata", "export-v1")
	good, err := os.ReadFile(filepath.Join(src, ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	// The tables, once, in a directory of their own: each iteration
	// writes only its manifest there.
	dir, err := os.MkdirTemp("", "fuzz-manifest-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	tables := map[string]manifestEntry{}
	for _, name := range TableFiles {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			f.Fatal(err)
		}
		sum := sha256.Sum256(b)
		tables[name] = manifestEntry{Name: name, Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
	}
	f.Add(good)
	for _, edit := range []struct{ from, to string }{
		{`"runs": 1`, `"runs": -1`},
		{`"bytes": 192`, `"bytes": 193`},
		{`f120183756b3`, `0000`},
		{`"files": [`, `"files": [{"name": "", "bytes": 0, "sha256": ""},`},
		{`"files": [`, `"files": [{"name": ".", "bytes": 0, "sha256": ""},`},
		{`"files": [`, `"files": [{"name": "../export-v1/faults.parquet", "bytes": 288, "sha256": "505ad8ca572564d499c848ee14c86440a1f7739a247518e5fb05a3b4d9ff821e"},`},
		{`"files": [`, `"files": [{"name": "runs.parquet/", "bytes": 5113, "sha256": "dd3ad2078a5f2336405c40321967d96134d1d571c663843bfee4b0839793d4e5"},`},
		{`"files": [`, `"files": [{"name": "manifest.json", "bytes": 0, "sha256": ""},`},
		{`parquet export 1`, `parquet export 2`},
	} {
		f.Add([]byte(strings.Replace(string(good), edit.from, edit.to, 1)))
	}
	for _, s := range []string{`{"format":"narwhal-bench parquet export 1","files":null}`, `null`, `[]`, `{`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), ManifestFile) {
				t.Fatalf("%q: error does not name %s: %v", b, ManifestFile, err)
			}
		} else {
			if m.Format != manifestFormat {
				t.Fatalf("%q: read as format %q", b, m.Format)
			}
			again, err := json.MarshalIndent(m, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if m2, err := decodeManifest(again); err != nil || !reflect.DeepEqual(m, m2) {
				t.Fatalf("%q: re-encoded as %s, read back as %+v, %v", b, again, m2, err)
			}
		}

		if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		err = checkManifest(dir)
		if err != nil {
			named := strings.HasPrefix(err.Error(), ManifestFile)
			for _, e := range m.Files {
				named = named || (e.Name != "" && strings.HasPrefix(err.Error(), e.Name+": "))
			}
			if !named {
				t.Fatalf("%q: error names neither %s nor a table: %v", b, ManifestFile, err)
			}
			return
		}
		for _, e := range m.Files {
			if tables[e.Name] != e {
				t.Fatalf("%q: accepted, listing %+v", b, e)
			}
		}
	})
}
