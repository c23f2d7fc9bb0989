package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/demo-api/demo-api/internal/postgres"
)

// purger deletes expired idempotency records in batches.
type purger interface {
	PurgeExpired(ctx context.Context, batch int) (int64, error)
}

// purgeAll deletes expired records batch by batch until none is left, so no
// statement holds many locks or runs long.
func purgeAll(ctx context.Context, p purger, batch int) (int64, error) {
	var total int64
	for {
		n, err := p.PurgeExpired(ctx, batch)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}

// sweep runs purgeAll every interval until ctx ends, and tells swept how
// many records it deleted.
func sweep(ctx context.Context, logger *slog.Logger, p purger, interval time.Duration, batch int, swept func(int64)) {
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

// every runs chore every interval until ctx ends: the loop of serve's and
// dispatch's background chores.
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

func purgeCmd(ctx context.Context, cfg config, stdout io.Writer) error {
	db, err := cfg.openDB(ctx, postgres.LongStatements)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := purgeAll(ctx, postgres.New(db), cfg.sweepBatch)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %d expired idempotency records\n", n)
	return nil
}

func migrateCmd(ctx context.Context, cfg config, direction string, stdout io.Writer) error {
	db, err := cfg.openDB(ctx, postgres.LongStatements)
	if err != nil {
		return err
	}
	defer db.Close()
	steps := 0
	if direction == "down" {
		steps = -1
	}
	if err := postgres.Migrate(db, steps); err != nil {
		if errors.Is(err, postgres.ErrMigrateNeedsDirectURL) {
			return fmt.Errorf("%w: set DATABASE_URL to PostgreSQL itself for demo-api migrate", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "migrate %s: done\n", direction)
	return nil
}
