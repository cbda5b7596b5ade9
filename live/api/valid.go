package api

import "bytes"

// maxJSONDepth is encoding/json's bound on nesting: json.Valid refuses a
// value nested deeper.
const maxJSONDepth = 10000

// validJSON is json.Valid(p), in one tight pass (ReadChunk runs it on
// every streamed token; encoding/json's scanner calls a function per
// byte). It takes exactly what json.Valid takes: one value (RFC 8259),
// with whitespace around it, nested at most maxJSONDepth deep; string
// bytes are not checked for UTF-8 (nor does encoding/json check them).
// FuzzValidJSON holds it to json.Valid.
func validJSON(p []byte) bool { return scanJSON(p, nil) }

// scanJSON is validJSON that also records in at, when it is not nil,
// where ReadChunk's keys first occur at a string's opening quote or at an
// escaped quote inside a string.
func scanJSON(p []byte, at *marks) bool {
	var buf [32]bool
	open := buf[:0] // the containers open, innermost last: true for an object
	i := skipSpace(p, 0)
	for {
		// A value begins at i.
		if i >= len(p) {
			return false
		}
		ok := true
		switch c := p[i]; c {
		case '{', '[':
			if len(open) >= maxJSONDepth {
				return false
			}
			obj := c == '{'
			i = skipSpace(p, i+1)
			if i < len(p) && p[i] == closer(obj) {
				i++ // empty: the value ends here
				break
			}
			open = append(open, obj)
			if obj {
				if i, ok = member(p, i, at); !ok {
					return false
				}
			}
			continue // the first element
		case '"':
			i, ok = endString(p, i, at)
		case 't':
			i, ok = literal(p, i, "true")
		case 'f':
			i, ok = literal(p, i, "false")
		case 'n':
			i, ok = literal(p, i, "null")
		default:
			i, ok = endNumber(p, i)
		}
		if !ok {
			return false
		}
		// A value ended at i: the containers it closes, then a comma
		// before the next value, or the end.
		for {
			i = skipSpace(p, i)
			if len(open) == 0 {
				return i == len(p)
			}
			if i >= len(p) {
				return false
			}
			obj := open[len(open)-1]
			if p[i] == ',' {
				i = skipSpace(p, i+1)
				if obj {
					if i, ok = member(p, i, at); !ok {
						return false
					}
				}
				break
			}
			if p[i] != closer(obj) {
				return false
			}
			open = open[:len(open)-1]
			i++
		}
	}
}

func closer(obj bool) byte {
	if obj {
		return '}'
	}
	return ']'
}

func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// member reads an object member's key and colon at i, returning where
// its value begins.
func member(p []byte, i int, at *marks) (int, bool) {
	if i >= len(p) || p[i] != '"' {
		return i, false
	}
	i, ok := endString(p, i, at)
	if !ok {
		return i, false
	}
	i = skipSpace(p, i)
	if i >= len(p) || p[i] != ':' {
		return i, false
	}
	return skipSpace(p, i+1), true
}

// endString returns the end of the string whose quote is at i, recording
// the keys that begin at that quote or at an escaped quote in at.
func endString(p []byte, i int, at *marks) (int, bool) {
	if at != nil {
		at.at(p, i)
	}
	for i++; i < len(p); {
		c := p[i]
		switch {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c != '\\':
			i++
		case i+1 >= len(p):
			return i, false
		default:
			switch p[i+1] {
			case '"':
				if at != nil {
					at.at(p, i+1)
				}
				i += 2
			case '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(p) {
					return i, false
				}
				for _, h := range p[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return i, false
					}
				}
				i += 6
			default:
				return i, false
			}
		}
	}
	return i, false
}

// literal returns the end of word at i.
func literal(p []byte, i int, word string) (int, bool) {
	if !bytes.HasPrefix(p[i:], []byte(word)) {
		return i, false
	}
	return i + len(word), true
}

// endNumber returns the end of the number at i: -?(0|[1-9][0-9]*)
// (.[0-9]+)?([eE][+-]?[0-9]+)?.
func endNumber(p []byte, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(p) && '0' <= p[i] && p[i] <= '9' {
			i++
		}
		return i
	}
	if i < len(p) && p[i] == '-' {
		i++
	}
	switch {
	case i >= len(p) || p[i] < '0' || p[i] > '9':
		return i, false
	case p[i] == '0':
		i++
	default:
		i = digits(i)
	}
	if i < len(p) && p[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(p) && (p[i] == 'e' || p[i] == 'E') {
		i++
		if i < len(p) && (p[i] == '+' || p[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}
