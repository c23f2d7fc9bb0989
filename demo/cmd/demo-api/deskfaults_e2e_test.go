package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestDeskFaultsRefusalPassedOn: faults that the review desk refuses (a
// delay that is not a duration) are answered by PUT /workshop/desk-faults
// as the refusal they are: 400 invalid_field with the desk's reason and no
// Retry-After, since sending them again cannot succeed. Faults the desk
// takes are echoed with 200.
func TestDeskFaultsRefusalPassedOn(t *testing.T) {
	testenv.Long(t, "fault injection at the desk, end to end")
	t.Parallel()
	x := newExpediteRig(t)
	p := testenv.Start(t, x.url, x.env(time.Second)...)
	put := func(body string) (*http.Response, []byte) {
		t.Helper()
		resp, b, err := testenv.Send(context.Background(), http.MethodPut, p.URL+"/workshop/desk-faults", testenv.TokenAlice, "", body,
			"Content-Type", "application/json")
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	resp, b := put(`{"delay":"zz"}`)
	var prob struct{ Code, Detail string }
	json.Unmarshal(b, &prob)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
		prob.Code != "invalid_field" || !strings.Contains(prob.Detail, "delay") || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("faults the desk refuses: %d Retry-After %q %s; want 400 invalid_field with the desk's reason, no Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	for _, ok := range []string{`{"delay":"1s"}`, `{}`} {
		if resp, b := put(ok); resp.StatusCode != http.StatusOK {
			t.Fatalf("faults %s: %d %s, want 200", ok, resp.StatusCode, b)
		}
	}
}

// TestDeskFaultsSlowBodyAnsweredAsTheAPI: a body that never arrives (past
// HTTP_READ_TIMEOUT, here 1 s) gets from PUT /workshop/desk-faults the
// answer the API gives it on a create: a problem for the client's mistake,
// never a 500.
func TestDeskFaultsSlowBodyAnsweredAsTheAPI(t *testing.T) {
	testenv.Long(t, "a slow body, end to end")
	t.Parallel()
	x := newExpediteRig(t)
	p := testenv.Start(t, x.url, append(x.env(time.Second), "HTTP_READ_TIMEOUT=1s")...)
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	// answer sends the head of a request whose body never comes after
	// its first byte, and reads the answer.
	answer := func(method, path string) (int, string) {
		t.Helper()
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
			"Idempotency-Key: slow-body\r\nContent-Length: 100\r\n\r\n{", method, path, u.Host, testenv.TokenAlice)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s %s: no answer to a body that never comes: %v", method, path, err)
		}
		defer resp.Body.Close()
		var prob struct{ Code string }
		json.NewDecoder(resp.Body).Decode(&prob)
		return resp.StatusCode, prob.Code
	}
	apiStatus, apiCode := answer(http.MethodPost, "/v1/demo-requests")
	if apiStatus >= 500 || apiCode == "" {
		t.Fatalf("the API answers a slow body %d %q, want a problem for the client", apiStatus, apiCode)
	}
	if status, code := answer(http.MethodPut, "/workshop/desk-faults"); status != apiStatus || code != apiCode {
		t.Fatalf("PUT /workshop/desk-faults answers a slow body %d %q, want the API's %d %s", status, code, apiStatus, apiCode)
	}
}
