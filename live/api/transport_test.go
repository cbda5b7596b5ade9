package api

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"
)

// Go's own report that the server closed the pooled connection idle is a
// request never read: sent again whenever it is seen (a client short of
// CPU sees it late); other errors are not.
func TestServerClosedIdle(t *testing.T) {
	idle := &url.Error{Op: "Post", URL: "http://e0/v1/completions", Err: errors.New("http: server closed idle connection")}
	if !ServerClosedIdle(idle) || !ServerClosedIdle(fmt.Errorf("leg: %w", idle)) || !ServerClosedIdle(idle.Err) {
		t.Error("Go's idle-close error not recognised")
	}
	for _, err := range []error{nil, io.EOF, &url.Error{Op: "Post", URL: "u", Err: io.ErrUnexpectedEOF},
		&url.Error{Op: "Post", URL: "u", Err: errors.New("http: server closed idle connection, and more")}} {
		if ServerClosedIdle(err) {
			t.Errorf("%v taken for an idle close", err)
		}
	}
}
