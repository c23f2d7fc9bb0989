package postgres_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// TestStoredHeadersRoundTrip: the headers of a stored answer come back from
// jsonb as they were stored, whatever characters they hold.
func TestStoredHeadersRoundTrip(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	for i, h := range []map[string]string{
		{"Content-Type": "application/json", "Location": "/v1/demo-requests/4b0d8d1e-7f6a-4c55-9b8e-2f0c8a5d3e11"},
		{"Content-Type": "application/problem+json", "Link": `</problems/x>; rel="describedby"`},
		{"X-Odd": "tab\there, quote\" back\\slash, nul-less \x01\x1f, é, \u2028, <&>", "Y": ""},
		{"Only": "one"},
		{},
		nil,
	} {
		sc := idempotency.Scope{Actor: "headers", Operation: "op", Key: fmt.Sprint("k", i)}
		d := idempotency.Answer{Response: idempotency.Response{Status: 422, Header: h, Body: []byte("{}")}}
		cr, err := s.CompleteAtomically(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, "fp", ttl, d)
		if err != nil || !cr.Wrote {
			t.Fatalf("store %v: %v, %+v", h, err, cr)
		}
		rec, _, err := s.Lookup(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) == 0 && len(rec.Response.Header) == 0 {
			continue
		}
		if !maps.Equal(rec.Response.Header, h) {
			t.Errorf("stored %q, read %q", h, rec.Response.Header)
		}
	}
}
