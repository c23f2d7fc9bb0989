package httpapi_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestUnreachableDatabaseIs503: with no database to reach, every route
// that needs it answers 503 unavailable with Retry-After, never 500.
func TestUnreachableDatabaseIs503(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port that then refuses
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	db, err := sqlx.Open("postgres", "postgres://nobody@"+addr+"/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := postgres.New(db)
	tokens, _ := auth.Parse("alice:" + auth.Hash(testenv.TokenAlice))
	h, err := httpapi.NewServer(httpapi.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Keys: store.Watched(), Writes: store,
		Demo: &demo.Service{Store: store}, Tokens: tokens, Ready: store.Ping, TTL: time.Hour, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tt := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/demo-requests", body1},
		{http.MethodPost, "/v1/demo-requests/8a0d8f0e-8d8e-4d0f-9f4c-5a3f4f0b2c11/cancel", ""},
		{http.MethodGet, "/v1/demo-requests/8a0d8f0e-8d8e-4d0f-9f4c-5a3f4f0b2c11", ""},
		{http.MethodGet, "/v1/idempotency-keys/k", ""},
		{http.MethodGet, "/readyz", ""},
	} {
		for _, path := range []string{"", "two_phase"} {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+testenv.TokenAlice)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "key-down-"+path)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
				!strings.Contains(string(b), `"code":"`+apperr.Unavailable+`"`) {
				t.Fatalf("%s %s with the database down: %d %v %s", tt.method, tt.path, resp.StatusCode, resp.Header, b)
			}
		}
	}
}
