package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestATakeReadsAboutWhatItTakes: a take of a batch reads about the rows it
// takes, however long the backlog. A plan that joins every due row to its
// request before the LIMIT, or sorts them, makes each take as slow as the
// backlog is long and a drain quadratic; the planner chooses such a plan for
// the rows of requests it has no statistics of yet, as a burst of creates
// leaves them until autovacuum analyzes demo_requests. And a scan of the due
// index that the clock does not bound reads every row due later (retries
// waiting out their backoff) at each take, however few are due.
func TestATakeReadsAboutWhatItTakes(t *testing.T) {
	if pgtest.Citus() {
		t.Skip("on Citus a take runs on each shard through its function; this reads one server's plan")
	}
	const batch = 32
	for _, tc := range []struct {
		name       string
		due, later int
	}{
		{"a long backlog due", 5000, 0},
		{"a few due, a long backlog due later", 10, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			_, db, clk := newStore(t)
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`ALTER TABLE demo_requests SET (autovacuum_enabled = false)`, nil}, // never analyzed, as after a burst
				{`INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
				  SELECT gen_random_uuid(), 'actor-' || i % 3, 'accepted', 'topic ' || i, '', $1 FROM generate_series(1, $2) i`,
					[]any{clk.Now(), tc.due + tc.later}},
				{`INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
				  SELECT id, actor_id, CASE WHEN row_number() OVER () <= $1 THEN created_at ELSE created_at + interval '1 minute' END,
				         created_at, created_at
				  FROM demo_requests`, []any{tc.due}},
			} {
				if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
					t.Fatal(err)
				}
			}
			tx := db.MustBeginTx(ctx, nil)
			defer tx.Rollback()
			var out []byte
			if err := tx.GetContext(ctx, &out, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+scanStatement(t, db, "outbox_take_due", "outbox", "demo_requests"),
				clk.Now(), pq.Array([]string{}), batch, uuid.NewString(), time.Minute.Microseconds()); err != nil {
				t.Fatal(err)
			}
			var plans []planNode
			if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
				t.Fatalf("EXPLAIN's JSON: %v (%d plans)", err, len(plans))
			}
			p := plans[0].Plan
			want := min(tc.due, batch)
			if p.Rows != want {
				t.Fatalf("the take took %d rows, want %d", p.Rows, want)
			}
			// Each row taken: its index entry, the check for an earlier event,
			// the lock, the new version and its three index entries, its request.
			if buffers := p.Hit + p.Read; buffers > 40*want {
				t.Errorf("the take read %d buffers for %d rows (%.0f a row), want at most 40 a row:\n%s",
					buffers, want, float64(buffers)/float64(want), out)
			}
			if read := p.indexRows("outbox_due"); read > want {
				t.Errorf("the take read %d entries of the due index for %d rows:\n%s", read, want, out)
			}
		})
	}
}

// scanStatement is the statement the scan fn (migrations/000005_scans.up.sql)
// runs on tables: the text between its $q$ marks, as its format() names them.
func scanStatement(t *testing.T, db *sqlx.DB, fn string, tables ...string) string {
	t.Helper()
	var q string
	if err := db.Get(&q, `SELECT format(split_part(prosrc, '$q$', 2), VARIADIC $2::text[]) FROM pg_proc WHERE oid = $1::regproc`,
		fn, pq.Array(tables)); err != nil {
		t.Fatal(err)
	}
	return q
}

// planNode is a node of EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON).
type planNode struct {
	Plan  *planNode  `json:"Plan"`
	Plans []planNode `json:"Plans"`
	Index string     `json:"Index Name"`
	Rows  int        `json:"Actual Rows"`
	Loops int        `json:"Actual Loops"`
	Hit   int        `json:"Shared Hit Blocks"`
	Read  int        `json:"Shared Read Blocks"`
}

// indexRows is the rows the scans of index under n returned, over their loops.
func (n *planNode) indexRows(index string) int {
	rows := 0
	if n.Index == index {
		rows += n.Rows * n.Loops
	}
	for i := range n.Plans {
		rows += n.Plans[i].indexRows(index)
	}
	return rows
}
