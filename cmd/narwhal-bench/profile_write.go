package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/narwhal-bench/narwhal-bench/fleet"
	"github.com/narwhal-bench/narwhal-bench/timing"
)

// writeFleetCopy writes the fleet file src to dst with the profile of
// each instances.list entry in fits replaced. The new profiles are
// spliced into src's text where the old ones were (a flow mapping by a
// flow mapping, a block by a block at the same indentation), so every
// other byte, comments included, is kept; the copy is then loaded back
// and must hold exactly the fits and src's other profiles, or nothing is
// written. dst is replaced whole (a temporary file renamed), so a failed
// write never leaves half a file.
func writeFleetCopy(src, dst string, fits map[int]timing.Profile) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("--write: reading %s: %w", src, err)
	}
	out, err := spliceProfiles(data, fits)
	if err != nil {
		return fmt.Errorf("--write %s: %w", dst, err)
	}
	before, err := fleet.Parse(data, src)
	if err != nil {
		return fmt.Errorf("--write: %w", err)
	}
	after, err := fleet.Parse(out, dst)
	if err != nil {
		return fmt.Errorf("--write %s: the rewritten file does not load (%v): not written; paste the printed profile lines by hand", dst, err)
	}
	old, got := before.Profiles(), after.Profiles()
	if len(old) != len(got) {
		return fmt.Errorf("--write %s: the rewritten file has %d engines, not %d: not written", dst, len(got), len(old))
	}
	for i := range got {
		want, ok := fits[i]
		if !ok {
			want = old[i]
		}
		if got[i] != want {
			return fmt.Errorf("--write %s: engine %d's profile reads back as %+v, expected %+v (an anchor or alias shared between engines?): not written; paste the printed profile lines by hand", dst, i, got[i], want)
		}
	}
	if real, err := filepath.EvalSymlinks(dst); err == nil {
		dst = real // a link keeps pointing at the rewritten file
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return fmt.Errorf("--write: %w", err)
	}
	_, werr := tmp.Write(out)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("--write: %w", err)
	}
	// The copy keeps an existing dst's permissions (--write onto the
	// fleet file itself), else the source's.
	mode := os.FileMode(0o644)
	if st, err := os.Stat(dst); err == nil {
		mode = st.Mode().Perm()
	} else if st, err := os.Stat(src); err == nil {
		mode = st.Mode().Perm()
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("--write: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("--write: %w", err)
	}
	return nil
}

// spliceProfiles replaces instances.list[i].profile in the YAML text data
// for each i in fits.
func spliceProfiles(data []byte, fits map[int]timing.Profile) ([]byte, error) {
	file, err := parser.ParseBytes(data, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	lines := lineStarts(data)
	nl := "\n"
	if bytes.Contains(data, []byte("\r\n")) {
		nl = "\r\n"
	}
	type edit struct {
		from, to int
		text     string
	}
	var edits []edit
	for i, p := range fits {
		field := fmt.Sprintf("instances.list[%d].profile", i)
		path, err := yaml.PathString("$." + field)
		if err != nil {
			return nil, err
		}
		node, err := path.FilterFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s: not found: %w", field, err)
		}
		m, ok := node.(*ast.MappingNode)
		if !ok || len(m.Values) == 0 {
			return nil, fmt.Errorf("%s: written as %s, not a plain mapping: expected {a: ..., b: ...} or a block of its five keys; paste the printed profile line by hand", field, node.Type())
		}
		if m.IsFlowStyle {
			from := byteOffset(data, lines, m.Start.Position.Line, m.Start.Position.Column)
			to := byteOffset(data, lines, m.End.Position.Line, m.End.Position.Column) + 1
			if from < 0 || to <= from || data[from] != '{' || data[to-1] != '}' {
				return nil, fmt.Errorf("%s: could not find its braces in the text", field)
			}
			edits = append(edits, edit{from, to, profileYAML(p)})
			continue
		}
		// A block: its lines, from its first key's to its last value's,
		// become five lines at the first key's indentation.
		first := m.Values[0].Key.GetToken().Position
		last := m.Values[len(m.Values)-1].Value.GetToken().Position
		from := byteOffset(data, lines, first.Line, 1)
		to := len(data)
		if last.Line < len(lines) {
			to = lines[last.Line] // the start of the line after the last value's
		}
		if from < 0 || to <= from {
			return nil, fmt.Errorf("%s: could not find its lines in the text", field)
		}
		ind := strings.Repeat(" ", first.Column-1)
		var b strings.Builder
		for _, kv := range [][2]string{{"a", fmtCoef(p.A)}, {"b", fmtCoef(p.B)}, {"c", fmtCoef(p.C)},
			{"slope", fmtCoef(p.Slope)}, {"intercept", fmtCoef(p.Intercept)}} {
			b.WriteString(ind + kv[0] + ": " + kv[1] + nl)
		}
		text := b.String()
		if to == len(data) && !bytes.HasSuffix(data, []byte("\n")) {
			text = strings.TrimSuffix(text, nl)
		}
		edits = append(edits, edit{from, to, text})
	}
	sort.Slice(edits, func(a, b int) bool { return edits[a].from > edits[b].from })
	out := append([]byte(nil), data...)
	for k, e := range edits {
		if k > 0 && e.to > edits[k-1].from {
			return nil, errors.New("two profiles overlap in the text")
		}
		out = append(out[:e.from:e.from], append([]byte(e.text), out[e.to:]...)...)
	}
	return out, nil
}

// lineStarts is the byte offset of each line's start.
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, c := range data {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// byteOffset is the byte offset of the 1-based line and column (the YAML
// scanner counts columns in characters), or -1.
func byteOffset(data []byte, lines []int, line, col int) int {
	if line < 1 || line > len(lines) || col < 1 {
		return -1
	}
	off := lines[line-1]
	for c := 1; c < col; c++ {
		if off >= len(data) || data[off] == '\n' {
			return -1
		}
		_, n := utf8.DecodeRune(data[off:])
		off += n
	}
	return off
}
