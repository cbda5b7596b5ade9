package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// MaxEventBytes bounds one server-sent event a client reads. vLLM sets
// no bound: a first chunk carrying a long prompt's logprobs (echo with
// logprobs) runs to tens of MiB, so the bound is the router's bound on a
// whole non-streamed answer.
const MaxEventBytes = 64 << 20

// SetSSEHeaders sets the headers of a streamed (text/event-stream)
// response; call it before the status is written.
func SetSSEHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
}

// SSEWriter writes server-sent events as OpenAI streams them: each event
// is "data: <json>\n\n", flushed at once when w is an http.Flusher.
type SSEWriter struct {
	w   io.Writer
	f   http.Flusher
	buf []byte
}

// NewSSEWriter writes events to w.
func NewSSEWriter(w io.Writer) *SSEWriter {
	f, _ := w.(http.Flusher)
	return &SSEWriter{w: w, f: f}
}

// Send writes v as one event's JSON payload.
func (s *SSEWriter) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.SendRaw(b)
}

// SendRaw writes one event whose payload is data (one line of JSON).
func (s *SSEWriter) SendRaw(data []byte) error {
	s.buf = append(s.buf[:0], "data: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, '\n', '\n')
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	if s.f != nil {
		s.f.Flush()
	}
	return nil
}

// EndWithError ends a stream that cannot finish as vLLM ends one: an
// error event in OpenAI's shape ({"error": {"message", "type", "param",
// "code"}}, code the HTTP status it would have had), then "data: [DONE]".
// OpenAI clients raise the error when they read it.
func (s *SSEWriter) EndWithError(message, typ string, code int) error {
	if err := s.Send(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}}); err != nil {
		return err
	}
	return s.Done()
}

// EndWithRawError ends a stream with an engine's own error event (relayed
// as it is), then "data: [DONE]", as vLLM ends it.
func (s *SSEWriter) EndWithRawError(payload []byte) error {
	if err := s.SendRaw(payload); err != nil {
		return err
	}
	return s.Done()
}

// Done writes the stream's end, "data: [DONE]".
func (s *SSEWriter) Done() error { return s.SendRaw(doneMarker) }

var doneMarker = []byte("[DONE]")

// SSEReader reads the events of an OpenAI stream.
type SSEReader struct {
	r    *bufio.Reader
	data []byte
	max  int // bound on one event's payload and on one line
}

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	// A small buffer: most events are a few hundred bytes, and readLine
	// joins longer lines (up to MaxEventBytes) itself. Thousands of
	// streams are open at once in a router.
	return &SSEReader{r: bufio.NewReaderSize(r, 4<<10), max: MaxEventBytes}
}

// NewSSEReaderMax is NewSSEReader with events bounded at max bytes
// instead of MaxEventBytes.
func NewSSEReaderMax(r io.Reader, max int) *SSEReader {
	s := NewSSEReader(r)
	s.max = max
	return s
}

// ErrEventTooLarge is returned for an event over the reader's bound
// (MaxEventBytes unless NewSSEReaderMax said otherwise).
var ErrEventTooLarge = errors.New("sse: event over the reader's bound")

// ReadEvent returns the next event's payload (its data lines joined by
// "\n"), or done=true at "data: [DONE]". Comments, other fields and empty
// events are skipped. At the end of the stream it returns io.EOF, or
// io.ErrUnexpectedEOF when the stream stopped inside a line. The payload
// is valid until the next call.
func (s *SSEReader) ReadEvent() (payload []byte, done bool, err error) {
	s.data = s.data[:0]
	have := false
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && have {
				// An event the stream ended without a blank line after.
				return s.finish()
			}
			if err == io.EOF {
				return nil, false, io.EOF
			}
			return nil, false, err
		}
		if len(line) == 0 {
			if have {
				return s.finish()
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if have {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(value) > s.max {
			return nil, false, ErrEventTooLarge
		}
		s.data = append(s.data, value...)
		have = true
	}
}

func (s *SSEReader) finish() ([]byte, bool, error) {
	if bytes.Equal(bytes.TrimSpace(s.data), doneMarker) {
		return nil, true, nil
	}
	return s.data, false, nil
}

// readLine reads one line without its "\n" or "\r\n".
func (s *SSEReader) readLine() ([]byte, error) {
	var long []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(long)+len(frag) > s.max {
				return nil, ErrEventTooLarge
			}
			long = append(long, frag...)
			continue
		}
		if err != nil {
			if err == io.EOF && (len(frag) > 0 || len(long) > 0) {
				return nil, fmt.Errorf("sse: %w", io.ErrUnexpectedEOF)
			}
			return nil, err
		}
		if long != nil {
			frag = append(long, frag...)
		}
		frag = bytes.TrimSuffix(frag, []byte("\n"))
		return bytes.TrimSuffix(frag, []byte("\r")), nil
	}
}
