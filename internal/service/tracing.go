package service

import (
	"context"
	"log/slog"
	"net/url"
	"time"

	"github.com/demo-api/demo-api/internal/tracing"
)

// flushTimeout bounds the export of the spans still buffered at the stop.
const flushTimeout = 5 * time.Second

// startTracing turns tracing on when cfg names an OTLP endpoint (package
// tracing), and returns what stops it: it exports the spans still
// buffered, within flushTimeout, and says so in the log if it cannot.
func startTracing(ctx context.Context, cfg Config, logger *slog.Logger) (stop func(), err error) {
	shutdown, err := tracing.Setup(ctx, cfg.tracing, logger)
	if err != nil {
		return nil, err
	}
	if cfg.tracing.Endpoint != "" {
		endpoint := cfg.tracing.Endpoint
		if u, err := url.Parse(endpoint); err == nil {
			endpoint = u.Redacted()
		}
		logger.Info("tracing", "endpoint", endpoint, "protocol", cfg.tracing.Protocol, "service_name", cfg.tracing.ServiceName)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			logger.Warn("tracing: spans not exported at the stop", "err", err)
		}
	}, nil
}
