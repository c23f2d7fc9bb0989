package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// TestOperationCheck: an operation declared half-way is refused, by name,
// before it can serve a request.
func TestOperationCheck(t *testing.T) {
	whole := func() operation[string, string] {
		return operation[string, string]{
			method:      http.MethodPost,
			pattern:     "/v1/things",
			name:        "things.create",
			path:        idempotency.OnePhase,
			decode:      func(http.ResponseWriter, *http.Request) (string, error) { return "", nil },
			significant: func(string) map[string]any { return nil },
			decide:      func(context.Context, string, string, time.Time) (string, error) { return "", nil },
			render:      func(string) (idempotency.Response, error) { return idempotency.Response{}, nil },
			effect:      "create_thing.sql",
			args:        func(string) []any { return nil },
		}
	}
	if err := whole().check(); err != nil {
		t.Fatalf("a whole operation: %v", err)
	}
	tests := []struct {
		name  string
		spoil func(*operation[string, string])
		want  string
	}{
		{"no name", func(o *operation[string, string]) { o.name = "" }, "without a name"},
		{"no path", func(o *operation[string, string]) { o.path = "" }, "things.create lacks a path"},
		{"no decode", func(o *operation[string, string]) { o.decode = nil }, "things.create lacks decode"},
		{"no significant", func(o *operation[string, string]) { o.significant = nil }, "lacks significant"},
		{"no decide", func(o *operation[string, string]) { o.decide = nil }, "lacks decide"},
		{"no render", func(o *operation[string, string]) { o.render = nil }, "lacks render"},
		{"no route", func(o *operation[string, string]) { o.pattern = "" }, "lacks a method and pattern"},
		{"no effect", func(o *operation[string, string]) { o.effect = "" }, "lacks effect"},
		{"no args, no render", func(o *operation[string, string]) { o.args, o.render = nil, nil }, "lacks render, args"},
	}
	for _, tc := range tests {
		op := whole()
		tc.spoil(&op)
		if err := op.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error that says %q", tc.name, err, tc.want)
		}
	}
}
