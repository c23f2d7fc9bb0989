package service

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestHealthzURL: a listen address that names every interface is asked on
// loopback; one that names an address is asked there.
func TestHealthzURL(t *testing.T) {
	for _, tc := range []struct{ addr, want, wantErr string }{
		{":8080", "http://127.0.0.1:8080/healthz", ""},
		{"0.0.0.0:8080", "http://127.0.0.1:8080/healthz", ""},
		{"[::]:8080", "http://[::1]:8080/healthz", ""},
		{"127.0.0.1:9000", "http://127.0.0.1:9000/healthz", ""},
		{"10.0.0.7:80", "http://10.0.0.7:80/healthz", ""},
		{"api.internal:8080", "http://api.internal:8080/healthz", ""},
		{"127.0.0.1:0", "", "no port"},
		{"8080", "", "LISTEN_ADDR"},
	} {
		got, err := healthzURL(tc.addr)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("healthzURL(%q): %q, %v; want an error with %q", tc.addr, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("healthzURL(%q): %q, %v; want %q", tc.addr, got, err, tc.want)
		}
	}
}

// TestHealthcheck: the command succeeds on a 200 from /healthz and fails
// on another status or no answer; the testenv.Binary exits 1 then, which is what
// a container's HEALTHCHECK reads.
func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	// LISTEN_ADDR as serve would read it, on every interface.
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	getenv := func(k string) string {
		if k == "LISTEN_ADDR" {
			return ":" + port
		}
		return ""
	}
	var stdout, stderr strings.Builder
	if err := run(context.Background(), []string{"healthcheck"}, getenv, &stdout, &stderr); err != nil {
		t.Errorf("healthcheck of a server answering 200: %v", err)
	}
	status = http.StatusServiceUnavailable
	if err := run(context.Background(), []string{"healthcheck"}, getenv, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("healthcheck of a server answering 503: %v, want an error naming the 503", err)
	}
	srv.Close()
	out, err := exec.Command(testenv.Binary, "healthcheck", "-listen", ln.Addr().String()).CombinedOutput()
	if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 1 {
		t.Errorf("demo-api healthcheck with nothing listening: %v, want exit status 1\n%s", err, out)
	}
}
