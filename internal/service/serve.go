package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/serving"
	"github.com/demo-api/demo-api/internal/tracing"
	"github.com/demo-api/demo-api/internal/workshop"
)

// serve runs the API and its chores until ctx ends, then stops gracefully.
func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer, ext *Extension) error {
	logger := NewLogger(cfg.logFormat, stderr)
	stopTracing, err := tracing.Setup(ctx, cfg.tracing, logger)
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing(context.WithoutCancel(ctx)) }()
	store, err := openStore(ctx, cfg, logger, postgres.KeyStatements, ext)
	if err != nil {
		return err
	}
	defer store.DB().Close()
	chores, err := openStore(ctx, cfg, logger, postgres.LongStatements, nil)
	if err != nil {
		return err
	}
	defer chores.DB().Close()
	tokens, _ := auth.Parse(cfg.tokens) // checked by loadConfig; maybe none, with an Extension's Authenticate
	m := metrics.New(store, logger)
	disp := dispatcher(cfg, chores, logger, m.Outbox(store, logger))

	repl := &replicationWatch{logger: logger, read: store.Replication, gauge: m.CommitWaits}
	repl.check(ctx) // says at start whether a commit waits for a synchronous standby
	deps := httpapi.Deps{
		Logger:       logger,
		Keys:         store,
		Demo:         &demo.Service{Store: store, RefusedTopics: cfg.Refused()},
		Writes:       store,
		Deliveries:   disp,
		Tokens:       tokens,
		Authenticate: cfg.authenticate,
		Ready:        store.Ping,
		Replication:  repl.latest,
		TTL:          cfg.TTL,
		Lease:        cfg.Lease,
		Workshop:     cfg.Workshop,
		Decorate:     workshop.Off,
		Metrics:      m,
		Path:         idempotency.Path(cfg.path),

		NewKeysPerSecond: cfg.newKeysPerSecond,
		NewKeysBurst:     cfg.newKeysBurst,
	}
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() { stopSweep(); wg.Wait() }()
	if cfg.Workshop {
		deps.Decorate = workshop.Knobs(cfg.Lease / 2) // the work's budget
	}
	more := &Serving{Config: cfg, Logger: logger, Store: store, Chores: chores, Metrics: m, Desk: disp.Desk, Stdout: stdout, Deps: &deps,
		Chore: func(f func(context.Context)) { wg.Go(func() { f(sweepCtx) }) }}
	if ext.Serve != nil {
		if err := ext.Serve(ctx, more); err != nil {
			return err
		}
	}
	handler, err := httpapi.NewServer(deps)
	if err != nil {
		return err
	}
	ln, err := Listen(cfg.listenAddr, "LISTEN_ADDR")
	if err != nil {
		return err
	}
	srv := serving.NewServer(handler, logger, cfg.readTimeout)
	wg.Go(func() { sweep(sweepCtx, logger, chores, cfg.sweepInterval, cfg.sweepBatch, m.Swept) })
	wg.Go(func() { Every(sweepCtx, replicationEvery, func() { repl.check(sweepCtx) }) })
	if disp.Desk != nil && cfg.dispatch {
		wg.Go(func() { disp.Run(sweepCtx) })
	}

	logger.Info("serving", "addr", ln.Addr().String(), "workshop", cfg.Workshop, "actors", len(tokens),
		"ttl", cfg.TTL, "lease", cfg.Lease, "path", cfg.path, "unprepared", store.Unprepared,
		"new_keys_per_second", cfg.newKeysPerSecond, "new_keys_burst", cfg.newKeysBurst,
		"provider", cfg.ProviderURL, "dispatch", disp.Desk != nil && cfg.dispatch)
	if cfg.Workshop && !Loopback(ln.Addr()) {
		logger.Warn("workshop knobs are on and the server listens beyond this machine: "+
			"anyone who reaches it may hold, fail or drop requests; listen on 127.0.0.1 unless that is meant",
			"addr", ln.Addr().String())
	}
	fmt.Fprintf(stdout, "demo-api listening on http://%s\n", ln.Addr())
	if more.Listening != nil {
		more.Listening(ln.Addr().(*net.TCPAddr))
	}

	return serving.Serve(ctx, logger, srv, ln, cfg.shutdownTimeout)
}

// startWait is how long a start waits for a database that does not answer
// yet; one that refuses (a wrong password) ends it at once.
const startWait = 30 * time.Second

// openStore opens cfg's database, trying again each second for startWait;
// with migrate, it brings the schema up to date.
func openStore(ctx context.Context, cfg Config, logger *slog.Logger, statementTimeout time.Duration, migrate *Extension) (*postgres.Store, error) {
	db, err := cfg.openDB(ctx, statementTimeout)
	for deadline := time.Now().Add(startWait); err != nil && postgres.Unavailable(err) && time.Now().Before(deadline); {
		logger.Warn("the database does not answer yet; trying again", "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
		db, err = cfg.openDB(ctx, statementTimeout)
	}
	if err != nil {
		return nil, err
	}
	if migrate != nil {
		d, err := migrateUp(ctx, db, migrate.Migrations)
		if err != nil {
			db.Close()
			return nil, migrateHint(err)
		}
		if d.Citus != "" {
			logger.Info("migrate: " + d.String())
		}
	}
	return postgres.New(db), nil
}

// openDB opens cfg's database with statements bounded by statementTimeout.
func (c Config) openDB(ctx context.Context, statementTimeout time.Duration) (*sqlx.DB, error) {
	return postgres.OpenWith(ctx, c.databaseURL, postgres.Options{StatementTimeout: statementTimeout, Pooled: c.unprepared})
}

// migrateHint says what to do when migrations cannot run through a pooler.
func migrateHint(err error) error {
	if errors.Is(err, postgres.ErrMigrateNeedsDirectURL) {
		return fmt.Errorf("%w: run demo-api migrate with DATABASE_URL set to PostgreSQL itself", err)
	}
	return err
}

// Loopback reports whether addr can be reached only from this machine.
func Loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
