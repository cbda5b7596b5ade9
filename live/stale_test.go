package live

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// An engine leg written onto a pooled connection that the engine then
// closes without reading it (its keep-alive ran out while the request was
// on the way, or the engine was paused) is sent again on a new connection,
// not failed against a healthy engine. The engine here answers the first
// request of each connection and closes the connection on the second, as
// an idle timeout racing a reuse does.
func TestLegRetriedOnStaleConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					q, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, q.Body)
					if n > 0 {
						return // closed without an answer
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				}
			}(c)
		}
	}()
	client := &http.Client{Transport: NewTransport()}
	url := "http://" + ln.Addr().String() + "/v1/completions"
	for i := 0; i < 3; i++ {
		hq, err := engineRequest(context.Background(), url, []byte(`{"prompt":"x"}`), "req", "req-"+strings.Repeat("i", i+1))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(hq)
		if err != nil {
			t.Fatalf("request %d: %v: expected it sent again on a new connection", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections: expected 3 (each reuse dropped, each request sent again once)", n)
	}
}
