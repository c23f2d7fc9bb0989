package postgres_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestATakeReadsAboutWhatItTakes: a take of a batch reads a few buffers per
// row it takes, however long the backlog. A plan that joins every due row
// to its request before the LIMIT, or sorts them, makes each take as slow as
// the backlog is long and a drain quadratic. The planner chooses that plan
// for the due rows of requests it has no statistics of yet, as a burst of
// creates leaves them until autovacuum analyzes demo_requests.
func TestATakeReadsAboutWhatItTakes(t *testing.T) {
	if pgtest.Citus() {
		t.Skip("on Citus a take runs on each shard through its function; this reads one server's plan")
	}
	ctx := context.Background()
	_, db, clk := newStore(t)
	const backlog, batch = 5000, 32
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`ALTER TABLE demo_requests SET (autovacuum_enabled = false)`, nil}, // never analyzed, as after a burst
		{`INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
		  SELECT gen_random_uuid(), 'actor-' || i % 3, 'accepted', 'topic ' || i, '', $1 FROM generate_series(1, $2) i`, []any{clk.Now(), backlog}},
		{`INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
		  SELECT id, actor_id, created_at, created_at, created_at FROM demo_requests`, nil},
	} {
		if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	tx := db.MustBeginTx(ctx, nil)
	defer tx.Rollback()
	var out []byte
	if err := tx.GetContext(ctx, &out, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+readSQL(t, "outbox_take_due.sql"),
		clk.Now(), pq.Array([]string{}), batch, uuid.NewString(), lease.Microseconds()); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan struct {
			Rows int `json:"Actual Rows"`
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN's JSON: %v (%d plans)", err, len(plans))
	}
	p := plans[0].Plan
	if p.Rows != batch {
		t.Fatalf("the take took %d rows of a backlog of %d, want %d", p.Rows, backlog, batch)
	}
	// Each row taken: its index entry, the check for an earlier event, the
	// lock, the new version and its three index entries, and its request.
	if buffers := p.Hit + p.Read; buffers > 40*batch {
		t.Errorf("a take of %d rows of a backlog of %d read %d buffers (%.0f per row), want at most 40 per row:\n%s",
			batch, backlog, buffers, float64(buffers)/batch, out)
	}
}
