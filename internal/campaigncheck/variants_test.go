package campaigncheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// variantRows reads campaigns/variants/README.md's table: each row's patch
// name and its "switched on by" cell.
func variantRows(t *testing.T, root string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "campaigns", "variants", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	header := -1
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "|") {
			if header >= 0 {
				break // the table ends at its first other line
			}
			continue
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "patch" {
			header = slices.Index(cells, "switched on by")
			continue
		}
		if header < 0 || len(cells) <= header {
			t.Fatalf("variants README: row %q before the header or short of its %q column", cells[0], "switched on by")
		}
		if _, dup := rows[cells[0]]; dup {
			t.Errorf("variants README: %s has two rows", cells[0])
		}
		rows[cells[0]] = cells[header]
	}
	return rows
}

// TestVariantsReadmeListsEveryPatch checks that campaigns/variants/README.md's
// table has one row per patch in the directory and none for a patch that is
// not there, and that every row names the NB_ variables that switch its
// patch on and each is read by a line the patch adds: the tuning log's commands name these variables, so a
// wrong one would rebuild the shipped controller and measure nothing.
func TestVariantsReadmeListsEveryPatch(t *testing.T) {
	root := repoRoot(t)
	rows := variantRows(t, root)
	patches, err := filepath.Glob(filepath.Join(root, "campaigns", "variants", "*.patch"))
	if err != nil {
		t.Fatal(err)
	}
	if len(patches) == 0 {
		t.Fatal("no patches in campaigns/variants")
	}
	nbVar := regexp.MustCompile(`NB_[A-Z0-9_]+`)
	for _, p := range patches {
		name := filepath.Base(p)
		on, ok := rows[name]
		if !ok {
			t.Errorf("campaigns/variants/%s has no row in campaigns/variants/README.md", name)
			continue
		}
		delete(rows, name)
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var added strings.Builder // the lines the patch adds
		for _, l := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") {
				added.WriteString(l)
				added.WriteByte('\n')
			}
		}
		vars := nbVar.FindAllString(on, -1)
		if len(vars) == 0 {
			t.Errorf("campaigns/variants/README.md: the row of %s names no NB_ variable that switches it on (%q)", name, on)
		}
		for _, v := range vars {
			if !strings.Contains(added.String(), `"`+v+`"`) {
				t.Errorf("campaigns/variants/README.md: %s is switched on by %s, which the patch's added lines never read", name, v)
			}
		}
	}
	for name := range rows {
		t.Errorf("campaigns/variants/README.md has a row for %s, which is not in campaigns/variants", name)
	}
}
