package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/demo-api/demo-api/internal/tracing"
)

// flushTimeout bounds the export of the spans still buffered at the stop.
const flushTimeout = 5 * time.Second

// startTracing turns tracing on as cfg says, and returns what stops it.
func startTracing(ctx context.Context, cfg Config, logger *slog.Logger) (stop func(), err error) {
	shutdown, err := tracing.Setup(ctx, cfg.tracing, logger)
	if err != nil {
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			logger.Warn("tracing: spans not exported at the stop", "err", err)
		}
	}, nil
}
