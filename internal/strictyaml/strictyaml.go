// Package strictyaml decodes the project's YAML files (traces, fleets,
// experiments, tenants) strictly, with one set of rules.
//
// Decoding is done in two steps. go-yaml parses the document into a generic
// tree (ordered mappings, lists, scalars), which resolves anchors, aliases
// and merge keys and rejects syntax errors and duplicate keys. A strict,
// schema-driven conversion then fills the value, guided by the yaml tags of
// its types. go-yaml's typed decoding is not used directly because it
// silently truncates 1.5 to 1 for integer fields, turns numbers into
// strings (and quoted numbers into numbers), reports Go type names instead
// of field paths, and stops at the first problem; the conversion below
// reports every problem with its path, and unknown fields with the names
// it expected.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
)

// FieldError is one problem with one field of a document.
type FieldError struct {
	Path string // e.g. phases[1].mix.long; "" = the whole document
	Msg  string // value and expectation, e.g. `-1: expected a rate >= 0`
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Decode parses data, one YAML document, into dst (a pointer to a struct
// whose fields carry yaml tags) without validating values. Fields the
// document leaves out (or sets to null) keep what dst holds. It returns
// every problem found, each naming its field path; nil when there is none.
func Decode(data []byte, dst any) []error {
	dec := yaml.NewDecoder(bytes.NewReader(data), yaml.UseOrderedMap())
	var tree any
	if err := dec.Decode(&tree); err != nil && !errors.Is(err, io.EOF) {
		return []error{yamlError(err)}
	}
	var extra any
	switch err := dec.Decode(&extra); {
	case err == nil && extra != nil:
		return []error{&FieldError{Msg: "the file holds more than one YAML document: expected exactly one"}}
	case err != nil && !errors.Is(err, io.EOF):
		return []error{yamlError(err)}
	}
	d := &converter{}
	d.convert("", tree, reflect.ValueOf(dst).Elem())
	return d.errs
}

// yamlError rewords a go-yaml parse error as "line L, column C: message".
func yamlError(err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) {
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			return &FieldError{Msg: fmt.Sprintf("invalid YAML at line %d, column %d: %s",
				tk.Position.Line, tk.Position.Column, ye.GetMessage())}
		}
		return &FieldError{Msg: "invalid YAML: " + ye.GetMessage()}
	}
	return &FieldError{Msg: "invalid YAML: " + err.Error()}
}

var durationType = reflect.TypeFor[time.Duration]()

// converter fills typed values from a generic YAML tree, collecting errors.
type converter struct {
	errs    []error
	numText bool // the field being converted keeps numbers as text
}

func (c *converter) fail(path, format string, args ...any) {
	if path == "" {
		path = "(top level)"
	}
	c.errs = append(c.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// convert stores v into dst. A null value leaves dst unchanged (absent).
func (c *converter) convert(path string, v any, dst reflect.Value) {
	if v == nil {
		return
	}
	t := dst.Type()
	if t == durationType {
		c.duration(path, v, dst)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		elem := reflect.New(t.Elem())
		before := len(c.errs)
		c.convert(path, v, elem.Elem())
		if len(c.errs) == before {
			dst.Set(elem)
		}
	case reflect.Struct:
		c.structure(path, v, dst)
	case reflect.Map:
		c.mapping(path, v, dst)
	case reflect.Slice:
		c.list(path, v, dst)
	case reflect.String:
		s, ok := v.(string)
		if _, isNum := asFloat(v); !ok && isNum && c.numText {
			s, ok = Describe(v), true
		}
		if !ok {
			hint := ""
			switch v.(type) {
			case uint64, int64, float64, bool:
				hint = " (quote it if it is meant as text)"
			}
			c.fail(path, "%s: expected a string%s", Describe(v), hint)
			return
		}
		dst.SetString(s)
	case reflect.Int, reflect.Int64:
		n, ok := asInt(v)
		if !ok {
			c.fail(path, "%s: expected an integer", Describe(v))
			return
		}
		dst.SetInt(n)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			c.fail(path, "%s: expected true or false", Describe(v))
			return
		}
		dst.SetBool(b)
	case reflect.Uint64:
		n, ok := asUint(v)
		if !ok {
			c.fail(path, "%s: expected an integer between 0 and %d", Describe(v), uint64(math.MaxUint64))
			return
		}
		dst.SetUint(n)
	case reflect.Float64:
		f, ok := asFloat(v)
		if !ok {
			c.fail(path, "%s: expected a number", Describe(v))
			return
		}
		dst.SetFloat(f)
	default:
		// Not reachable for the types decoded here.
		c.fail(path, "%s: field of unsupported type %s", Describe(v), t)
	}
}

func (c *converter) duration(path string, v any, dst reflect.Value) {
	const want = `expected a duration with a unit, such as "30s", "5m", "1h30m" or "250ms"`
	s, ok := v.(string)
	if !ok {
		if _, isNum := asFloat(v); isNum {
			c.fail(path, "%s: a bare number is not a duration: %s", Describe(v), want)
		} else {
			c.fail(path, "%s: %s", Describe(v), want)
		}
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		c.fail(path, "%s: %s", Describe(v), want)
		return
	}
	dst.SetInt(int64(d))
}

// structField maps one yaml key to a struct field index. numText marks a
// string field (or list of strings) whose values may be written as
// numbers (tag option "text"): a number is kept as its text, for the
// caller's own check (a duration's, a rate's), rather than refused as a
// number where a string was expected.
type structField struct {
	key     string
	index   int
	numText bool
}

func yamlFields(t reflect.Type) []structField {
	var fs []structField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		key, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		fs = append(fs, structField{key: key, index: i, numText: opts == "text"})
	}
	return fs
}

func (c *converter) structure(path string, v any, dst reflect.Value) {
	m, ok := v.(yaml.MapSlice)
	if !ok {
		c.fail(path, "%s: expected a mapping", Describe(v))
		return
	}
	fields := yamlFields(dst.Type())
	for _, item := range m {
		key, ok := item.Key.(string)
		if !ok {
			c.fail(path, "key %s: expected a field name", Describe(item.Key))
			continue
		}
		idx, numText := -1, false
		for _, f := range fields {
			if f.key == key {
				idx, numText = f.index, f.numText
				break
			}
		}
		if idx < 0 {
			names := make([]string, len(fields))
			for i, f := range fields {
				names[i] = f.key
			}
			c.fail(JoinPath(path, key), "unknown field: expected one of %s", strings.Join(names, ", "))
			continue
		}
		c.numText = numText
		c.convert(JoinPath(path, key), item.Value, dst.Field(idx))
		c.numText = false
	}
}

func (c *converter) mapping(path string, v any, dst reflect.Value) {
	m, ok := v.(yaml.MapSlice)
	if !ok {
		c.fail(path, "%s: expected a mapping", Describe(v))
		return
	}
	t := dst.Type()
	out := reflect.MakeMapWithSize(t, len(m))
	for _, item := range m {
		key, ok := item.Key.(string)
		if !ok {
			c.fail(path, "key %s: expected a name (quote it if it is meant as text)", Describe(item.Key))
			continue
		}
		if item.Value == nil {
			c.fail(JoinPath(path, key), "null: expected a value")
			continue
		}
		elem := reflect.New(t.Elem()).Elem()
		c.convert(JoinPath(path, key), item.Value, elem)
		out.SetMapIndex(reflect.ValueOf(key).Convert(t.Key()), elem)
	}
	dst.Set(out)
}

func (c *converter) list(path string, v any, dst reflect.Value) {
	l, ok := v.([]any)
	if !ok {
		c.fail(path, "%s: expected a list", Describe(v))
		return
	}
	out := reflect.MakeSlice(dst.Type(), len(l), len(l))
	for i, e := range l {
		p := path + "[" + strconv.Itoa(i) + "]"
		if e == nil {
			c.fail(p, "null: expected a value")
			continue
		}
		c.convert(p, e, out.Index(i))
	}
	dst.Set(out)
}

// expNumber parses the YAML 1.2 numbers with an exponent but no decimal
// point, such as 1e6 or 2E+3, which go-yaml leaves as strings.
func expNumber(v any) (float64, bool) {
	s, ok := v.(string)
	if !ok || s == "" {
		return 0, false
	}
	i := 0
	if s[0] == '+' || s[0] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i > start
	}
	if !digits() || i == len(s) || s[i] != 'e' && s[i] != 'E' {
		return 0, false
	}
	i++
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	if !digits() || i != len(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

func asInt(v any) (int64, bool) {
	if f, ok := expNumber(v); ok {
		v = f
	}
	switch n := v.(type) {
	case uint64:
		if n <= math.MaxInt {
			return int64(n), true
		}
	case int64:
		if n >= math.MinInt && n <= math.MaxInt {
			return n, true
		}
	case float64:
		// Accept integral floats such as 1e3.
		if n == math.Trunc(n) && n >= math.MinInt && n < math.MaxInt {
			return int64(n), true
		}
	}
	return 0, false
}

func asUint(v any) (uint64, bool) {
	if f, ok := expNumber(v); ok {
		v = f
	}
	switch n := v.(type) {
	case uint64:
		return n, true
	case int64:
		if n >= 0 {
			return uint64(n), true
		}
	case float64:
		if n == math.Trunc(n) && n >= 0 && n < math.MaxUint64 {
			return uint64(n), true
		}
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	if f, ok := expNumber(v); ok {
		return f, true
	}
	switch n := v.(type) {
	case uint64:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// Describe renders a YAML value for an error message.
func Describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > 60 {
			x = x[:57] + "..."
		}
		return strconv.Quote(x)
	case yaml.MapSlice:
		return "a mapping"
	case []any:
		return "a list"
	case float64:
		return FormatFloat(x)
	case uint64, int64, bool:
		return fmt.Sprint(x)
	}
	return fmt.Sprintf("a value of type %T", v)
}

func FormatFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// JoinPath appends a mapping key to a field path. Keys that are not plain
// names are quoted: classes["my class"].
func JoinPath(path, key string) string {
	if !isPlainKey(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func isPlainKey(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
