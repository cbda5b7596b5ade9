package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// manifestFormat names the export layout; ReadExport refuses any other.
const manifestFormat = "narwhal-bench parquet export 1"

// manifest is manifest.json: what a complete export holds.
type manifest struct {
	Format string          `json:"format"`
	Runs   int64           `json:"runs"`
	Files  []manifestEntry `json:"files"`
}

type manifestEntry struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// writeManifest writes manifest.json durably (temporary file, fsync,
// rename, directory fsync).
func writeManifest(dir string, m manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+ManifestFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err = f.Write(append(b, '\n')); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, ManifestFile))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: %w", ManifestFile, err)
	}
	return syncDir(dir)
}

// CheckExport checks that dir holds a whole export: its manifest, and
// every table it lists with its size and SHA-256 sum, as every reader
// checks them. Every failure names the file.
func CheckExport(dir string) error { return checkManifest(dir) }

// checkManifest reads manifest.json and checks that every table it lists
// is there with its size and SHA-256 sum. Every failure names the file.
func checkManifest(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no %s: the export is incomplete (interrupted while it was written) or not written by this narwhal-bench; export the journals again", ManifestFile)
	}
	if err != nil {
		return err
	}
	m, err := decodeManifest(b)
	if err != nil {
		return err
	}
	for _, e := range m.Files {
		if err := checkFile(filepath.Join(dir, e.Name), e); err != nil {
			return err
		}
	}
	return nil
}

// decodeManifest reads manifest.json's bytes: this narwhal-bench's format,
// listing every table. Every failure names the file.
func decodeManifest(b []byte) (manifest, error) {
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return manifest{}, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	if m.Format != manifestFormat {
		return manifest{}, fmt.Errorf("%s: format %q: this narwhal-bench reads %q", ManifestFile, m.Format, manifestFormat)
	}
	listed := map[string]bool{}
	for _, e := range m.Files {
		// Every table lies in the export's own directory: a name that
		// is empty, or a path, would have checkFile read another file.
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, `/\`) {
			return manifest{}, fmt.Errorf("%s: file %q: expected the plain name of a file in the export's directory", ManifestFile, e.Name)
		}
		listed[e.Name] = true
	}
	for _, name := range TableFiles {
		if !listed[name] {
			return manifest{}, fmt.Errorf("%s does not list %s", ManifestFile, name)
		}
	}
	return m, nil
}

func checkFile(path string, e manifestEntry) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: missing (%s lists it)", e.Name, ManifestFile)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	if n != e.Bytes {
		return fmt.Errorf("%s: damaged: %d bytes, %s says %d", e.Name, n, ManifestFile, e.Bytes)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != e.SHA256 {
		return fmt.Errorf("%s: damaged: SHA-256 %s, %s says %s", e.Name, got[:16], ManifestFile, e.SHA256[:min(16, len(e.SHA256))])
	}
	return nil
}

// ExportedRunNames lists the runs of the export in dir (runs.parquet,
// checked against manifest.json), without reading the other tables.
func ExportedRunNames(dir string) (names []string, err error) {
	defer func() {
		if v := recover(); v != nil {
			names, err = nil, fmt.Errorf("export %s: reading Parquet: %v", dir, v)
		}
	}()
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", dir, err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Format != manifestFormat {
		return nil, fmt.Errorf("export %s: %s: not this narwhal-bench's manifest", dir, ManifestFile)
	}
	for _, e := range m.Files {
		if e.Name != RunsFile {
			continue
		}
		if err := checkFile(filepath.Join(dir, e.Name), e); err != nil {
			return nil, fmt.Errorf("export %s: %w", dir, err)
		}
		runs, err := readAll[runRow](filepath.Join(dir, RunsFile))
		if err != nil {
			return nil, fmt.Errorf("export %s: %w", dir, err)
		}
		for _, r := range runs {
			names = append(names, r.Run)
		}
		return names, nil
	}
	return nil, fmt.Errorf("export %s: %s does not list %s", dir, ManifestFile, RunsFile)
}
