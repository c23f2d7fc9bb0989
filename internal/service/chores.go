package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/postgres"
)

// purgeAll deletes expired records in batches, each after the last record
// the one before picked (deleted or not), until a batch finds fewer.
func purgeAll(ctx context.Context, p *postgres.Store, batch int) (int64, error) {
	var total int64
	var mark postgres.SweepMark
	for {
		n, next, err := p.PurgeExpired(ctx, batch, mark)
		total += n
		if err != nil || next == nil {
			return total, err
		}
		mark = *next
	}
}

// sweep runs purgeAll every interval until ctx ends.
func sweep(ctx context.Context, logger *slog.Logger, p *postgres.Store, interval time.Duration, batch int, swept func(int64)) {
	every(ctx, interval, func() {
		n, err := purgeAll(ctx, p, batch)
		swept(n)
		if err != nil && ctx.Err() == nil {
			logger.Error("sweep expired keys", "err", err, "deleted", n)
		} else if n > 0 {
			logger.Info("swept expired keys", "deleted", n)
		}
	})
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

// Purge is demo-api purge-expired: it deletes the expired records of cfg's
// database, then says how many.
func Purge(ctx context.Context, cfg Config, stdout io.Writer) error {
	db, err := cfg.OpenDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := postgres.NewFor(ctx, db)
	if err != nil {
		return err
	}
	n, err := purgeAll(ctx, store, cfg.sweepBatch)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %d expired idempotency records\n", n)
	return nil
}

// Migrate is demo-api migrate on db: up applies every migration of the
// template and distributes the schema on Citus; down rolls back the last.
func Migrate(ctx context.Context, db *sqlx.DB, direction string, stdout io.Writer) error {
	var err error
	if direction == "down" {
		err = postgres.Migrate(db, -1)
	} else {
		var d postgres.Distribution
		if d, err = migrateUp(ctx, db); err == nil && d.Citus != "" {
			fmt.Fprintf(stdout, "migrate up: %s\n", d)
		}
	}
	return migrateHint(err)
}

// migrateUp applies the template's migrations and distributes the schema
// on Citus.
func migrateUp(ctx context.Context, db *sqlx.DB) (postgres.Distribution, error) {
	if err := postgres.Migrate(db, 0); err != nil {
		return postgres.Distribution{}, err
	}
	return postgres.Distribute(ctx, db)
}

// replicationEvery is how often serve reads how its commits replicate.
const replicationEvery = 30 * time.Second

// replicationWatch keeps the last reading of how the database replicates
// commits (for /readyz), logs it when it changes, and sets the gauge.
type replicationWatch struct {
	logger *slog.Logger
	read   func(context.Context) (postgres.Replication, error)
	gauge  func(waits bool)
	last   atomic.Pointer[postgres.Replication]
}

// latest is the last reading, nil before the first.
func (w *replicationWatch) latest() any {
	if r := w.last.Load(); r != nil {
		return r
	}
	return nil
}

// check reads once, and logs a reading that is new.
func (w *replicationWatch) check(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := w.read(rctx)
	if err != nil {
		w.logger.Warn("read replication settings", "err", err)
		return
	}
	if prev := w.last.Swap(&r); prev == nil || *prev != r {
		level := slog.LevelInfo
		if r.AtRisk() || r.WritesHeld() != "" {
			level = slog.LevelWarn
		}
		w.logger.Log(ctx, level, "replication: "+r.Describe(), "synchronous_commit", r.SynchronousCommit,
			"synchronous_standby_names", r.StandbyNames, "synchronous_standbys_attached", r.Attached)
	}
	w.gauge(r.CommitWaits)
}
