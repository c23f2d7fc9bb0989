package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/pgtest"
	"github.com/demo-api/demo-api/internal/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

// clock is a test clock the store reads instead of the database's.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openDB opens a fresh migrated database the way the service does.
func openDB(t *testing.T) *sqlx.DB {
	db, err := postgres.Open(context.Background(), pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newStore(t *testing.T) (*postgres.Store, *sqlx.DB, *clock) {
	db := openDB(t)
	s := postgres.New(db)
	c := &clock{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	s.Clock = c.Now
	return s, db, c
}

func count(t *testing.T, db *sqlx.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Get(&n, query, args...); err != nil {
		t.Fatal(err)
	}
	return n
}

func claim(t *testing.T, s *postgres.Store, sc idempotency.Scope, fp string) idempotency.ClaimResult {
	t.Helper()
	cr, err := s.Claim(context.Background(), sc, fp, lease, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

func create(ctx context.Context, s *postgres.Store, c idempotency.Claim, topic string) (demo.Request, error) {
	r := demo.Request{ID: uuid.NewString(), Actor: c.Scope.Actor, State: demo.StateAccepted, Topic: topic, CreatedAt: c.Now}
	resp := idempotency.Response{Status: 201, Header: map[string]string{"Location": "/v1/demo-requests/" + r.ID}, Body: []byte(`{"requestId":"` + r.ID + `"}`), ResultID: r.ID}
	return r, s.CreateDemoRequest(ctx, c, r, resp)
}

func TestStoreScenarios(t *testing.T) {
	ctx := context.Background()
	sc := idempotency.Scope{Actor: "alice", Operation: demo.OperationCreate, Key: "k-1"}

	t.Run("claim, then replay what the finish stored", func(t *testing.T) {
		s, db, _ := newStore(t)
		cr := claim(t, s, sc, "fp")
		if !cr.Claimed || cr.Prev != nil {
			t.Fatalf("first claim = %+v, want claimed with no previous row", cr)
		}
		again := claim(t, s, sc, "fp")
		if again.Claimed || idempotency.Decide(again.Prev, "fp", again.Now).Kind != idempotency.Busy {
			t.Fatalf("second claim while in progress = %+v, want busy", again)
		}
		r, err := create(ctx, s, cr.Claim, "t")
		if err != nil {
			t.Fatal(err)
		}
		replay := claim(t, s, sc, "fp")
		if replay.Claimed || idempotency.Decide(replay.Prev, "fp", replay.Now).Kind != idempotency.Replay {
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
			if cr := claim(t, s, other, "fp"); !cr.Claimed {
				t.Fatalf("claim of %+v not claimed", other)
			}
		}
	})

	t.Run("finish with a stale claim token rolls the business row back", func(t *testing.T) {
		s, db, clk := newStore(t)
		first := claim(t, s, sc, "fp")
		clk.Advance(lease + time.Second) // the first owner stalls past its lease
		second := claim(t, s, sc, "fp")
		if !second.Claimed || idempotency.Decide(second.Prev, "fp", second.Now).Kind != idempotency.TakeOverLease {
			t.Fatalf("claim after the lease = %+v, want a lease takeover", second)
		}
		if _, err := create(ctx, s, first.Claim, "stale"); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("finish with the stale token: err = %v, want ErrLeaseLost", err)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests`); n != 0 {
			t.Fatalf("%d business rows after a lost lease, want 0", n)
		}
		if err := s.Finish(ctx, first.Claim, idempotency.Response{Status: 422, Body: []byte("{}")}); !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("plain finish with the stale token: err = %v, want ErrLeaseLost", err)
		}
		if _, err := create(ctx, s, second.Claim, "fresh"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests WHERE topic = 'fresh'`); n != 1 {
			t.Fatalf("%d business rows of the new owner, want 1", n)
		}
	})

	t.Run("a lease is taken over only with the same fingerprint", func(t *testing.T) {
		s, _, clk := newStore(t)
		claim(t, s, sc, "fp")
		clk.Advance(lease)
		other := claim(t, s, sc, "other")
		if other.Claimed || idempotency.Decide(other.Prev, "other", other.Now).Kind != idempotency.Mismatch {
			t.Fatalf("claim with another fingerprint after the lease = %+v, want mismatch", other)
		}
	})

	t.Run("an expired record is a new intent", func(t *testing.T) {
		s, db, clk := newStore(t)
		cr := claim(t, s, sc, "fp")
		if _, err := create(ctx, s, cr.Claim, "old"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(ttl - time.Second)
		if again := claim(t, s, sc, "new-payload"); again.Claimed {
			t.Fatal("claimed a record one second before it expires")
		}
		clk.Advance(time.Second)
		fresh := claim(t, s, sc, "new-payload")
		if !fresh.Claimed || idempotency.Decide(fresh.Prev, "new-payload", fresh.Now).Kind != idempotency.TakeOverExpired {
			t.Fatalf("claim after the TTL = %+v, want an expired takeover", fresh)
		}
		if _, err := create(ctx, s, fresh.Claim, "new"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `SELECT count(*) FROM demo_requests`); n != 2 {
			t.Fatalf("%d business rows, want 2 (one per intent)", n)
		}
	})

	t.Run("release lets the key run again", func(t *testing.T) {
		s, _, _ := newStore(t)
		cr := claim(t, s, sc, "fp")
		if err := s.Release(ctx, cr.Claim); err != nil {
			t.Fatal(err)
		}
		if again := claim(t, s, sc, "fp"); !again.Claimed || again.Prev != nil {
			t.Fatalf("claim after release = %+v, want a fresh claim", again)
		}
		// A release with a token that is no longer current changes nothing.
		if err := s.Release(ctx, cr.Claim); err != nil {
			t.Fatal(err)
		}
		if rec, _, _ := s.Lookup(ctx, sc); rec == nil || rec.State != idempotency.InProgress {
			t.Fatalf("stale release removed the current claim: %+v", rec)
		}
	})

	t.Run("the sweeper deletes expired rows in batches, never a live claim", func(t *testing.T) {
		s, db, clk := newStore(t)
		for i := range 5 {
			k := sc
			k.Key = "done-" + string(rune('a'+i))
			cr := claim(t, s, k, "fp")
			if err := s.Finish(ctx, cr.Claim, idempotency.Response{Status: 422, Body: []byte("{}")}); err != nil {
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

		if n, err := s.PurgeExpired(ctx, 2); err != nil || n != 2 {
			t.Fatalf("PurgeExpired(2) = %d, %v; want 2", n, err)
		}
		if n, err := s.PurgeExpired(ctx, 100); err != nil || n != 4 {
			t.Fatalf("PurgeExpired(100) = %d, %v; want the other 3 completed and the abandoned claim", n, err)
		}
		if n := count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idem_key = 'live'`); n != 1 {
			t.Fatal("the sweeper deleted a live claim")
		}
		clk.Advance(ttl) // now past the live claim's TTL, but it was never finished: its lease passed too
		if n, err := s.PurgeExpired(ctx, 100); err != nil || n != 1 {
			t.Fatalf("PurgeExpired after the live claim's TTL and lease = %d, %v; want 1", n, err)
		}
	})

	t.Run("fifty concurrent claims of one key: exactly one wins", func(t *testing.T) {
		s, _, _ := newStore(t)
		const n = 50
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]idempotency.ClaimResult, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.Claim(ctx, sc, "fp", lease, ttl)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, cr := range results {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if cr.Claimed {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("%d claims won, want exactly 1", won)
		}
	})
}
