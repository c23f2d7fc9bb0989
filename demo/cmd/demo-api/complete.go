package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/runs"
	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/service"
)

// completeBatch is how many abandoned runs one round of the completer takes.
const completeBatch = 16

// completer returns the Runner and the operations of several steps with
// which serve and dispatch drive abandoned runs forward (complete).
func completer(cfg service.Config, store *expedite.Store, svc *demo.Service, desk expedite.ExpediteDesk, observe func(string, idempotency.Path, idempotency.Outcome)) (*steps.Runner, []*steps.Steps, error) {
	r, err := steps.NewRunner(idempotency.Config{TTL: cfg.TTL, Lease: cfg.Lease, Observe: observe}, store)
	if err != nil {
		return nil, nil, err
	}
	ops := []*steps.Steps{expedite.Steps(svc, store, desk)}
	for _, op := range ops {
		if err := op.Check(); err != nil {
			return nil, nil, err
		}
	}
	return r, ops, nil
}

// complete runs the completer every interval until ctx ends: each round
// takes over runs whose runner died or parked them (their lease passed) and
// continues them from their recovery point, so that a client that gave up
// finds a settled answer on the outcome route. Every replica may run it:
// each run is taken by one (FOR UPDATE SKIP LOCKED).
func complete(ctx context.Context, logger *slog.Logger, r *steps.Runner, ops []*steps.Steps, interval time.Duration) {
	every(ctx, interval, func() {
		for ctx.Err() == nil {
			n, err := r.CompleteAbandoned(ctx, ops, completeBatch)
			if err != nil {
				if ctx.Err() == nil {
					logger.Error("complete abandoned runs", "err", err)
				}
				return
			}
			if n > 0 {
				logger.Info("continued abandoned runs", "runs", n)
			}
			if n < completeBatch {
				return
			}
		}
	})
}

// resumeRunCmd is demo-api resume-run: an operator's resume of a run that
// needs attention, once its cause is dealt with (docs/steps.md). The
// completer of a running serve or dispatch then continues it.
func resumeRunCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-api resume-run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	actor := fs.String("actor", "", "the run's actor")
	operation := fs.String("operation", expedite.ExpediteOperation, "the run's operation")
	key := fs.String("key", "", "the run's Idempotency-Key")
	dbURL := fs.String("database-url", "", "PostgreSQL URL ($DATABASE_URL)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if *dbURL == "" {
		*dbURL = getenv("DATABASE_URL")
	}
	switch {
	case *dbURL == "":
		return errors.New("set DATABASE_URL (or -database-url) to a PostgreSQL URL")
	case *actor == "" || *key == "":
		return errors.New("name the run: --actor and --key (and --operation, default " + expedite.ExpediteOperation + ")")
	}
	db, err := postgres.Open(ctx, *dbURL, postgres.KeyStatements)
	if err != nil {
		return err
	}
	defer db.Close()
	ok, err := runs.New(postgres.New(db)).ResumeRun(ctx, idempotency.Scope{Actor: *actor, Operation: *operation, Key: *key})
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("no run of %s under that key needs attention", *operation)
	}
	fmt.Fprintln(stdout, "resumed: the completer continues it from its recovery point")
	return nil
}

// every runs chore every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, chore func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			chore()
		}
	}
}
