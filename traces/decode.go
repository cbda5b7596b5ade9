package traces

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

// Decoding is done in two steps. go-yaml parses the document into a generic
// tree (ordered mappings, lists, scalars), which resolves anchors, aliases
// and merge keys and rejects syntax errors and duplicate keys. A strict,
// schema-driven conversion then fills the Spec, guided by the yaml tags of
// its types. go-yaml's typed decoding is not used directly because it
// silently truncates 1.5 to 1 for integer fields, turns numbers into
// strings, reports Go type names instead of field paths, and stops at the
// first problem; the conversion below reports every problem with its path.

// fieldError is one problem with one field of a trace.
type fieldError struct {
	path string // e.g. phases[1].mix.long; "" = the whole document
	msg  string // value and expectation, e.g. `-1: expected a rate >= 0`
}

func (e *fieldError) Error() string {
	if e.path == "" {
		return e.msg
	}
	return e.path + ": " + e.msg
}

// decodeSpec parses data into a Spec without validating it. Seed is 1 when
// the document does not set it.
func decodeSpec(data []byte) (*Spec, []error) {
	dec := yaml.NewDecoder(bytes.NewReader(data), yaml.UseOrderedMap())
	var tree any
	if err := dec.Decode(&tree); err != nil && !errors.Is(err, io.EOF) {
		return nil, []error{yamlError(err)}
	}
	var extra any
	switch err := dec.Decode(&extra); {
	case err == nil && extra != nil:
		return nil, []error{&fieldError{msg: "the file holds more than one YAML document: expected exactly one"}}
	case err != nil && !errors.Is(err, io.EOF):
		return nil, []error{yamlError(err)}
	}
	spec := &Spec{Seed: 1}
	d := &converter{}
	d.convert("", tree, reflect.ValueOf(spec).Elem())
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return spec, nil
}

// yamlError rewords a go-yaml parse error as "line L, column C: message".
func yamlError(err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) {
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			return &fieldError{msg: fmt.Sprintf("invalid YAML at line %d, column %d: %s",
				tk.Position.Line, tk.Position.Column, ye.GetMessage())}
		}
		return &fieldError{msg: "invalid YAML: " + ye.GetMessage()}
	}
	return &fieldError{msg: "invalid YAML: " + err.Error()}
}

var durationType = reflect.TypeFor[time.Duration]()

// converter fills typed values from a generic YAML tree, collecting errors.
type converter struct {
	errs []error
}

func (c *converter) fail(path, format string, args ...any) {
	if path == "" {
		path = "(top level)"
	}
	c.errs = append(c.errs, &fieldError{path: path, msg: fmt.Sprintf(format, args...)})
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
		if !ok {
			hint := ""
			switch v.(type) {
			case uint64, int64, float64, bool:
				hint = " (quote it if it is meant as text)"
			}
			c.fail(path, "%s: expected a string%s", describe(v), hint)
			return
		}
		dst.SetString(s)
	case reflect.Int:
		n, ok := asInt(v)
		if !ok {
			c.fail(path, "%s: expected an integer", describe(v))
			return
		}
		dst.SetInt(n)
	case reflect.Uint64:
		n, ok := asUint(v)
		if !ok {
			c.fail(path, "%s: expected an integer between 0 and %d", describe(v), uint64(math.MaxUint64))
			return
		}
		dst.SetUint(n)
	case reflect.Float64:
		f, ok := asFloat(v)
		if !ok {
			c.fail(path, "%s: expected a number", describe(v))
			return
		}
		dst.SetFloat(f)
	default:
		// Not reachable for the Spec types.
		c.fail(path, "%s: field of unsupported type %s", describe(v), t)
	}
}

func (c *converter) duration(path string, v any, dst reflect.Value) {
	const want = `expected a duration with a unit, such as "30s", "5m", "1h30m" or "250ms"`
	s, ok := v.(string)
	if !ok {
		if _, isNum := asFloat(v); isNum {
			c.fail(path, "%s: a bare number is not a duration: %s", describe(v), want)
		} else {
			c.fail(path, "%s: %s", describe(v), want)
		}
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		c.fail(path, "%s: %s", describe(v), want)
		return
	}
	dst.SetInt(int64(d))
}

// structField maps one yaml key to a struct field index.
type structField struct {
	key   string
	index int
}

func yamlFields(t reflect.Type) []structField {
	var fs []structField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		fs = append(fs, structField{key: key, index: i})
	}
	return fs
}

func (c *converter) structure(path string, v any, dst reflect.Value) {
	m, ok := v.(yaml.MapSlice)
	if !ok {
		c.fail(path, "%s: expected a mapping", describe(v))
		return
	}
	fields := yamlFields(dst.Type())
	for _, item := range m {
		key, ok := item.Key.(string)
		if !ok {
			c.fail(path, "key %s: expected a field name", describe(item.Key))
			continue
		}
		idx := -1
		for _, f := range fields {
			if f.key == key {
				idx = f.index
				break
			}
		}
		if idx < 0 {
			names := make([]string, len(fields))
			for i, f := range fields {
				names[i] = f.key
			}
			c.fail(joinPath(path, key), "unknown field: expected one of %s", strings.Join(names, ", "))
			continue
		}
		c.convert(joinPath(path, key), item.Value, dst.Field(idx))
	}
}

func (c *converter) mapping(path string, v any, dst reflect.Value) {
	m, ok := v.(yaml.MapSlice)
	if !ok {
		c.fail(path, "%s: expected a mapping", describe(v))
		return
	}
	t := dst.Type()
	out := reflect.MakeMapWithSize(t, len(m))
	for _, item := range m {
		key, ok := item.Key.(string)
		if !ok {
			c.fail(path, "key %s: expected a name (quote it if it is meant as text)", describe(item.Key))
			continue
		}
		if item.Value == nil {
			c.fail(joinPath(path, key), "null: expected a value")
			continue
		}
		elem := reflect.New(t.Elem()).Elem()
		c.convert(joinPath(path, key), item.Value, elem)
		out.SetMapIndex(reflect.ValueOf(key).Convert(t.Key()), elem)
	}
	dst.Set(out)
}

func (c *converter) list(path string, v any, dst reflect.Value) {
	l, ok := v.([]any)
	if !ok {
		c.fail(path, "%s: expected a list", describe(v))
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

// describe renders a YAML value for an error message.
func describe(v any) string {
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
		return formatFloat(x)
	case uint64, int64, bool:
		return fmt.Sprint(x)
	}
	return fmt.Sprintf("a value of type %T", v)
}

func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// joinPath appends a mapping key to a field path. Keys that are not plain
// names are quoted: classes["my class"].
func joinPath(path, key string) string {
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
