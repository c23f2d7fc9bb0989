// Package profiler serves Go's profiler (net/http/pprof) beside the demo's
// servers on PPROF_ADDR, for demo-bench -profile.
package profiler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/demo-api/demo-api/internal/serving"
)

// Listen listens for the profiler on addr (PPROF_ADDR), which must be on
// this machine: a profile shows what the server runs, and its handlers keep
// the process busy for as long as they are asked to.
func Listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("PPROF_ADDR %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("PPROF_ADDR %q: the profiler listens on this machine only: 127.0.0.1:PORT, [::1]:PORT or localhost:PORT", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("PPROF_ADDR: %w", err)
	}
	return ln, nil
}

// Announce prints the line a server prints after its address line, where
// demo-bench reads it: "<name> pprof on http://ADDR/debug/pprof/".
func Announce(w io.Writer, name string, ln net.Listener) {
	fmt.Fprintf(w, "%s pprof on http://%s/debug/pprof/\n", name, ln.Addr())
}

// Serve serves net/http/pprof's pages under /debug/pprof/ on ln until ctx
// ends, on a server of its own, apart from the API's routes.
func Serve(ctx context.Context, logger *slog.Logger, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No ReadTimeout nor WriteTimeout: a profile may take a minute.
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return serving.Serve(ctx, slog.New(slog.DiscardHandler), srv, ln, time.Second)
}
