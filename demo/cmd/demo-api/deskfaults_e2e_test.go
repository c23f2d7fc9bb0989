package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/tools/proctest"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// TestDeskFaultsRefusalPassedOn: faults that the review desk refuses (a
// delay that is not a duration) are answered by PUT /workshop/desk-faults
// as the refusal they are: 400 invalid_field with the desk's reason and no
// Retry-After, since sending them again cannot succeed. Faults the desk
// takes are echoed with 200.
func TestDeskFaultsRefusalPassedOn(t *testing.T) {
	testkit.Long(t, "fault injection at the desk, end to end")
	t.Parallel()
	x := newExpediteRig(t)
	p := proctest.Start(t, x.url, x.env(time.Second)...)
	put := func(body string) (*http.Response, []byte) {
		t.Helper()
		resp, b, err := testkit.Send(context.Background(), http.MethodPut, p.URL+"/workshop/desk-faults", proctest.Token, "", body,
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
