// Package serving runs an HTTP server until its context ends, then stops it
// gracefully. Every server of the project runs this way: the API, the review
// desk and the bench's baseline.
package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// NewServer is an HTTP server of h with the timeouts every server of the
// project has: a client that sends its request slowly (past readTimeout for
// the whole request, 5 s for its headers), or keeps an idle connection, is
// cut off.
func NewServer(h http.Handler, logger *slog.Logger, readTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(5*time.Second, readTimeout),
		ReadTimeout:       readTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Serve serves srv on ln until ctx ends, then shuts it down: it stops
// accepting and gives the requests in flight up to timeout to finish. It
// returns nil after a graceful stop, else what stopped it.
func Serve(ctx context.Context, logger *slog.Logger, srv *http.Server, ln net.Listener, timeout time.Duration) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Info("stopped")
	return nil
}
