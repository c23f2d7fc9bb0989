package httpapi_test

import (
	"net/http"
	"testing"
)

// TestSecurityHeaders: every answer of the server carries the security
// headers that fit it, the API's own 404 and 405, its problems, its
// replays and its probes too: never sniffed into another type, never run
// as a page or framed, never kept by a cache. (The pages set their own
// policy over these: package web tests it.)
func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t, withWorkshop())
	api := map[string]string{
		"X-Content-Type-Options":  "nosniff",
		"Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-store",
	}
	create := req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"headers-1"}, body: body1}
	for _, tc := range []struct {
		name   string
		rq     req
		status int
	}{
		{"an unknown path", req{method: http.MethodGet, path: "/index.html"}, http.StatusNotFound},
		{"an unknown method", req{method: http.MethodPut, path: "/healthz"}, http.StatusMethodNotAllowed},
		{"no token", req{path: "/v1/demo-requests", body: body1}, http.StatusUnauthorized},
		{"a create", create, http.StatusCreated},
		{"its replay", create, http.StatusCreated},
		{"a bad request", req{path: "/v1/demo-requests", token: tokenAlice, body: body1}, http.StatusBadRequest},
		{"the outcome route", req{method: http.MethodGet, path: "/v1/idempotency-keys/nope", token: tokenAlice}, http.StatusNotFound},
		{"a problem's page", req{method: http.MethodGet, path: "/problems/idempotency_key_missing"}, http.StatusOK},
		{"healthz", req{method: http.MethodGet, path: "/healthz"}, http.StatusOK},
		{"readyz", req{method: http.MethodGet, path: "/readyz"}, http.StatusOK},
	} {
		r := e.must(tc.rq)
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
