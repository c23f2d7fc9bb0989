package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/serving"
)

// dispatcher returns the dispatcher of cfg on store; Desk is nil without
// PROVIDER_URL.
func dispatcher(cfg Config, store *postgres.Store, logger *slog.Logger, m delivery.Metrics) *delivery.Dispatcher {
	d := &delivery.Dispatcher{Store: store, Logger: logger, Metrics: m, MaxAttempts: cfg.dispatchAttempts,
		FirstRetry: cfg.dispatchRetry, CallTimeout: cfg.dispatchTimeout}
	if cfg.ProviderURL != "" {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		d.Desk = reviewdesk.New(cfg.ProviderURL, &http.Client{Transport: t}) // a connection per call in flight
	}
	return d
}

// Dispatch runs the dispatcher alone until ctx ends, with its metrics on
// METRICS_ADDR if set; it waits for the App's chores before it returns.
func (a *App) Dispatch(ctx context.Context, stdout io.Writer) error {
	cfg, logger := a.Config, a.Logger
	if cfg.metricsAddr != "" {
		ln, err := Listen(cfg.metricsAddr, "METRICS_ADDR")
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.Metrics.Handler())
		srv := serving.NewServer(mux, logger, cfg.readTimeout)
		go func() { _ = srv.Serve(ln) }() // ends with ErrServerClosed when Dispatch returns
		defer func() { _ = srv.Close() }()
		fmt.Fprintf(stdout, "dispatcher metrics on http://%s/metrics\n", ln.Addr())
	}
	logger.Info("dispatching", "provider", cfg.ProviderURL, "max_attempts", cfg.dispatchAttempts, "metrics", cfg.metricsAddr)
	a.Dispatcher.Run(ctx)
	a.stopChores()
	a.wg.Wait()
	logger.Info("stopped")
	return nil
}
