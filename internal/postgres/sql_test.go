package postgres_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/postgres"
)

// readSQL returns the embedded file sql/name.
func readSQL(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(postgres.SQLFiles, "sql/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var param = regexp.MustCompile(`\$(\d+)`)

// TestEveryStatementPrepares prepares every file of sql/ against the
// migrated schema, so a typo, a wrong column or a parameter of two types
// fails here. It also checks what a reader relies on: the comment at the
// top lists every parameter PostgreSQL found ($1 … $n, no more), the body
// numbers them in reading order, and the Go code runs the file.
func TestEveryStatementPrepares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := openDB(t).Connx(ctx) // a prepared statement lives on one connection
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var code strings.Builder
	gofiles, _ := filepath.Glob("*.go")
	for _, f := range gofiles {
		if !strings.HasSuffix(f, "_test.go") {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			code.Write(b)
		}
	}
	files, err := fs.Glob(postgres.SQLFiles, "sql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("the statements: %v, %v", files, err)
	}
	statements := map[string]string{}
	for _, path := range files {
		name := strings.TrimPrefix(path, "sql/")
		statements[name] = readSQL(t, name)
	}
	for name, text := range statements {
		if _, err := conn.ExecContext(ctx, "PREPARE stmt AS "+text); err != nil {
			t.Errorf("%s does not prepare: %v", name, err)
			continue
		}
		var n int
		if err := conn.GetContext(ctx, &n, `SELECT coalesce(cardinality(parameter_types), 0) FROM pg_prepared_statements WHERE name = 'stmt'`); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "DEALLOCATE stmt"); err != nil {
			t.Fatal(err)
		}

		header, body := splitHeader(text)
		if !strings.HasPrefix(header, "-- "+name+": ") {
			t.Errorf("%s: its comment does not start with %q", name, "-- "+name+": ")
		}
		listed := map[int]bool{}
		for _, m := range param.FindAllStringSubmatch(header, -1) {
			i, _ := strconv.Atoi(m[1])
			listed[i] = true
		}
		for i := 1; i <= n; i++ {
			if !listed[i] {
				t.Errorf("%s: its comment does not list $%d", name, i)
			}
		}
		if len(listed) > n {
			t.Errorf("%s: its comment lists %d parameters, the statement has %d", name, len(listed), n)
		}
		next := 1
		for _, m := range param.FindAllStringSubmatch(body, -1) {
			switch i, _ := strconv.Atoi(m[1]); {
			case i == next:
				next++
			case i > next:
				t.Errorf("%s: $%d comes before $%d; number the parameters in reading order", name, i, next)
				next = i + 1
			}
		}
		if !strings.Contains(code.String(), "//go:embed sql/"+name+"\n") {
			t.Errorf("%s: no Go code runs it (//go:embed sql/%s)", name, name)
		}
	}
}

// splitHeader returns the comment lines at the top of a file and the rest,
// without its comments.
func splitHeader(text string) (header, body string) {
	lines := strings.Split(text, "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], "--") {
		i++
	}
	var b strings.Builder
	for _, l := range lines[i:] {
		if j := strings.Index(l, "--"); j >= 0 {
			l = l[:j]
		}
		b.WriteString(l + "\n")
	}
	return strings.Join(lines[:i], "\n"), b.String()
}

// TestStatementsWriteKeyAndBusinessRowsTogether runs each operation's
// statement on its own (a third operation's too, testdata), with the
// parameters its comment lists: where it may write (a free scope, an
// expired row; as a finish, the claim its token holds) it writes the key
// row completed and, from it, the business rows; where it may not (a live
// claim; as a finish, another token's claim) it writes neither.
func TestStatementsWriteKeyAndBusinessRowsTogether(t *testing.T) {
	const (
		actor = "alice"
		op    = "demo-requests.create"
		fp    = "fp"
	)
	now := time.Now().UTC().Truncate(time.Microsecond)
	type business struct {
		args  func(id string) []any // $13 on, as the file lists them
		setup string                // run with $1 = id before the statement
		// alone counts the business rows the statement writes for $1
		// (written of them when it writes); together is 1 when they are
		// there with their key row, completed and naming them.
		alone, together string
		written         int
	}
	create := business{
		args: func(id string) []any { return []any{id, "accepted", "t", "n", now} },
		alone: `SELECT (SELECT count(*) FROM demo_requests WHERE id = $1) +
		               (SELECT count(*) FROM outbox WHERE request_id = $1)`,
		together: `SELECT count(*) FROM idempotency_keys k
		           JOIN demo_requests r ON r.actor_id = k.actor_id AND r.id::text = k.result_id JOIN outbox o ON o.actor_id = r.actor_id AND o.request_id = r.id
		           WHERE k.state = 'completed' AND r.id = $1 AND o.state = 'pending'`,
		written: 2, // the request and its outbox row
	}
	cancel := business{
		args: func(id string) []any { return []any{"cancelled", now, id} },
		// An accepted request whose delivery was never tried: the cancel
		// withdraws it.
		setup: `WITH r AS (INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
		        VALUES ($1, 'alice', 'accepted', 't', 'n', now()) RETURNING id, actor_id)
		        INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at) SELECT id, actor_id, now(), now(), now() FROM r`,
		alone: `SELECT (SELECT count(*) FROM demo_requests WHERE id = $1 AND state = 'cancelled') +
		               (SELECT count(*) FROM outbox WHERE request_id = $1 AND state = 'withdrawn')`,
		together: `SELECT count(*) FROM idempotency_keys k JOIN demo_requests r ON r.actor_id = k.actor_id AND r.id::text = k.result_id
		           JOIN outbox o ON o.actor_id = r.actor_id AND o.request_id = r.id AND o.kind = 'submit'
		           WHERE k.state = 'completed' AND r.id = $1 AND r.state = 'cancelled' AND o.state = 'withdrawn'`,
		written: 2, // the request and its delivery
	}
	reopen := business{
		args: func(id string) []any { return []any{id} },
		// A cancelled request whose submission was delivered, so that its
		// cancel was queued: the reopen accepts it again and queues its event
		// after the cancel.
		setup: `WITH r AS (INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at, cancelled_at)
		        VALUES ($1, 'alice', 'cancelled', 't', 'n', now(), now()) RETURNING id, actor_id)
		        INSERT INTO outbox (request_id, actor_id, kind, position, state, provider_reference, next_attempt_at, created_at, updated_at)
		        SELECT id, actor_id, 'submit', 1, 'submitted'::delivery_state, 'ref', NULL::timestamptz, now(), now() FROM r
		        UNION ALL SELECT id, actor_id, 'cancel', 2, 'pending', NULL, now(), now(), now() FROM r`,
		alone: `SELECT (SELECT count(*) FROM demo_requests WHERE id = $1 AND state = 'accepted') +
		               (SELECT count(*) FROM outbox WHERE request_id = $1 AND kind = 'reopen')`,
		together: `SELECT count(*) FROM idempotency_keys k JOIN demo_requests r ON r.actor_id = k.actor_id AND r.id::text = k.result_id
		           JOIN outbox o ON o.actor_id = r.actor_id AND o.request_id = r.id AND o.kind = 'reopen'
		           WHERE k.state = 'completed' AND r.id = $1 AND r.state = 'accepted' AND o.position = 3`,
		written: 2, // the request and its event
	}
	answerOnly := business{args: func(string) []any { return nil }}
	cases := []struct {
		file     string
		business business
	}{
		{"create_demo_request.sql", create},
		{"cancel_demo_request.sql", cancel},
		{"answer_only.sql", answerOnly},
		{"testdata/reopen_demo_request.sql", reopen},
	}
	// The rows a scope may hold before: an expired answer, a live claim
	// ($1 its token).
	const (
		expired = `INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token,
			status_code, response_body, response_headers, created_at, completed_at, expires_at)
			VALUES ('alice', 'demo-requests.create', $2, 'old', 'completed', $1, 201, '{}', '{}',
			now() - interval '2 days', now() - interval '2 days', now() - interval '1 day')`
		live = `INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token,
			lease_until, created_at, expires_at)
			VALUES ('alice', 'demo-requests.create', $2, 'fp', 'in_progress', $1,
			now() + interval '30 seconds', now(), now() + interval '1 day')`
	)
	scopes := []struct {
		name, before string
		finish, ours bool // a finish; the claim before is its token's
		writes       bool
	}{
		{name: "free", writes: true},
		{name: "taken by a live claim", before: live},
		{name: "holding an expired row", before: expired, writes: true},
		{name: "finishing its claim", before: live, finish: true, ours: true, writes: true},
		{name: "finishing a claim another token holds", before: live, finish: true},
	}
	db := openDB(t) // each case has a scope of its own: its name
	withReopen(t, db)
	for _, c := range cases {
		for _, sc := range scopes {
			t.Run(c.file+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				key := t.Name()
				id, token := uuid.NewString(), uuid.NewString()
				if sc.before != "" {
					held := uuid.NewString()
					if sc.ours {
						held = token
					}
					db.MustExecContext(ctx, sc.before, held, key)
				}
				b := c.business
				if b.setup != "" {
					db.MustExecContext(ctx, b.setup, id)
				}
				resultID := any(id)
				if b.alone == "" {
					resultID = nil
				}
				args := append([]any{nil, actor, op, key, token, sc.finish, fp, (24 * time.Hour).Microseconds(),
					201, []byte(`{"requestId":"` + id + `"}`), `{"Location":"/v1/demo-requests/` + id + `"}`, resultID}, b.args(id)...)
				got := map[string]any{}
				if err := db.QueryRowxContext(ctx, readStatement(t, c.file), args...).MapScan(got); err != nil {
					t.Fatal(err)
				}
				keyRows := count(t, db, `SELECT count(*) FROM idempotency_keys WHERE claim_token = $1 AND state = 'completed'
					AND fingerprint = 'fp' AND status_code = 201 AND result_id IS NOT DISTINCT FROM $2`, token, resultID)
				if !sc.writes {
					if got["wrote"] != false || keyRows != 0 {
						t.Fatalf("wrote %v, %d key rows written; want false, 0", got["wrote"], keyRows)
					}
					if !sc.finish && got["state"] == nil {
						t.Fatal("no previous row returned, want the row there")
					}
					if b.alone != "" {
						if n := count(t, db, b.alone, id); n != 0 {
							t.Fatalf("%d business rows written without their key, want 0", n)
						}
					}
					return
				}
				wantEffect := int64(min(b.written, 1)) // the rows of its CTE effect
				if got["wrote"] != true || got["effect"] != wantEffect || keyRows != 1 {
					t.Fatalf("wrote %v, effect %v, %d key rows; want true, %d, 1", got["wrote"], got["effect"], keyRows, wantEffect)
				}
				if b.alone != "" {
					if n, m := count(t, db, b.alone, id), count(t, db, b.together, id); n != b.written || m != 1 {
						t.Fatalf("%d business rows, with their key %d times; want %d, once", n, m, b.written)
					}
				}
			})
		}
	}
}

// readStatement returns sql/name, or the file itself for testdata/name.
func readStatement(t *testing.T, name string) string {
	t.Helper()
	if !strings.HasPrefix(name, "testdata/") {
		return readSQL(t, name)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestClaimCommitsAsynchronously runs claim.sql in a transaction and
// reads synchronous_commit after them: off, for a claim that writes and for
// one that finds its scope taken, so neither commit waits for a WAL flush.
// The set_config that does it is the final SELECT's filter in claim.sql, a
// place a rewrite could drop without any other test noticing.
func TestClaimCommitsAsynchronously(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	for _, name := range []string{"claim.sql"} {
		for _, scope := range []string{"free", "taken"} {
			t.Run(name+"/"+scope, func(t *testing.T) {
				tx, err := db.BeginTxx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				// The test server runs with synchronous_commit off; the
				// service's does not.
				if _, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
					t.Fatal(err)
				}
				key := "k-" + uuid.NewString()
				args := []any{nil, "alice", "demo-requests.create", key, uuid.NewString(), "fp", time.Minute.Microseconds(), time.Hour.Microseconds()}
				run := func() (wrote bool) {
					args[4] = uuid.NewString()
					rows, err := tx.QueryxContext(ctx, readSQL(t, name), args...)
					if err != nil {
						t.Fatal(err)
					}
					defer rows.Close()
					n := 0
					for rows.Next() {
						n++
						row := map[string]any{}
						if err := rows.MapScan(row); err != nil {
							t.Fatal(err)
						}
						wrote, _ = row["wrote"].(bool)
					}
					if err := rows.Err(); err != nil {
						t.Fatal(err)
					}
					if n != 1 {
						t.Fatalf("%s returned %d rows, want 1", name, n)
					}
					return wrote
				}
				if scope == "taken" && !run() {
					t.Fatal("the first claim did not claim")
				}
				if got := run(); got != (scope == "free") {
					t.Fatalf("wrote = %v on a %s scope", got, scope)
				}
				var sc string
				if err := tx.GetContext(ctx, &sc, "SHOW synchronous_commit"); err != nil {
					t.Fatal(err)
				}
				if sc != "off" {
					t.Errorf("synchronous_commit after %s on a %s scope = %q, want off", name, scope, sc)
				}
			})
		}
	}
}

// TestStatementsReturnTheColumnsTheStoreScans runs every statement the
// store scans by position, in a transaction rolled back, and compares its
// columns, names and order, with the store's: a column moved in a file
// would otherwise land in the wrong field without an error (created_at and
// completed_at have one type).
func TestStatementsReturnTheColumnsTheStoreScans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	withReopen(t, db)
	id, token, now := uuid.NewString(), uuid.NewString(), time.Now()
	key := []any{nil, "alice", "demo-requests.create", "k-1"}
	answer := func(business ...any) []any { // the operations' parameters
		return append(append(append([]any{}, key...), token, false, "fp", int64(1), 201, []byte("{}"), "{}", id), business...)
	}
	claim := append(append([]any{}, key...), token, "fp", int64(1), int64(1))
	cases := []struct {
		file  string
		state string // of the request id, made first ("": none), as a transition's work read it
		args  []any
		want  []string
	}{
		{"claim.sql", "", claim, postgres.WriteColumns},
		{"create_demo_request.sql", "", answer(id, "accepted", "t", "n", now), postgres.WriteColumns},
		{"cancel_demo_request.sql", "accepted", answer("cancelled", now, id), postgres.WriteColumns},
		{"answer_only.sql", "", answer(), postgres.WriteColumns},
		{"testdata/reopen_demo_request.sql", "cancelled", answer(id), postgres.WriteColumns},
		{"lookup_key.sql", "", key, postgres.LookupColumns},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			tx, err := db.BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if c.state != "" {
				if _, err := tx.ExecContext(ctx, `INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at, cancelled_at)
					VALUES ($1, 'alice', $2, 't', 'n', now(), CASE WHEN $2 = 'cancelled' THEN now() END)`, id, c.state); err != nil {
					t.Fatal(err)
				}
			}
			rows, err := tx.QueryContext(ctx, readStatement(t, c.file), c.args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			got, err := rows.Columns()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("columns\n%v, the store scans\n%v", got, c.want)
			}
		})
	}
}

// TestKeyRowsAreWrittenByWriteKey: the key row's part is written once, in
// write_key (migrations/000002_write_key.up.sql). No other statement or
// function inserts or updates idempotency_keys, and every function that
// returns key_write (an operation's: on Citus, the functions delegated by
// the actor) calls write_key once.
func TestKeyRowsAreWrittenByWriteKey(t *testing.T) {
	t.Parallel()
	writes := regexp.MustCompile(`(?i)(INSERT\s+INTO|UPDATE)\s+idempotency_keys\b`)
	texts := map[string]string{}
	for _, pattern := range []string{"../../migrations/*.up.sql", "testdata/migrations/*.up.sql", "testdata/*.sql"} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			texts[f] = string(b)
		}
	}
	sqlFiles, _ := fs.Glob(postgres.SQLFiles, "sql/*.sql")
	for _, f := range sqlFiles {
		texts[f] = readSQL(t, strings.TrimPrefix(f, "sql/"))
	}
	for name, text := range texts {
		_, body := splitHeader(text)
		if writes.MatchString(body) && !strings.HasSuffix(name, "000002_write_key.up.sql") {
			t.Errorf("%s writes idempotency_keys itself; write the key row with write_key", name)
		}
	}
	db := openDB(t)
	withReopen(t, db)
	var fns []struct {
		Name  string `db:"proname"`
		Calls int    `db:"calls"`
	}
	if err := db.Select(&fns, `SELECT proname, (length(prosrc) - length(replace(prosrc, 'write_key(', ''))) / length('write_key(') AS calls
		FROM pg_proc WHERE prorettype = 'key_write'::regtype AND proname <> 'write_key'
		  AND pronamespace = current_schema()::regnamespace ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		if f.Calls != 1 {
			t.Errorf("%s calls write_key %d times, want once", f.Name, f.Calls)
		}
	}
	if len(fns) != 3 { // the create, the cancel, the reopen
		t.Errorf("%d functions return key_write (%v), want 3", len(fns), fns)
	}
}
