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
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/tools/apitest"
)

// TestDeclaredOversizeAnsweredAtOnce: a request that declares a body over
// the limit gets 413 body_too_large at once, before it sends the body, and
// nothing is stored.
func TestDeclaredOversizeAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u, _ := url.Parse(e.Srv.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/demo-requests HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Idempotency-Key: key-big\r\nContent-Length: %d\r\n\r\n{", u.Host, apitest.TokenAlice, httpapi.MaxBodyBytes*16)
	// The server has no read timeout here: without the 413 at once, the
	// answer would wait for a body that never comes.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a declared oversize body within %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	defer resp.Body.Close()
	var p struct{ Code string }
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || p.Code != apperr.BodyTooLarge {
		t.Fatalf("%d %+v %v, want 413 body_too_large", resp.StatusCode, p, err)
	}
	if n := e.Count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatalf("%d keys stored", n)
	}
}
