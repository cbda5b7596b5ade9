package traces

import (
	"github.com/narwhal-bench/narwhal-bench/internal/strictyaml"
)

// Trace specs are decoded by internal/strictyaml: every problem comes back
// with its field path, numbers are never truncated or read from strings,
// and unknown fields name the fields expected.

// fieldError is one problem with one field of a trace.
type fieldError = strictyaml.FieldError

// decodeSpec parses data into a Spec without validating it. Seed is 1 when
// the document does not set it.
func decodeSpec(data []byte) (*Spec, []error) {
	spec := &Spec{Seed: 1}
	if errs := strictyaml.Decode(data, spec); len(errs) > 0 {
		return nil, errs
	}
	return spec, nil
}

func joinPath(path, key string) string { return strictyaml.JoinPath(path, key) }
func formatFloat(f float64) string     { return strictyaml.FormatFloat(f) }
