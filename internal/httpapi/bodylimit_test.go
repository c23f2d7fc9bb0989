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
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestDeclaredOversizeAnsweredAtOnce: a request that declares a body over
// the limit gets 413 body_too_large at once, before it sends the body, and
// nothing is stored: whatever the declared length, also one under the
// 256 KiB that Go's server would otherwise read (and wait for) before it
// sends an answer on a connection it keeps.
func TestDeclaredOversizeAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	u, _ := url.Parse(e.Srv.URL)
	for _, declared := range []int{httpapi.MaxBodyBytes + 1, 128 << 10, 256<<10 - 1, httpapi.MaxBodyBytes * 16} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/demo-requests HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
			"Idempotency-Key: key-big\r\nContent-Length: %d\r\n\r\n{", u.Host, testenv.TokenAlice, declared)
		// The server has no read timeout here: without the 413 at once, the
		// answer would wait for a body that never comes.
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("declared %d bytes: no answer within %v: %v", declared, time.Since(start).Round(time.Millisecond), err)
		}
		var p struct{ Code string }
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || p.Code != apperr.BodyTooLarge {
			t.Fatalf("declared %d bytes: %d %+v %v, want 413 body_too_large", declared, resp.StatusCode, p, err)
		}
	}
	if n := e.Count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatalf("%d keys stored", n)
	}
}
