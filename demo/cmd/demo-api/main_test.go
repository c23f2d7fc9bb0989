package main

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/demo/internal/tools/browsertest"
	"github.com/demo-api/demo-api/demo/internal/tools/demotest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m, ".", demotest.Run)
	if err := browsertest.Close(); err != nil {
		code = max(code, 1)
	}
	os.Exit(code)
}

// TestPagesBesideTheAPI: serve answers the pages without a token, beside
// the API, whose routes still ask for one.
func TestPagesBesideTheAPI(t *testing.T) {
	t.Parallel()
	base, _ := testenv.ServeInProcess(t, run)
	for _, tc := range []struct {
		method, path string
		status       int
		contentType  string
	}{
		{http.MethodGet, "/", http.StatusOK, "text/html"},
		{http.MethodGet, "/workshop", http.StatusOK, "text/html"},
		{http.MethodGet, "/ui/config.json", http.StatusOK, "application/json"},
		{http.MethodGet, "/healthz", http.StatusOK, "application/json"},
		{http.MethodGet, "/v1/demo-requests/6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0b01", http.StatusUnauthorized, "application/problem+json"},
		{http.MethodPost, "/workshop", http.StatusNotFound, "application/problem+json"},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.contentType) {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.contentType)
		}
	}
}
