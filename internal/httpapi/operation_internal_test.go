package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/idempotency"
)

type thingEffect struct{}

func (thingEffect) Describe() string { return "thing" }

// TestOperationCheck: an operation declared half-way is refused, by name,
// before it can serve a request.
func TestOperationCheck(t *testing.T) {
	whole := func() Operation[string, string] {
		return Operation[string, string]{
			Method:      http.MethodPost,
			Pattern:     "/v1/things",
			Name:        "things.create",
			Path:        idempotency.OnePhase,
			Decode:      func(http.ResponseWriter, *http.Request) (string, error) { return "", nil },
			Significant: func(string) map[string]any { return nil },
			Decide:      func(context.Context, string, string, time.Time) (string, error) { return "", nil },
			Render:      func(string) (idempotency.Response, error) { return idempotency.Response{}, nil },
			Effect:      func(string) idempotency.Effect { return thingEffect{} },
		}
	}
	if err := whole().check(); err != nil {
		t.Fatalf("a whole operation: %v", err)
	}
	tests := []struct {
		name  string
		spoil func(*Operation[string, string])
		want  string
	}{
		{"no name", func(o *Operation[string, string]) { o.Name = "" }, "lacks Name"},
		{"no path", func(o *Operation[string, string]) { o.Path = "" }, `"things.create" lacks Path`},
		{"no decode", func(o *Operation[string, string]) { o.Decode = nil }, `"things.create" lacks Decode`},
		{"no significant", func(o *Operation[string, string]) { o.Significant = nil }, "lacks Significant"},
		{"no decide", func(o *Operation[string, string]) { o.Decide = nil }, "lacks Decide"},
		{"no render", func(o *Operation[string, string]) { o.Render = nil }, "lacks Render"},
		{"no effect", func(o *Operation[string, string]) { o.Effect = nil }, "lacks Effect"},
		{"no route", func(o *Operation[string, string]) { o.Pattern = "" }, "lacks Pattern"},
		{"no decode, no route", func(o *Operation[string, string]) { o.Decode, o.Method = nil, "" }, "lacks Method, Decode"},
	}
	for _, tc := range tests {
		op := whole()
		tc.spoil(&op)
		if err := op.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error that says %q", tc.name, err, tc.want)
		}
	}
}
