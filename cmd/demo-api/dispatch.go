package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/reviewdesk"
)

// dispatcher returns the dispatcher of cfg on store; its Desk is nil when
// no PROVIDER_URL is set (it then dispatches nothing, and reconcile answers
// 503).
func dispatcher(cfg config, store *postgres.Store, logger *slog.Logger, m delivery.Metrics) *delivery.Dispatcher {
	d := &delivery.Dispatcher{Store: store, Logger: logger, Metrics: m, MaxAttempts: cfg.dispatchAttempts,
		FirstRetry: cfg.dispatchRetry, CallTimeout: cfg.dispatchTimeout}
	if cfg.providerURL != "" {
		// A connection per call in flight, kept between rounds.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		d.Desk = reviewdesk.New(cfg.providerURL, &http.Client{Transport: t})
	}
	return d
}

// dispatch runs the dispatcher alone until ctx ends; several may run, with
// or without serve, on one database.
func dispatch(ctx context.Context, cfg config, stderr io.Writer) error {
	logger := cfg.logger(stderr).With("service", "dispatcher")
	store, closeDB, err := openStore(ctx, cfg, postgres.LongStatements)
	if err != nil {
		return err
	}
	defer closeDB()
	logger.Info("dispatching", "provider", cfg.providerURL, "max_attempts", cfg.dispatchAttempts)
	dispatcher(cfg, store, logger, nil).Run(ctx)
	logger.Info("stopped")
	return nil
}
