package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestADuplicateThatWaitedReplaysInItsOwnCall: a one-phase duplicate sent
// while the first write of its key is not yet committed waits on the key's
// unique index; once the first commits, the same call returns the row the
// first wrote, to replay. write_key reads the row in a statement of its
// own after its INSERT found the key taken, and that statement's snapshot
// sees the commit the INSERT waited for: the Runner needs no second turn,
// and the duplicate's work does not run again.
func TestADuplicateThatWaitedReplaysInItsOwnCall(t *testing.T) {
	ctx := context.Background()
	s, db, clk := newStore(t)
	sc := idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-1"}
	tx := db.MustBeginTx(ctx, nil)
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, readSQL(t, "answer_only.sql"), clk.Now(), sc.Actor, sc.Operation, sc.Key,
		uuid.NewString(), false, "fp", ttl.Microseconds(), 201, []byte(`{"requestId":"first"}`), `{}`, "first"); err != nil {
		t.Fatal(err)
	}
	type written struct {
		w   idempotency.KeyWrite
		err error
	}
	done := make(chan written, 1)
	go func() {
		w, err := s.CompleteAtomically(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, "fp", ttl,
			created(s, newRequest("alice", "t")))
		done <- written{w, err}
	}()
	if !testenv.Eventually(5*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 1
	}) {
		t.Fatal("the duplicate did not wait for the first write's commit")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	d := <-done
	if d.err != nil {
		t.Fatal(d.err)
	}
	if d.w.Wrote || d.w.Prev == nil || idempotency.Decide(d.w.Prev, "fp", d.w.Now).Kind != idempotency.Replay ||
		d.w.Prev.Response.ResultID != "first" {
		t.Fatalf("the duplicate's write = %+v, want the first's answer to replay", d.w)
	}
	if n := count(t, db, `SELECT count(*) FROM demo_requests`); n != 0 {
		t.Fatalf("%d business rows, want none: the first answer changed nothing", n)
	}
}
