package strictyaml

import (
	"errors"
	"strings"
	"testing"
)

type doc struct {
	Name  string           `yaml:"name"`
	Count int              `yaml:"count"`
	Big   int64            `yaml:"big"`
	On    bool             `yaml:"on"`
	Ratio float64          `yaml:"ratio"`
	Wait  string           `yaml:"wait,text"`
	Rates []string         `yaml:"rates,text"`
	Seeds []uint64         `yaml:"seeds"`
	Sub   *struct{ X int } `yaml:"sub"`
	Skip  string           `yaml:"-"`
}

func TestDecode(t *testing.T) {
	var d doc
	d.Count = 7 // absent fields keep what the value held
	errs := Decode([]byte("name: a\nbig: 5000000000\non: true\nratio: 1e-3\nwait: 2\nrates: [2.4, 1x]\nseeds: [1, 2]\n"), &d)
	if len(errs) > 0 || d.Name != "a" || d.Count != 7 || d.Big != 5e9 || !d.On || d.Ratio != 1e-3 || d.Wait != "2" ||
		strings.Join(d.Rates, ",") != "2.4,1x" || len(d.Seeds) != 2 {
		t.Fatalf("%+v %v", d, errs)
	}
}

// Every problem is reported, each with its path; nothing is truncated or
// read from a string.
func TestDecodeErrors(t *testing.T) {
	var d doc
	errs := Decode([]byte("name: 3\ncount: 1.5\non: yes\nratio: \"2\"\nseeds: [-1]\ncolour: red\nsub: {y: 1}\n"), &d)
	got := errors.Join(errs...).Error()
	for _, want := range []string{
		"name: 3: expected a string (quote it if it is meant as text)",
		"count: 1.5: expected an integer",
		`on: "yes": expected true or false`,
		`ratio: "2": expected a number`,
		"seeds[0]: -1: expected an integer between 0 and",
		"colour: unknown field: expected one of name, count, big, on, ratio, wait, rates, seeds, sub",
		"sub.y: unknown field",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
	if errs := Decode([]byte("a: 1\n---\nb: 2\n"), &d); len(errs) != 1 || !strings.Contains(errs[0].Error(), "more than one YAML document") {
		t.Errorf("two documents: %v", errs)
	}
	if errs := Decode([]byte("a: [1\n"), &d); len(errs) != 1 || !strings.Contains(errs[0].Error(), "invalid YAML") {
		t.Errorf("bad syntax: %v", errs)
	}
}
