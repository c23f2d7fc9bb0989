package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/serving"
	"github.com/demo-api/demo-api/internal/tracing"
	"github.com/demo-api/demo-api/internal/workshop"
)

// App is what serve and dispatch run on, opened from their Config: the
// log, the stores on a schema brought up to date, the metrics and the
// dispatcher. Chores run beside the command until Close.
type App struct {
	Config     Config
	Logger     *slog.Logger
	Store      *postgres.Store // the requests' pool
	Chores     *postgres.Store // the pool of the chores' batches (the long statement bound); dispatch's only one
	Metrics    *metrics.Metrics
	Dispatcher *delivery.Dispatcher // its Desk is nil without PROVIDER_URL

	repl        *replicationWatch
	stopTracing func(context.Context) error
	choresCtx   context.Context
	stopChores  context.CancelFunc
	wg          sync.WaitGroup
}

// Open opens what cfg's command runs on: serve has a pool for the requests
// and one for the chores, dispatch one for its batches. It brings the
// template's schema up to date; a main with a schema of its own migrates it
// after. The caller closes the App.
func Open(ctx context.Context, cfg Config, stderr io.Writer) (_ *App, err error) {
	a := &App{Config: cfg, Logger: newLogger(cfg.logFormat, stderr)}
	if cfg.cmd == "dispatch" {
		a.Logger = a.Logger.With("service", "dispatcher")
	}
	a.choresCtx, a.stopChores = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if a.stopTracing, err = tracing.Setup(ctx, cfg.tracing, a.Logger); err != nil {
		return nil, err
	}
	requests := postgres.KeyStatements
	if cfg.cmd == "dispatch" {
		requests = postgres.LongStatements
	}
	if a.Store, err = openStore(ctx, cfg, a.Logger, requests, true); err != nil {
		return nil, err
	}
	a.Chores = a.Store
	if cfg.cmd == "serve" {
		if a.Chores, err = openStore(ctx, cfg, a.Logger, postgres.LongStatements, false); err != nil {
			return nil, err
		}
	}
	a.Metrics = metrics.New(a.Store, a.Logger)
	a.Dispatcher = dispatcher(cfg, a.Chores, a.Logger, a.Metrics.Outbox(a.Store, a.Logger))
	a.repl = &replicationWatch{logger: a.Logger, read: a.Store.Replication, gauge: a.Metrics.CommitWaits}
	return a, nil
}

// Go runs chore beside the command until Close; its ctx ends then.
func (a *App) Go(chore func(ctx context.Context)) {
	a.wg.Go(func() { chore(a.choresCtx) })
}

// Close stops the chores, waits for them, and closes the pools and the
// tracing.
func (a *App) Close() {
	a.stopChores()
	a.wg.Wait()
	if a.Chores != nil && a.Chores != a.Store {
		a.Chores.DB().Close()
	}
	if a.Store != nil {
		a.Store.DB().Close()
	}
	if a.stopTracing != nil {
		_ = a.stopTracing(context.WithoutCancel(a.choresCtx))
	}
}

// Deps are the API's parts on the App: the operations decided by svc and
// written by the App's store, with tokens as the actors' bearer tokens.
func (a *App) Deps(svc httpapi.DemoRequests, tokens auth.Tokens) httpapi.Deps {
	cfg := a.Config
	d := httpapi.Deps{
		Logger:      a.Logger,
		Keys:        a.Store.Watched(), // behind the pool's watch of a silent database
		Demo:        svc,
		Writes:      a.Store,
		Deliveries:  a.Dispatcher,
		Tokens:      tokens,
		Ready:       a.Store.Ping,
		Replication: a.repl.latest,
		TTL:         cfg.TTL,
		Lease:       cfg.Lease,
		Workshop:    cfg.Workshop,
		Decorate:    workshop.Off,
		Metrics:     a.Metrics,
		Path:        idempotency.Path(cfg.path),

		NewKeysPerSecond: cfg.newKeysPerSecond,
		NewKeysBurst:     cfg.newKeysBurst,
	}
	if cfg.Workshop {
		d.Decorate = workshop.Knobs(cfg.Lease / 2) // the work's budget
	}
	return d
}

// Serve serves handler on ln until ctx ends, then stops gracefully. Beside
// it run serve's chores: the sweeper, the watch of how commits replicate
// (said at start), and the dispatcher when there is a desk and DISPATCH
// allows.
func (a *App) Serve(ctx context.Context, ln net.Listener, handler http.Handler) error {
	cfg, logger := a.Config, a.Logger
	a.repl.check(ctx) // says at start whether a commit waits for a synchronous standby
	a.Go(func(ctx context.Context) {
		sweep(ctx, logger, a.Chores, cfg.sweepInterval, cfg.sweepBatch, a.Metrics.Swept)
	})
	a.Go(func(ctx context.Context) { every(ctx, replicationEvery, func() { a.repl.check(ctx) }) })
	dispatching := a.Dispatcher.Desk != nil && cfg.dispatch
	if dispatching {
		a.Go(a.Dispatcher.Run)
	}
	logger.Info("serving", "addr", ln.Addr().String(), "workshop", cfg.Workshop,
		"ttl", cfg.TTL, "lease", cfg.Lease, "path", cfg.path, "unprepared", !a.Store.Prepared(),
		"new_keys_per_second", cfg.newKeysPerSecond, "new_keys_burst", cfg.newKeysBurst,
		"provider", cfg.ProviderURL, "dispatch", dispatching)
	if cfg.Workshop && !loopback(ln.Addr()) {
		logger.Warn("workshop knobs are on and the server listens beyond this machine: "+
			"anyone who reaches it may hold, fail or drop requests; listen on 127.0.0.1 unless that is meant",
			"addr", ln.Addr().String())
	}
	return serving.Serve(ctx, logger, serving.NewServer(handler, logger, cfg.readTimeout), ln, cfg.shutdownTimeout)
}

// startWait is how long a start waits for a database that does not answer
// yet; one that refuses (a wrong password) ends it at once.
const startWait = 30 * time.Second

// openStore opens cfg's database, trying again each second for startWait;
// with migrate, it brings the template's schema up to date.
func openStore(ctx context.Context, cfg Config, logger *slog.Logger, statementTimeout time.Duration, migrate bool) (*postgres.Store, error) {
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
	if migrate {
		d, err := migrateUp(ctx, db)
		if err != nil {
			db.Close()
			return nil, migrateHint(err)
		}
		if d.Citus != "" {
			logger.Info("migrate: " + d.String())
		}
	}
	store, err := postgres.NewFor(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return store, nil
}

// OpenDB opens cfg's database for a command's batches (the long statement
// bound), without waiting for it.
func (c Config) OpenDB(ctx context.Context) (*sqlx.DB, error) {
	return c.openDB(ctx, postgres.LongStatements)
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

// loopback reports whether addr can be reached only from this machine.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
