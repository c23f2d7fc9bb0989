package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestSecurityHeaders: every answer of the server carries the security
// headers that fit it, the API's own 404 and 405, its problems, its
// replays and its probes too: never sniffed into another type, never run
// as a page or framed, never kept by a cache. (The pages set their own
// policy over these: package web tests it.)
func TestSecurityHeaders(t *testing.T) {
	e := testenv.New(t, testenv.WithWorkshop())
	api := map[string]string{
		"X-Content-Type-Options":  "nosniff",
		"Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-store",
	}
	create := testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"headers-1"}, Body: body1}
	for _, tc := range []struct {
		name   string
		rq     testenv.Req
		status int
	}{
		{"an unknown path", testenv.Req{Method: http.MethodGet, Path: "/index.html"}, http.StatusNotFound},
		{"an unknown method", testenv.Req{Method: http.MethodPut, Path: "/healthz"}, http.StatusMethodNotAllowed},
		{"no token", testenv.Req{Path: "/v1/demo-requests", Body: body1}, http.StatusUnauthorized},
		{"a create", create, http.StatusCreated},
		{"its replay", create, http.StatusCreated},
		{"a bad request", testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Body: body1}, http.StatusBadRequest},
		{"the outcome route", testenv.Req{Method: http.MethodGet, Path: "/v1/idempotency-keys/nope", Token: testenv.TokenAlice}, http.StatusNotFound},
		{"a problem's page", testenv.Req{Method: http.MethodGet, Path: "/problems/idempotency_key_missing"}, http.StatusOK},
		{"healthz", testenv.Req{Method: http.MethodGet, Path: "/healthz"}, http.StatusOK},
		{"readyz", testenv.Req{Method: http.MethodGet, Path: "/readyz"}, http.StatusOK},
	} {
		r := e.Must(tc.rq)
		if r.Status != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, r.Status, tc.status)
		}
		for k, v := range api {
			if got := r.Header.Get(k); got != v {
				t.Errorf("%s (%d): %s %q, want %q", tc.name, r.Status, k, got, v)
			}
		}
	}
}
