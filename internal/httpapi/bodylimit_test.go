package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/body"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestDeclaredOversizeAnsweredAtOnce: a request that declares a body over
// the limit gets 413 body_too_large at once, before it sends the body, and
// nothing is stored: whatever the declared length, also one under the
// 256 KiB that Go's server would otherwise read (and wait for) before it
// sends an answer on a connection it keeps; and whatever else is wrong with
// it (no key, a bad token), which would be answered only after the body.
func TestDeclaredOversizeAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	u, _ := url.Parse(e.Srv.URL)
	for _, tt := range []struct {
		name, headers string
	}{
		{"with its key and token", "Authorization: Bearer " + testenv.TokenAlice + "\r\nIdempotency-Key: key-big\r\n"},
		{"without a key", "Authorization: Bearer " + testenv.TokenAlice + "\r\n"},
		{"with a bad token", "Authorization: Bearer not-a-token\r\nIdempotency-Key: key-big\r\n"},
	} {
		for _, declared := range []int{body.MaxBytes + 1, 128 << 10, 256<<10 - 1, body.MaxBytes * 16} {
			declaredOversize(t, u.Host, "POST /v1/demo-requests", tt.name, tt.headers, declared)
		}
	}
	if n := e.Count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatalf("%d keys stored", n)
	}
}

// declaredOversize sends to host a request line and headers that declare a
// body of declared bytes, and one byte of it; the answer must be 413
// body_too_large, closing the connection, well before any read timeout.
func declaredOversize(t *testing.T, host, request, name, headers string, declared int) {
	t.Helper()
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
		request, host, headers, declared)
	// The server has no read timeout here: without the 413 at once, the
	// answer would wait for a body that never comes.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s, declared %d bytes: no answer within %v: %v", name, declared, time.Since(start).Round(time.Millisecond), err)
	}
	var p struct{ Code string }
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || p.Code != apperr.BodyTooLarge || !resp.Close {
		t.Fatalf("%s, declared %d bytes: %d %+v (closing: %v) %v, want 413 body_too_large and the connection closed",
			name, declared, resp.StatusCode, p, resp.Close, err)
	}
}
