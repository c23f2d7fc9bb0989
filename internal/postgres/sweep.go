package postgres

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/demo-api/demo-api/internal/idempotency"
)

//go:embed sql/purge_expired_keys.sql
var purgeExpiredKeysSQL string

// SweepMark is where a sweep has got to: the last key it picked; zero is the start.
type SweepMark struct {
	expiresAt time.Time
	scope     idempotency.Scope
}

// Expiry: a completed key is replayed for its TTL and then deleted, after which the
// same key is a new intent. A claim is deleted only once both its TTL and its lease
// have passed: nothing committed under it (a finish needs its claim), so it was
// abandoned. The sweep walks the expired rows in one order (expires_at, then the
// scope), a batch a statement, each batch starting after the last row of the one
// before (the mark): a row a trigger keeps is passed over once, not met again by
// every batch, and the walk ends when a batch comes back short.

// PurgeExpired deletes up to batch expired records after mark (sql/purge_expired_keys.sql),
// and returns how many and the next batch's mark: nil when the sweep is done.
func (s *Store) PurgeExpired(ctx context.Context, batch int, mark SweepMark) (deleted int64, next *SweepMark, err error) {
	deleted, next, err = s.scans.purgeExpired(ctx, s, batch, mark)
	if err != nil {
		return deleted, nil, fmt.Errorf("purge expired keys: %w", err)
	}
	return deleted, next, nil
}

func (onePostgres) purgeExpired(ctx context.Context, s *Store, batch int, mark SweepMark) (int64, *SweepMark, error) {
	deleted, candidates, last, err := scanPurge(s.db.QueryRowContext(ctx, purgeExpiredKeysSQL, s.purgeArgs(batch, mark)...))
	if err != nil || candidates < batch { // a short batch: nothing expired after it
		return deleted, nil, err
	}
	return deleted, &last, nil
}

// purgeArgs are a purge's arguments, in its statement's order.
func (s *Store) purgeArgs(batch int, mark SweepMark) []any {
	after := sql.NullTime{Time: mark.expiresAt, Valid: !mark.expiresAt.IsZero()} // NULL: from the start
	return []any{s.now(), after, mark.scope.Actor, mark.scope.Operation, mark.scope.Key, batch}
}

// scanPurge reads a purge's row: how many it deleted and picked, and the last it picked.
func scanPurge(row *sql.Row) (deleted int64, candidates int, last SweepMark, err error) {
	err = row.Scan(&deleted, &candidates, &last.expiresAt, &last.scope.Actor, &last.scope.Operation, &last.scope.Key)
	if errors.Is(err, sql.ErrNoRows) { // nothing expired
		return 0, 0, SweepMark{}, nil
	}
	if err != nil {
		return 0, 0, SweepMark{}, dbErr(err)
	}
	return deleted, candidates, last, nil
}
