package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeFuzzRunsEveryTarget: `make fuzz` runs every fuzz target in the
// repository, each named exactly (a -fuzz pattern that matched two targets
// would stop the run).
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`-fuzz '\^(Fuzz\w+)\$\$' -fuzztime \$\(FUZZTIME\) \./(\S*)/`).FindAllStringSubmatch(string(mk), -1) {
		listed[m[2]+"."+m[1]] = true
	}
	def := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	found := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range def.FindAllStringSubmatch(string(b), -1) {
			found++
			if !listed[filepath.ToSlash(rel)+"."+m[1]] {
				t.Errorf("%s: %s is not in the Makefile's fuzz target", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found != len(listed) {
		t.Errorf("%d fuzz targets in the code, %d in the Makefile", found, len(listed))
	}
}
