package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Error is an OpenAI-style API error: the HTTP status and the body's
// error object. RetryAfter, when positive, is sent as a Retry-After header
// (whole seconds, rounded up).
type Error struct {
	Status  int
	Type    string
	Message string
	Param   string // the request field at fault ("" = none, sent as null)
	Code    string // a machine-readable code ("" = none, sent as null)
	// rawCode is an engine's code that is no string (vLLM's integer
	// status), kept by ParseError so that an engine's error passed on
	// reads as the engine wrote it.
	rawCode json.RawMessage
	// RetryAfter is how long the client should wait before retrying
	// (429 and 503 only; 0 = no header).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// Error types, as OpenAI and vLLM name them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeUnavailable    = "service_unavailable_error"
	TypeServer         = "server_error"
)

// errorBody is the wire form: {"error":{"message","type","param","code"}}.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Body returns the error's JSON body.
func (e *Error) Body() []byte {
	var code any
	switch {
	case e.Code != "":
		code = e.Code
	case len(e.rawCode) > 0:
		code = e.rawCode
	}
	b, _ := json.Marshal(errorBody{Error: errorObject{Message: e.Message, Type: e.Type, Param: orNull(e.Param), Code: code}})
	return b
}

// WriteError writes e as an OpenAI error response: its status, a JSON body
// and, when e.RetryAfter is set, a Retry-After header.
func WriteError(w http.ResponseWriter, e *Error) {
	writeError(w, e, e.Body())
}

// WriteVLLMError writes e as vLLM (0.10.1 and later) writes its errors:
// {"error":{"message","type","param","code"}} with type vLLM's exception
// name for the status (BadRequestError, NotFoundError, ...) and code the
// HTTP status as an integer. The stub engines answer this way.
func WriteVLLMError(w http.ResponseWriter, e *Error) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": e.Message, "type": VLLMType(e.Status),
		"param": orNull(e.Param), "code": e.Status}})
	writeError(w, e, b)
}

// VLLMType is vLLM's error type for an HTTP status.
func VLLMType(status int) string {
	switch {
	case status == http.StatusNotFound:
		return "NotFoundError"
	case status == http.StatusNotImplemented:
		return "NotImplementedError"
	case status == http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	case status >= 500:
		return "InternalServerError"
	}
	return "BadRequestError"
}

func writeError(w http.ResponseWriter, e *Error, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(body, '\n'))
}

// errorFields are the fields of an error object, nested or flat.
type errorFields struct {
	Object  string          `json:"object"`
	Message *string         `json:"message"`
	Type    string          `json:"type"`
	Param   *string         `json:"param"`
	Code    json.RawMessage `json:"code"`
}

// ParseError reads an error body (any status): OpenAI's and vLLM's
// {"error":{...}}, or the flat {"object":"error","message",...} of vLLM
// before 0.10.1. It returns nil when the body is neither. A string code
// is kept as Code; a number (vLLM's integer code, the HTTP status) is kept
// as it was written, for Body.
func ParseError(status int, body []byte) *Error {
	var b struct {
		Error *errorFields `json:"error"`
		errorFields
	}
	if json.Unmarshal(body, &b) != nil {
		return nil
	}
	f := b.Error
	if f == nil || f.Message == nil {
		if b.errorFields.Message == nil || b.Object != "error" {
			return nil
		}
		f = &b.errorFields
	}
	e := &Error{Status: status, Type: f.Type, Message: *f.Message}
	if f.Param != nil {
		e.Param = *f.Param
	}
	var code string
	var num float64
	if json.Unmarshal(f.Code, &code) == nil {
		e.Code = code
	} else if json.Unmarshal(f.Code, &num) == nil {
		e.rawCode = json.RawMessage(bytes.TrimSpace(f.Code))
	}
	return e
}

// Invalid is a 400 invalid_request_error about one field: "param: value:
// expected what". value is the offending JSON text (shortened), or a
// description such as "missing".
func Invalid(param, value, expected string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param,
		Message: fmt.Sprintf("%s: %s: expected %s", param, shorten(value), expected)}
}

// BadRequest is a 400 invalid_request_error that no single field causes.
func BadRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Message: msg}
}

// ModelNotFound is the 404 for a model the server does not serve.
func ModelNotFound(model string, served []string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeNotFound, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model: %q does not exist: expected one of %q", model, served)}
}

// RateLimited is a 429 asking the client to retry after retryAfter.
func RateLimited(msg string, retryAfter time.Duration) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "rate_limit_exceeded",
		Message: msg, RetryAfter: retryAfter}
}

// Unavailable is a 503 asking the client to retry after retryAfter.
func Unavailable(msg string, retryAfter time.Duration) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Message: msg, RetryAfter: retryAfter}
}

// ServerError is a 5xx server_error (500 when status is 0).
func ServerError(status int, msg string) *Error {
	if status == 0 {
		status = http.StatusInternalServerError
	}
	return &Error{Status: status, Type: TypeServer, Message: msg}
}

// shorten keeps error messages readable when a client sends a huge value.
func shorten(s string) string {
	const max = 60
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
