package profiler_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/demo/internal/profiler"
)

// TestListenOnThisMachineOnly: an address other machines reach, or
// every interface, is refused; a loopback one is served.
func TestListenOnThisMachineOnly(t *testing.T) {
	for _, addr := range []string{":6060", "0.0.0.0:6060", "[::]:6060", "192.0.2.1:6060", "example.com:6060", "127.0.0.1"} {
		if ln, err := profiler.Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) listened", addr)
		}
	}
	ln, err := profiler.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- profiler.Serve(ctx, slog.New(slog.DiscardHandler), ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/allocs?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Errorf("/debug/pprof/allocs: %d %.80s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after its context ended: %v", err)
	}
}
