package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/serving"
	"github.com/demo-api/demo-api/internal/tracing"
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

// dispatch runs the dispatcher alone until ctx ends, with its metrics on
// METRICS_ADDR if set.
func dispatch(ctx context.Context, cfg Config, stdout, stderr io.Writer, ext *Extension) error {
	logger := NewLogger(cfg.logFormat, stderr).With("service", "dispatcher")
	stopTracing, err := tracing.Setup(ctx, cfg.tracing, logger)
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing(context.WithoutCancel(ctx)) }()
	store, err := openStore(ctx, cfg, logger, postgres.LongStatements, ext)
	if err != nil {
		return err
	}
	defer store.DB().Close()
	m := metrics.New(store, logger)
	if cfg.metricsAddr != "" {
		ln, err := Listen(cfg.metricsAddr, "METRICS_ADDR")
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		srv := serving.NewServer(mux, logger, cfg.readTimeout)
		go func() { _ = srv.Serve(ln) }() // ends with ErrServerClosed when run returns
		defer func() { _ = srv.Close() }()
		fmt.Fprintf(stdout, "dispatcher metrics on http://%s/metrics\n", ln.Addr())
	}
	logger.Info("dispatching", "provider", cfg.ProviderURL, "max_attempts", cfg.dispatchAttempts, "metrics", cfg.metricsAddr)
	disp := dispatcher(cfg, store, logger, m.Outbox(store, logger))
	var wg sync.WaitGroup
	if ext.Serve != nil {
		more := &Serving{Config: cfg, Logger: logger, Store: store, Chores: store, Metrics: m, Desk: disp.Desk, Stdout: stdout,
			Chore: func(f func(context.Context)) { wg.Go(func() { f(ctx) }) }}
		if err := ext.Serve(ctx, more); err != nil {
			return err
		}
	}
	disp.Run(ctx)
	wg.Wait()
	logger.Info("stopped")
	return nil
}
