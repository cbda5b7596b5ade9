package traces

import (
	"embed"
	"slices"
	"strings"
)

// The built-in traces are the .yaml files of this directory.
//
//go:embed *.yaml
var builtinFS embed.FS

// Builtin returns the sorted names of the built-in traces.
func Builtin() []string {
	entries, err := builtinFS.ReadDir(".")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(names)
	return names
}

// builtinData returns the YAML text of a built-in trace.
func builtinData(name string) ([]byte, bool) {
	if name == "" || strings.ContainsAny(name, "/\\.") {
		return nil, false
	}
	data, err := builtinFS.ReadFile(name + ".yaml")
	if err != nil {
		return nil, false
	}
	return data, true
}
