package postgres

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/migrations"
)

// Distribution is what Distribute found and did.
type Distribution struct {
	Citus       string // the version of the citus extension; empty on one PostgreSQL
	Distributed bool   // this call distributed the tables (they were not yet)
}

// Distribute, on a Citus coordinator, distributes the tables by actor_id unless
// they are already, and makes the store's functions; on one PostgreSQL it does nothing.
// Every start of serve runs it: each step holds the lock of citusTx, so
// replicas that start together wait for each other.
func Distribute(ctx context.Context, db *sqlx.DB) (d Distribution, err error) {
	err = db.GetContext(ctx, &d.Citus, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`)
	if errors.Is(err, sql.ErrNoRows) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("distribute: %w", dbErr(err))
	}
	// Each its own transaction: Citus makes no function in the one that distributes the tables.
	err = citusTx(ctx, db, func(tx *sqlx.Tx) error {
		var done bool
		err := tx.GetContext(ctx, &done,
			`SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'idempotency_keys'::regclass)`)
		if err == nil && !done {
			err = runCitusScript(ctx, tx, "citus/distribute.sql")
			d.Distributed = true
		}
		return err
	})
	if err == nil {
		err = citusTx(ctx, db, func(tx *sqlx.Tx) error { return runCitusScript(ctx, tx, "citus/scans.sql") })
	}
	if err == nil {
		err = citusTx(ctx, db, func(tx *sqlx.Tx) error { return delegateKeyWrites(ctx, tx) })
	}
	if err != nil {
		return d, fmt.Errorf("distribute on Citus %s: %w", d.Citus, err)
	}
	return d, nil
}

// citusTx runs fn in a transaction that holds the lock of the store's
// changes to a Citus schema: two starts that make the same function at once
// would otherwise fail ("tuple concurrently updated").
func citusTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return dbErr(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('demo-api: the store on Citus'))`); err != nil {
		return dbErr(err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return dbErr(tx.Commit())
}

// runCitusScript runs migrations/name in tx, as one simple query.
func runCitusScript(ctx context.Context, tx *sqlx.Tx, name string) error {
	script, err := fs.ReadFile(migrations.Citus, name)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, string(script))
	return dbErr(err)
}

// delegateKeyWrites distributes each function of the schema that returns
// key_write (write_key, and every operation's) and is not yet: by the actor,
// its second argument, and co-located with the keys. Citus then delegates
// its call to the worker that holds the actor's shard, also inside a
// transaction a service's own store opens (force_delegation), and there each
// statement of the function is a router statement on the local shard: one
// round trip from the coordinator. Citus routes no statement that inserts
// in a CTE to one shard, so the operations are functions, not statements.
//
// Each function is first given two settings (one that has them not yet,
// and was delegated before, gets them too). The schema it was made in: a
// worker's session has its own search_path (the migrations' functions carry
// none: on one PostgreSQL they run in the caller's, which saves a setting
// and its undo on every call). And custom plans: on a worker Citus 14 plans
// a generic plan's statement for the local shard at every execution, and
// keeps each of those plans with the generic one until the session ends (its
// cache lookup never finds them), so a worker's session grows with every
// call; a custom plan runs once, and Citus keeps no local plan of a plan
// that has not run before.
func delegateKeyWrites(ctx context.Context, tx *sqlx.Tx) error {
	var schema string
	var fns []struct {
		Fn        string `db:"fn"`
		Delegated bool   `db:"delegated"`
	}
	err := tx.GetContext(ctx, &schema, `SELECT quote_ident(current_schema())`)
	if err == nil {
		err = tx.SelectContext(ctx, &fns, `SELECT fn, delegated FROM (
		    SELECT p.oid::regprocedure::text AS fn, p.proname, coalesce(p.proconfig, '{}') AS config,
		        EXISTS (SELECT FROM pg_dist_object d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
		                AND d.distribution_argument_index IS NOT NULL) AS delegated
		    FROM pg_proc p
		    WHERE p.prorettype = to_regtype('key_write') AND p.pronamespace = current_schema()::regnamespace) f
		WHERE NOT delegated OR NOT config @> '{plan_cache_mode=force_custom_plan}'
		ORDER BY proname <> 'write_key', fn`)
	}
	for _, f := range fns {
		if err != nil {
			break
		}
		_, err = tx.ExecContext(ctx, `ALTER FUNCTION `+f.Fn+` SET search_path TO `+schema+` SET plan_cache_mode = force_custom_plan`)
		if err == nil && !f.Delegated {
			_, err = tx.ExecContext(ctx, `SELECT create_distributed_function($1, '$2', colocate_with => 'idempotency_keys', force_delegation => true)`, f.Fn)
		}
	}
	return dbErr(err)
}

// String says what d is, for migrate's log.
func (d Distribution) String() string {
	switch {
	case d.Citus == "":
		return "one PostgreSQL (no citus extension): nothing to distribute"
	case d.Distributed:
		return "Citus " + d.Citus + ": idempotency_keys, demo_requests and outbox distributed by actor_id, co-located; the key writes delegated to the actor's worker, the scans to each shard's"
	default:
		return "Citus " + d.Citus + ": idempotency_keys, demo_requests and outbox already distributed by actor_id"
	}
}

// NewCitus returns the Store on a Citus coordinator at db whose tables
// Distribute distributed: New's, whose scans run on each shard.
func NewCitus(db *sqlx.DB) *Store {
	s := New(db)
	s.scans = new(citusScans)
	return s
}

// NewFor returns the Store for the database at db: NewCitus on a Citus
// coordinator whose key table is distributed, New elsewhere.
func NewFor(ctx context.Context, db *sqlx.DB) (*Store, error) {
	var distributed bool
	err := db.GetContext(ctx, &distributed, `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
		AND to_regproc('outbox_take_due_on_shard') IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("read the database's engine: %w", dbErr(err))
	}
	if distributed {
		return NewCitus(db), nil
	}
	return New(db), nil
}

// The scans on Citus: the call of a function of migrations/citus/scans.sql
// for one shard, given an actor whose rows the shard holds, then the
// arguments of the statement of one PostgreSQL.
var (
	//go:embed citus/shard_ids.sql
	shardIDsSQL string
	//go:embed citus/shards.sql
	shardsSQL string
	//go:embed citus/outbox_take_due_on_shard.sql
	takeDueOnShard string
	//go:embed citus/outbox_settle_on_shard.sql
	settleOnShard string
	//go:embed citus/purge_expired_keys_on_shard.sql
	purgeOnShard string
	//go:embed citus/shard_of_actor.sql
	shardOfActorSQL string
)

// citusScans runs each scan once per shard of the key table (and of the
// tables co-located with it). It reads the shards at each scan, so a shard
// split or a move needs no restart: Citus routes each call to where the
// shard is now.
type citusScans struct {
	mu    sync.Mutex
	known shardList     // the shards last read, with an actor of each
	next  atomic.Uint32 // turns the shard a take starts with
}

// shardList is the key table's shards, in the order of their hash ranges, with an actor of each.
type shardList struct {
	ids    []int64
	actors []string
}

// shards returns the key table's shards now; it looks for their actors only when they changed.
func (c *citusScans) shards(ctx context.Context, s *Store) (shardList, error) {
	var ids []int64
	if err := s.db.SelectContext(ctx, &ids, shardIDsSQL); err != nil {
		return shardList{}, fmt.Errorf("read the shards: %w", dbErr(err))
	}
	if len(ids) == 0 {
		return shardList{}, errors.New("read the shards: idempotency_keys has none (migrate up distributes it)")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Equal(ids, c.known.ids) {
		return c.known, nil
	}
	var rows []struct {
		Shard int64          `db:"shardid"`
		Actor sql.NullString `db:"actor"`
	}
	if err := s.db.SelectContext(ctx, &rows, shardsSQL); err != nil {
		return shardList{}, fmt.Errorf("find the shards' actors: %w", dbErr(err))
	}
	l := shardList{ids: make([]int64, len(rows)), actors: make([]string, len(rows))}
	for i, r := range rows {
		if !r.Actor.Valid {
			return shardList{}, fmt.Errorf("find the shards' actors: none found for shard %d", r.Shard)
		}
		l.ids[i], l.actors[i] = r.Shard, r.Actor.String
	}
	c.known = l
	return l, nil
}

// takeDue takes from the shards in turn, each take starting at the next, until it has
// n rows. A failed shard's error counts only when none gave rows: a partial batch is
// still progress.
func (c *citusScans) takeDue(ctx context.Context, s *Store, token string, n int, lease time.Duration, busy []string) ([]delivery.Due, error) {
	l, err := c.shards(ctx, s)
	if err != nil {
		return nil, err
	}
	var due []delivery.Due
	var failed error
	first := int(c.next.Add(1) % uint32(len(l.actors)))
	for i := 0; i < len(l.actors) && len(due) < n; i++ {
		actor := l.actors[(first+i)%len(l.actors)]
		var part []delivery.Due
		args := append([]any{actor}, s.takeArgs(token, n-len(due), lease, busy)...)
		if err := s.db.SelectContext(ctx, &part, takeDueOnShard, args...); err != nil {
			failed = cmp.Or(failed, err)
			continue
		}
		due = append(due, part...)
	}
	if len(due) == 0 && failed != nil {
		return nil, dbErr(failed)
	}
	return due, nil
}

// settle records each shard's marks on that shard.
func (c *citusScans) settle(ctx context.Context, s *Store, marks []delivery.Mark) (int, error) {
	actors := make([]string, len(marks))
	for i, m := range marks {
		actors[i] = m.Actor
	}
	var shards []int64
	if err := s.db.SelectContext(ctx, &shards, shardOfActorSQL, pq.Array(actors)); err != nil {
		return 0, dbErr(err)
	}
	var order []int64
	of := map[int64][]delivery.Mark{}
	for i, shard := range shards {
		if of[shard] == nil {
			order = append(order, shard)
		}
		of[shard] = append(of[shard], marks[i])
	}
	settled := 0
	var failed error
	for _, shard := range order {
		var n int
		err := s.db.GetContext(ctx, &n, settleOnShard, append([]any{of[shard][0].Actor}, s.settleArgs(of[shard])...)...)
		settled += n
		failed = cmp.Or(failed, dbErr(err))
	}
	return settled, failed
}

// purgeExpired sweeps the shards in the order of their hash ranges: a batch
// on the shard of the mark's key, then, while batches come back short, on
// the next shards. A shard split in a sweep may leave a part of it to the
// next sweep.
func (c *citusScans) purgeExpired(ctx context.Context, s *Store, batch int, mark SweepMark) (int64, *SweepMark, error) {
	l, err := c.shards(ctx, s)
	if err != nil {
		return 0, nil, err
	}
	start := 0
	if mark.scope.Actor != "" {
		var shards []int64
		if err := s.db.SelectContext(ctx, &shards, shardOfActorSQL, pq.Array([]string{mark.scope.Actor})); err != nil {
			return 0, nil, dbErr(err)
		}
		if start = slices.Index(l.ids, shards[0]); start < 0 { // split since: the sweep starts again
			start, mark = 0, SweepMark{}
		}
	}
	var deleted int64
	rest := batch
	for i := start; i < len(l.actors); i++ {
		args := append([]any{l.actors[i]}, s.purgeArgs(rest, mark)...)
		n, candidates, last, err := scanPurge(s.db.QueryRowContext(ctx, purgeOnShard, args...))
		deleted += n
		if err != nil {
			return deleted, nil, err
		}
		if candidates >= rest { // a full batch: more may be expired after it
			return deleted, &last, nil
		}
		rest -= candidates
		mark = SweepMark{}
	}
	return deleted, nil, nil
}
