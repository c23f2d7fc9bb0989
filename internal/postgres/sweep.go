package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/demo-api/demo-api/internal/idempotency"
)

var purgeExpiredKeys = scanOf("purge_expired_keys.sql")

// SweepMark is where a sweep has got to (the last key picked, the shard); zero is the start.
type SweepMark struct {
	shard     int
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
	ts, err := s.targets(ctx, purgeExpiredKeys)
	if err != nil {
		return 0, nil, fmt.Errorf("purge expired keys: %w", err)
	}
	rest := batch
	for i := mark.shard; i < len(ts); i++ {
		n, candidates, last, err := s.purgeOn(ctx, ts[i], rest, mark)
		if err != nil {
			return deleted, nil, fmt.Errorf("purge expired keys: %w", err)
		}
		deleted += n
		if candidates >= rest { // a full batch: more may be expired after it
			last.shard = i
			return deleted, &last, nil
		}
		rest -= candidates
		mark = SweepMark{}
	}
	return deleted, nil, nil
}

// purgeOn purges up to batch keys after mark on t: how many it deleted and picked, and the last.
func (s *Store) purgeOn(ctx context.Context, t target, batch int, mark SweepMark) (deleted int64, candidates int, last SweepMark, err error) {
	after := sql.NullTime{Time: mark.expiresAt, Valid: !mark.expiresAt.IsZero()} // NULL: from the start
	err = s.db.QueryRowContext(ctx, t.query, t.with(s.now(),
		after, mark.scope.Actor, mark.scope.Operation, mark.scope.Key, batch)...).Scan(
		&deleted, &candidates, &last.expiresAt, &last.scope.Actor, &last.scope.Operation, &last.scope.Key)
	if errors.Is(err, sql.ErrNoRows) { // nothing expired
		return 0, 0, SweepMark{}, nil
	}
	if err != nil {
		return 0, 0, SweepMark{}, dbErr(err)
	}
	return deleted, candidates, last, nil
}
