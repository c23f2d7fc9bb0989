package service

import (
	"strings"
	"testing"
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
