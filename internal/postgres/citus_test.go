//go:build citus

package postgres_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestCitusExplain (make test-citus) explains each statement of a request's
// path on the cluster, with the arguments the store passes, and checks
// that Citus routes it to its actor's shard alone: one task, no
// subplan pulled to the coordinator.
func TestCitusExplain(t *testing.T) {
	if !pgtest.Citus() {
		t.Fatal("needs TEST_DATABASE_URL to name a Citus coordinator (make test-citus)")
	}
	// A plain connection, parameters sent as text: EXPLAIN takes the
	// statement's parameters from Bind.
	db, err := sqlx.Open("postgres", pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UTC()
	id, token := uuid.NewString(), uuid.NewString()
	const actor, op, key, fp = "alice", "demo-requests.create", "k-explain", "fp"
	answer := []any{201, []byte(`{}`), `{}`, id}
	scope := []any{actor, op, key}
	cat := func(parts ...[]any) []any {
		var all []any
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	statements := []struct {
		file string
		args []any
	}{
		{"claim.sql", cat([]any{nil}, scope, []any{fp, token, int64(30e6), int64(86400e6)})},
		{"create_demo_request.sql", cat([]any{nil}, scope, []any{fp, token}, answer,
			[]any{int64(86400e6), id, "accepted", "topic", "note", now})},
		{"finish_claim_create_demo_request.sql", cat([]any{nil}, answer, scope, []any{token, id, "accepted", "topic", "note", now})},
		{"release_claim.sql", cat(scope, []any{token})},
		{"lookup_key.sql", cat([]any{nil}, scope)},
		{"cancel_demo_request.sql", cat([]any{nil}, scope, []any{fp, token}, answer,
			[]any{int64(86400e6), "cancelled", now, id})},
		{"finish_claim_cancel_demo_request.sql", cat([]any{nil}, answer, scope, []any{token, "cancelled", now, id})},
		{"get_demo_request.sql", []any{id, actor}},
		{"outbox_delivery.sql", []any{id, actor}},
	}
	tasks := regexp.MustCompile(`Task Count: (\d+)`)
	for _, st := range statements {
		var lines []string
		if err := db.SelectContext(context.Background(), &lines, "EXPLAIN (COSTS OFF) "+readSQL(t, st.file), st.args...); err != nil {
			t.Errorf("%s: %v", st.file, err)
			continue
		}
		plan := strings.Join(lines, "\n")
		counts := tasks.FindAllStringSubmatch(plan, -1)
		subplans := strings.Count(plan, "Distributed Subplan")
		t.Logf("%s: %d distributed scans, tasks %v, %d subplans", st.file, len(counts), counts, subplans)
		if len(counts) != 1 || counts[0][1] != "1" || subplans != 0 {
			t.Errorf("%s is not one router task on its actor's shard:\n%s", st.file, plan)
		}
	}
}
