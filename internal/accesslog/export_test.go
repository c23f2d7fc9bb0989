package accesslog

import (
	"context"
	"log/slog"
	"time"
)

// NewOutage is an outage's log summing up its 503s every every, for its
// test: the function it returns notes one 503 of cause, answered with err.
func NewOutage(logger *slog.Logger, every time.Duration) func(ctx context.Context, cause string, err error) {
	return newOutage(logger, every).answered
}
