package provider_test

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestTheDeskDoubleKeepsTheDesksContract sends the same calls, those the
// outbox's dispatcher makes (a submission, its lookup, a cancel, the
// cancel's lookup) and the mistakes a rename on one side would make, to the
// stand-in desk and to the double the outbox's tests use, in the same
// order, and checks that both answer each with the same status, the same
// Content-Type and Idempotent-Replayed, and a body of the same shape: the
// same fields with values of the same JSON types, and the same code, state
// and keys. A submission's body is what the desk client sends
// (reviewdesk.Submission, encoded as Client.Submit encodes it), so renaming
// a field of the client's type, of the desk's or of the double's check
// makes a step disagree.
func TestTheDeskDoubleKeepsTheDesksContract(t *testing.T) {
	t.Parallel()
	desk, double := desktest.StartDesk(t, nil), testenv.StartDeskDouble(t)
	submission := func(id, topic, note string) string {
		b, err := json.Marshal(reviewdesk.Submission{RequestID: id, Topic: topic, Note: note})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	const cancelBody = `{}` // what Client.Cancel sends; the desk reads no body of a cancel
	for _, s := range []struct {
		what, method, path, key, body string
		status                        int
	}{
		{"a submission", "POST", "/v1/submissions", "demo-request:1", submission("1", "billing", "call me"), 201},
		{"the same again", "POST", "/v1/submissions", "demo-request:1", submission("1", "billing", "call me"), 200},
		{"another payload under its key", "POST", "/v1/submissions", "demo-request:1", submission("1", "shipping", ""), 422},
		{"a submission with no note", "POST", "/v1/submissions", "demo-request:2", `{"requestId":"2","topic":"billing"}`, 201},
		{"a field the desk does not know", "POST", "/v1/submissions", "demo-request:3", `{"requestId":"3","topic":"t","note":"","extra":1}`, 400},
		{"a field renamed", "POST", "/v1/submissions", "demo-request:3", `{"request_id":"3","topic":"t","note":""}`, 400},
		{"no topic", "POST", "/v1/submissions", "demo-request:3", `{"requestId":"3","note":"n"}`, 400},
		{"an empty requestId", "POST", "/v1/submissions", "demo-request:3", submission("", "t", ""), 400},
		{"a topic of the wrong type", "POST", "/v1/submissions", "demo-request:3", `{"requestId":"3","topic":7}`, 400},
		{"not JSON", "POST", "/v1/submissions", "demo-request:3", `{"requestId":`, 400},
		{"a body over 16 KiB", "POST", "/v1/submissions", "demo-request:3", submission("3", "t", strings.Repeat("n", 16<<10)), 413},
		{"no Idempotency-Key", "POST", "/v1/submissions", "", submission("3", "t", ""), 400},
		{"a key over 255 characters", "POST", "/v1/submissions", strings.Repeat("k", 256), submission("3", "t", ""), 400},
		{"the submission's lookup", "GET", "/v1/submissions/demo-request:1", "", "", 200},
		{"a lookup of a key never taken", "GET", "/v1/submissions/demo-request:3", "", "", 404},
		{"a cancel", "POST", "/v1/submissions/demo-request:1/cancel", "demo-request:1:cancel", cancelBody, 201},
		{"the cancel again", "POST", "/v1/submissions/demo-request:1/cancel", "demo-request:1:cancel", cancelBody, 200},
		{"the cancel's key for another submission", "POST", "/v1/submissions/demo-request:2/cancel", "demo-request:1:cancel", cancelBody, 422},
		{"a cancel without a key", "POST", "/v1/submissions/demo-request:2/cancel", "", cancelBody, 400},
		{"the cancel's lookup", "GET", "/v1/cancels/demo-request:1:cancel", "", "", 200},
		{"the cancelled submission's lookup", "GET", "/v1/submissions/demo-request:1", "", "", 200},
		{"a lookup of a cancel never taken", "GET", "/v1/cancels/demo-request:2:cancel", "", "", 404},
		{"a cancel before its submission", "POST", "/v1/submissions/demo-request:4/cancel", "demo-request:4:cancel", cancelBody, 201},
		{"the submission after its cancel", "POST", "/v1/submissions", "demo-request:4", submission("4", "billing", ""), 201},
		{"its lookup: cancelled from the start", "GET", "/v1/submissions/demo-request:4", "", "", 200},
	} {
		real, dbl := send(t, desk.URL, s.method, s.path, s.key, s.body), send(t, double.URL, s.method, s.path, s.key, s.body)
		if real.status != s.status {
			t.Errorf("%s: the desk answered %d %s, want %d", s.what, real.status, real.body, s.status)
		}
		if diff := real.differs(dbl); diff != "" {
			t.Errorf("%s: the double differs from the desk: %s\n desk:   %d %s\n double: %d %s", s.what, diff, real.status, real.body, dbl.status, dbl.body)
		}
	}

	// The one rule where they differ on purpose: the desk takes one cancel
	// per submission, the double one per key (a service with a reopen
	// cancels one request more than once).
	const path, again = "/v1/submissions/demo-request:1/cancel", "demo-request:1:cancel:2"
	if r := send(t, desk.URL, "POST", path, again, cancelBody); r.status != 422 || r.field("code") != "already_cancelled" {
		t.Errorf("a second cancel of one submission: the desk answered %d %s, want 422 already_cancelled", r.status, r.body)
	}
	if r := send(t, double.URL, "POST", path, again, cancelBody); r.status != 201 {
		t.Errorf("a second cancel of one submission: the double answered %d %s, want 201", r.status, r.body)
	}
}

// answer is one answer of a desk.
type answer struct {
	status              int
	contentType, replay string
	body                []byte
	fields              map[string]any
}

// send sends one call to the desk at base and reads its answer.
func send(t *testing.T, base, method, path, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, replay: resp.Header.Get("Idempotent-Replayed")}
	a.contentType, _, _ = mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if a.body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	a.body = bytes.TrimSpace(a.body)
	if err := json.Unmarshal(a.body, &a.fields); err != nil {
		t.Fatalf("%s %s: an answer that is not a JSON object: %v: %s", method, path, err, a.body)
	}
	return a
}

func (a answer) field(name string) any { return a.fields[name] }

// differs says how b's answer differs from a's, or "" when they agree.
func (a answer) differs(b answer) string {
	switch {
	case a.status != b.status:
		return "the status"
	case a.contentType != b.contentType:
		return "the Content-Type"
	case a.replay != b.replay:
		return "Idempotent-Replayed"
	}
	names := slices.Sorted(maps.Keys(a.fields))
	if other := slices.Sorted(maps.Keys(b.fields)); !slices.Equal(names, other) {
		return "the fields: " + strings.Join(names, ", ") + " against " + strings.Join(other, ", ")
	}
	for _, name := range names {
		x, y := a.fields[name], b.fields[name]
		switch name {
		case "code", "state", "key", "submissionKey", "status":
			if x != y {
				return "the value of " + name
			}
		default:
			if kind(x) != kind(y) {
				return "the JSON type of " + name
			}
		}
	}
	return ""
}

// kind is a decoded JSON value's type.
func kind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return "null"
}
