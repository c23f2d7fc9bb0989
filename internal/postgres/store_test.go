package postgres_test

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
	"github.com/demo-api/demo-api/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

// openDB opens a fresh migrated database the way the service does.
func openDB(t *testing.T) *sqlx.DB {
	db, err := postgres.Open(context.Background(), pgtest.NewURL(t), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newStore(t *testing.T) (*postgres.Store, *sqlx.DB, *testenv.Clock) {
	t.Parallel()
	db := openDB(t)
	s := pgtest.NewStore(db)
	c := testenv.NewClock()
	s.Clock = c.Now
	return s, db, c
}

// warmPool opens every connection of db's pool, so that a race starts with
// none to open. On Citus each also opens its connections to the workers,
// which its first statement there does otherwise: under load, seconds.
func warmPool(t *testing.T, db *sqlx.DB) {
	n := db.Stats().MaxOpenConnections
	testenv.WarmPool(t, db, n)
	if !pgtest.Citus() {
		return
	}
	conns := make([]*sqlx.Conn, n)
	for i := range conns {
		c, err := db.Connx(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	for _, c := range conns {
		if _, err := c.ExecContext(context.Background(), `SELECT count(*) FROM idempotency_keys`); err != nil {
			t.Fatal(err)
		}
	}
}

func count(t *testing.T, db *sqlx.DB, query string, args ...any) int {
	t.Helper()
	return testenv.Count(t, db, query, args...)
}

func claim(t *testing.T, s *postgres.Store, sc idempotency.Scope, fp string) (idempotency.KeyWrite, idempotency.Claim) {
	t.Helper()
	c := idempotency.Claim{Scope: sc, Token: uuid.NewString()}
	cr, err := s.Claim(context.Background(), idempotency.Claim{Scope: sc, Token: c.Token}, fp, lease, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return cr, c
}

func newRequest(actor, topic string) demo.Request {
	return demo.Request{ID: uuid.NewString(), Actor: actor, State: demo.StateAccepted, Topic: topic,
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
}

func created(s *postgres.Store, r demo.Request) idempotency.Answer {
	resp := idempotency.Response{Status: 201, Header: map[string]string{"Location": "/v1/demo-requests/" + r.ID}, Body: []byte(`{"requestId":"` + r.ID + `"}`), ResultID: r.ID}
	return idempotency.Answer{Response: resp, Effect: s.CreateDemoRequest(r)}
}

func refused() idempotency.Answer {
	return idempotency.Answer{Response: idempotency.Response{Status: 422, Body: []byte("{}")}}
}

func create(ctx context.Context, s *postgres.Store, c idempotency.Claim, topic string) (demo.Request, error) {
	r := newRequest(c.Scope.Actor, topic)
	return r, s.FinishClaimAtomically(ctx, c, created(s, r))
}

func TestStoreScenarios(t *testing.T) {
	ctx := context.Background()
	sc := idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-1"}

	t.Run("claim, then replay what the finish stored", func(t *testing.T) {
		s, db, _ := newStore(t)
		cr, c := claim(t, s, sc, "fp")
		if !cr.Wrote || cr.Prev != nil {
			t.Fatalf("first claim = %+v, want claimed with no previous row", cr)
		}
		again, _ := claim(t, s, sc, "fp")
		if again.Wrote || idempotency.Decide(again.Prev, "fp", again.Now).Kind != idempotency.InProgress {
			t.Fatalf("second claim while in progress = %+v, want busy", again)
		}
		r, err := create(ctx, s, c, "t")
		if err != nil {
			t.Fatal(err)
		}
		replay, _ := claim(t, s, sc, "fp")
		if replay.Wrote || idempotency.Decide(replay.Prev, "fp", replay.Now).Kind != idempotency.Replay {
			t.Fatalf("claim after finish = %+v, want replay", replay)
		}
		if got := replay.Prev.Response; got.Status != 201 || got.ResultID != r.ID || string(got.Body) != `{"requestId":"`+r.ID+`"}` ||
			got.Header["Location"] != "/v1/demo-requests/"+r.ID {
			t.Fatalf("stored response = %+v", got)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests`); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
	})

	t.Run("other actors and operations have their own keys", func(t *testing.T) {
		s, _, _ := newStore(t)
		for _, other := range []idempotency.Scope{sc, {Actor: "bob", Operation: sc.Operation, Key: sc.Key}, {Actor: sc.Actor, Operation: "other.op", Key: sc.Key}} {
			if cr, _ := claim(t, s, other, "fp"); !cr.Wrote {
				t.Fatalf("claim of %+v not claimed", other)
			}
		}
	})

	t.Run("finish with a stale claim token rolls the business row back", func(t *testing.T) {
		s, db, clk := newStore(t)
		_, first := claim(t, s, sc, "fp")
		clk.Advance(lease + time.Second) // the first owner stalls past its lease
		second, secondClaim := claim(t, s, sc, "fp")
		if !second.Wrote || idempotency.Decide(second.Prev, "fp", second.Now).Kind != idempotency.TakeOverLease {
			t.Fatalf("claim after the lease = %+v, want a lease takeover", second)
		}
		if _, err := create(ctx, s, first, "stale"); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("finish with the stale token: err = %v, want ErrLeaseLost", err)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests`) + count(t, db, `SELECT count(*) FROM outbox`); n != 0 {
			t.Fatalf("%d business and outbox rows after a lost lease, want 0", n)
		}
		if err := s.FinishClaimAtomically(ctx, first, refused()); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("plain finish with the stale token: err = %v, want ErrLeaseLost", err)
		}
		if _, err := create(ctx, s, secondClaim, "fresh"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests r JOIN outbox o ON o.request_id = r.id AND o.actor_id = r.actor_id
			WHERE topic = 'fresh' AND o.state = 'pending'`); n != 1 {
			t.Fatalf("%d business rows of the new owner with their outbox row, want 1", n)
		}
	})

	t.Run("a lease is taken over only with the same fingerprint", func(t *testing.T) {
		s, _, clk := newStore(t)
		claim(t, s, sc, "fp")
		clk.Advance(lease)
		other, _ := claim(t, s, sc, "other")
		if other.Wrote || idempotency.Decide(other.Prev, "other", other.Now).Kind != idempotency.Mismatch {
			t.Fatalf("claim with another fingerprint after the lease = %+v, want mismatch", other)
		}
	})

	t.Run("an expired record is a new intent", func(t *testing.T) {
		s, db, clk := newStore(t)
		_, c := claim(t, s, sc, "fp")
		if _, err := create(ctx, s, c, "old"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(ttl - time.Second)
		if again, _ := claim(t, s, sc, "new-payload"); again.Wrote {
			t.Fatal("claimed a record one second before it expires")
		}
		clk.Advance(time.Second)
		fresh, freshClaim := claim(t, s, sc, "new-payload")
		if !fresh.Wrote || idempotency.Decide(fresh.Prev, "new-payload", fresh.Now).Kind != idempotency.TakeOverExpired {
			t.Fatalf("claim after the TTL = %+v, want an expired takeover", fresh)
		}
		if _, err := create(ctx, s, freshClaim, "new"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests`); n != 2 {
			t.Fatalf("%d business rows, want 2 (one per intent)", n)
		}
	})

	t.Run("release lets the key run again", func(t *testing.T) {
		s, _, _ := newStore(t)
		_, c := claim(t, s, sc, "fp")
		if err := s.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
		if again, _ := claim(t, s, sc, "fp"); !again.Wrote || again.Prev != nil {
			t.Fatalf("claim after release = %+v, want a fresh claim", again)
		}
		// A release with a token that is no longer current changes nothing.
		if err := s.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
		if rec, _, _ := s.Lookup(ctx, sc); rec == nil || rec.State != idempotency.StateInProgress {
			t.Fatalf("stale release removed the current claim: %+v", rec)
		}
	})

	t.Run("the sweeper deletes expired rows in batches, never a live claim", func(t *testing.T) {
		s, db, clk := newStore(t)
		for i := range 5 {
			k := sc
			k.Key = "done-" + string(rune('a'+i))
			_, c := claim(t, s, k, "fp")
			if err := s.FinishClaimAtomically(ctx, c, refused()); err != nil {
				t.Fatal(err)
			}
		}
		abandoned := sc
		abandoned.Key = "abandoned"
		claim(t, s, abandoned, "fp") // its owner died
		clk.Advance(ttl)
		live := sc
		live.Key = "live"
		claim(t, s, live, "fp") // claimed now: TTL and lease alive

		if n, _, err := s.PurgeExpired(ctx, 2, postgres.SweepMark{}); err != nil || n != 2 {
			t.Fatalf("PurgeExpired(2) = %d, %v; want 2", n, err)
		}
		if n, _, err := s.PurgeExpired(ctx, 100, postgres.SweepMark{}); err != nil || n != 4 {
			t.Fatalf("PurgeExpired(100) = %d, %v; want the other 3 completed and the abandoned claim", n, err)
		}
		if n := count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idem_key = 'live'`); n != 1 {
			t.Fatal("the sweeper deleted a live claim")
		}
		clk.Advance(ttl) // now past the live claim's TTL, but it was never finished: its lease passed too
		if n, _, err := s.PurgeExpired(ctx, 100, postgres.SweepMark{}); err != nil || n != 1 {
			t.Fatalf("PurgeExpired after the live claim's TTL and lease = %d, %v; want 1", n, err)
		}
	})

	t.Run("fifty concurrent claims of one key: exactly one wins", func(t *testing.T) {
		s, db, _ := newStore(t)
		warmPool(t, db)
		const n = 50
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]idempotency.KeyWrite, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.Claim(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, "fp", lease, ttl)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, cr := range results {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if cr.Wrote {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("%d claims won, want exactly 1", won)
		}
	})
}

func onePhase(t *testing.T, s *postgres.Store, sc idempotency.Scope, fp string, d idempotency.Answer) idempotency.KeyWrite {
	t.Helper()
	cr, err := s.CompleteAtomically(context.Background(), idempotency.Claim{Scope: sc, Token: uuid.NewString()}, fp, ttl, d)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

func TestOnePhase(t *testing.T) {
	for _, unprepared := range []bool{false, true} {
		t.Run(map[bool]string{false: "prepared", true: "unprepared"}[unprepared], func(t *testing.T) {
			testOnePhase(t, func(s *postgres.Store) {
				if unprepared {
					postgres.Unprepare(s)
				}
			})
		})
	}
}

// testOnePhase runs the one-phase scenarios on stores set up by setup.
func testOnePhase(t *testing.T, setup func(*postgres.Store)) {
	ctx := context.Background()
	newStore := func(t *testing.T) (*postgres.Store, *sqlx.DB, *testenv.Clock) {
		s, db, clk := newStore(t)
		setup(s)
		return s, db, clk
	}
	sc := idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-1"}

	t.Run("one statement writes the key completed and the business row", func(t *testing.T) {
		s, db, _ := newStore(t)
		r := newRequest("alice", "t")
		if cr := onePhase(t, s, sc, "fp", created(s, r)); !cr.Wrote || cr.Prev != nil {
			t.Fatalf("first one-phase create = %+v, want written", cr)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests WHERE id = $1`, r.ID); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
		again := onePhase(t, s, sc, "fp", created(s, newRequest("alice", "t")))
		if again.Wrote || idempotency.Decide(again.Prev, "fp", again.Now).Kind != idempotency.Replay || again.Prev.Response.ResultID != r.ID {
			t.Fatalf("second one-phase create = %+v, want the first one's replay", again)
		}
		if other := onePhase(t, s, sc, "other", created(s, newRequest("alice", "t"))); other.Wrote ||
			idempotency.Decide(other.Prev, "other", other.Now).Kind != idempotency.Mismatch {
			t.Fatalf("one-phase create with another fingerprint = %+v, want mismatch", other)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests`); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
	})

	t.Run("a live two-phase claim blocks it; a dead one is taken over", func(t *testing.T) {
		s, db, clk := newStore(t)
		_, owner := claim(t, s, sc, "fp")
		busy := onePhase(t, s, sc, "fp", created(s, newRequest("alice", "t")))
		if busy.Wrote || idempotency.Decide(busy.Prev, "fp", busy.Now).Kind != idempotency.InProgress {
			t.Fatalf("one-phase create on a live claim = %+v, want busy", busy)
		}
		clk.Advance(lease)
		if cr := onePhase(t, s, sc, "fp", created(s, newRequest("alice", "t"))); !cr.Wrote {
			t.Fatalf("one-phase create after the owner's lease = %+v, want a takeover", cr)
		}
		if _, err := create(ctx, s, owner, "late"); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("the dead owner's late finish: %v, want ErrLeaseLost", err)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests`); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
		if n := count(t, db, `SELECT count(*) FROM outbox`); n != 1 {
			t.Fatalf("%d outbox rows, want 1", n)
		}
	})

	t.Run("fifty concurrent one-phase creates of one key make one row", func(t *testing.T) {
		s, db, _ := newStore(t)
		warmPool(t, db)
		const n = 50
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]idempotency.KeyWrite, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.CompleteAtomically(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, "fp", ttl, created(s, newRequest("alice", "t")))
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, cr := range results {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if cr.Wrote {
				won++
			}
		}
		if won != 1 || count(t, db, `SELECT count(*) FROM demo_requests`) != 1 {
			t.Fatalf("%d statements wrote, %d rows; want exactly 1", won, count(t, db, `SELECT count(*) FROM demo_requests`))
		}
	})

	t.Run("a cancel whose request changed since it was read commits nothing", func(t *testing.T) {
		s, db, _ := newStore(t)
		r := newRequest("alice", "t")
		onePhase(t, s, sc, "fp", created(s, r))
		cancel := func(key string) (idempotency.KeyWrite, error) {
			c := r
			at := time.Now().UTC().Truncate(time.Microsecond)
			c.State, c.CancelledAt = demo.StateCancelled, &at
			d := idempotency.Answer{Response: idempotency.Response{Status: 200, Body: []byte("{}")}, Effect: s.CancelDemoRequest(c)}
			return s.CompleteAtomically(ctx, idempotency.Claim{Scope: idempotency.Scope{Actor: "alice", Operation: "demo-requests.cancel", Key: key}, Token: uuid.NewString()}, r.ID, ttl, d)
		}
		if cr, err := cancel("c-1"); err != nil || !cr.Wrote {
			t.Fatalf("first cancel = %+v, %v", cr, err)
		}
		// A second key decided on the old read (still accepted).
		if _, err := cancel("c-2"); !errors.Is(err, idempotency.ErrEffectNotApplied) {
			t.Fatalf("cancel of a cancelled request: %v, want ErrEffectNotApplied", err)
		}
		if n := count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idem_key = 'c-2'`); n != 0 {
			t.Fatal("the rolled-back cancel left its key")
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests WHERE state = 'cancelled'`); n != 1 {
			t.Fatalf("%d cancelled rows, want 1", n)
		}
	})
}

// TestMigrationsDownAndUp takes every migration down and up again: each
// has its down, and the schema goes and comes back whole. It counts the
// migrations it finds, so that a new one needs no change here.
func TestMigrationsDownAndUp(t *testing.T) {
	s, db, _ := newStore(t)
	ups, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil || len(ups) == 0 {
		t.Fatalf("the migrations: %v, %v", ups, err)
	}
	downs, _ := fs.Glob(migrations.FS, "*.down.sql")
	for _, up := range ups {
		if down := strings.TrimSuffix(up, ".up.sql") + ".down.sql"; !slices.Contains(downs, down) {
			t.Fatalf("migrations/%s has no %s: every migration goes down too", up, down)
		}
	}
	if len(downs) != len(ups) {
		t.Fatalf("%d down migrations for %d up: a down without its up", len(downs), len(ups))
	}
	if err := postgres.Migrate(db, -len(ups)); err != nil { // every one of them down
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'`); n != 0 {
		t.Fatalf("%d tables left after all migrations went down", n)
	}
	if err := postgres.Migrate(db, 0); err != nil {
		t.Fatal(err)
	}
	if cr := onePhase(t, s, idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-2"}, "fp",
		created(s, newRequest("alice", "t"))); !cr.Wrote {
		t.Fatal("no create after the migrations went up again")
	}
}

// TestMigrateAtAnUnknownVersion: a database at a migration this build does
// not have (a development database older than the init migration) is
// refused with what to run.
func TestMigrateAtAnUnknownVersion(t *testing.T) {
	_, db, _ := newStore(t)
	db.MustExec(`UPDATE schema_migrations SET version = 999`)
	err := postgres.Migrate(db, 0)
	if err == nil || !strings.Contains(err.Error(), "make db-reset") {
		t.Fatalf("migrate at version 999: %v; want an error that says make db-reset", err)
	}
}
