package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/reviewdesk"
)

// TestTheDeskDoubleChecksWhatItIsSent: the double takes what the desk
// client sends, and refuses as the desk does a body or a key the desk
// would refuse, storing nothing. (The stand-in desk's contract test
// compares the two call by call.)
func TestTheDeskDoubleChecksWhatItIsSent(t *testing.T) {
	d := StartDeskDouble(t)
	ctx := context.Background()
	want := reviewdesk.Submission{RequestID: "1", Topic: "billing", Note: "call me"}
	if _, err := d.Client.Submit(ctx, "demo-request:1", want); err != nil {
		t.Fatalf("the client's submission: %v", err)
	}
	if _, got, ok := d.Submission("demo-request:1"); !ok || got != want {
		t.Fatalf("the double holds %+v (%t), want %+v", got, ok, want)
	}
	if _, err := d.Client.Submit(ctx, "demo-request:2", reviewdesk.Submission{RequestID: "2"}); !isRefused(err, 400, "invalid_body") {
		t.Fatalf("a submission without a topic: %v, want 400 invalid_body", err)
	}
	for _, c := range []struct {
		what, key, body string
		status          int
		code            string
	}{
		{"an unknown field", "k", `{"requestId":"3","topic":"t","note":"","extra":1}`, 400, "invalid_body"},
		{"a field renamed", "k", `{"request_id":"3","topic":"t"}`, 400, "invalid_body"},
		{"not JSON", "k", `{"requestId"`, 400, "invalid_body"},
		{"a body over 16 KiB", "k", `{"requestId":"3","topic":"t","note":"` + strings.Repeat("n", 16<<10) + `"}`, 413, "body_too_large"},
		{"no key", "", `{"requestId":"3","topic":"t"}`, 400, "idempotency_key_invalid"},
	} {
		req, _ := http.NewRequest(http.MethodPost, d.URL+reviewdesk.SubmitPath, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		if c.key != "" {
			req.Header.Set(reviewdesk.IdempotencyKeyHeader, c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Code string }
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/problem+json" || p.Code != c.code {
			t.Errorf("%s: %d %s %q, want %d problem+json %s", c.what, resp.StatusCode, resp.Header.Get("Content-Type"), p.Code, c.status, c.code)
		}
	}
	if n, bad := d.Submissions(t), d.Invalid(); n != 1 || bad != 6 {
		t.Fatalf("%d submissions held and %d calls refused, want 1 and 6", n, bad)
	}
}

func isRefused(err error, status int, code string) bool {
	var r *reviewdesk.RefusedError
	return errors.As(err, &r) && r.Status == status && r.Code == code
}
