package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/metrics"
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
// or without serve, on one database. With cfg.metricsAddr it serves its
// metrics there (GET /metrics), as serve does on its own address.
func dispatch(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	logger := cfg.logger(stderr).With("service", "dispatcher")
	store, closeDB, err := openStore(ctx, cfg, postgres.LongStatements)
	if err != nil {
		return err
	}
	defer closeDB()
	m := metrics.New(store, logger)
	if cfg.metricsAddr != "" {
		ln, err := listen(cfg.metricsAddr, "METRICS_ADDR")
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		srv := cfg.httpServer(mux, logger)
		go srv.Serve(ln)
		defer srv.Close()
		fmt.Fprintf(stdout, "dispatcher metrics on http://%s/metrics\n", ln.Addr())
	}
	logger.Info("dispatching", "provider", cfg.providerURL, "max_attempts", cfg.dispatchAttempts, "metrics", cfg.metricsAddr)
	disp := dispatcher(cfg, store, logger, m.Outbox(store, logger))
	// demo-only{ the expedite's completer
	runner, ops, err := completer(cfg, store, disp.Desk, m.Outcome)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { defer close(done); complete(ctx, logger, runner, ops, cfg.completeInterval) }()
	// }demo-only
	disp.Run(ctx)
	// demo-only{ the expedite's completer
	<-done
	// }demo-only
	logger.Info("stopped")
	return nil
}
