package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestCommitWithoutItsStandbyIsNotAcknowledged: on a primary whose
// commits wait for a synchronous standby that does not answer, a
// statement's bound cancels the wait, and PostgreSQL then reports the
// commit done (it holds on the primary alone) with only a warning. The
// pool must not pass that on as a success, or a 201 would be sent for a
// key a failover can lose: it is an error, answered 503, and the retry
// replays the key where it survived or runs it again where it did not.
func TestCommitWithoutItsStandbyIsNotAcknowledged(t *testing.T) {
	testenv.Long(t, "starts a standby")
	t.Parallel()
	ctx := context.Background()
	pg := pgtest.Own(t, pgtest.Options{Durable: true,
		Settings: map[string]string{"synchronous_standby_names": "absent_standby"}})
	setup := sqlx.MustOpen("postgres", pg.URL("postgres")+"&options=-c%20synchronous_commit%3Dlocal")
	defer setup.Close()
	setup.MustExec("CREATE TABLE acks (n int)")

	const bound = 500 * time.Millisecond
	db, err := postgres.Open(ctx, pg.URL("postgres"), bound)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The service says so: its commits wait, and no standby is there. (Read
	// on a pool of its own: the bound above is for the commits.)
	rdb, err := postgres.Open(ctx, pg.URL("postgres"), postgres.LongStatements)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if r, err := postgres.New(rdb).Replication(ctx); err != nil || !r.CommitWaits || r.Attached != 0 || r.StandbyNames != "absent_standby" {
		t.Fatalf("replication: %+v, %v; want commits that wait, no standby attached", r, err)
	}
	if r, err := postgres.New(setup).Replication(ctx); err != nil || r.CommitWaits || r.SynchronousCommit != "local" {
		t.Fatalf("replication of a session with synchronous_commit=local: %+v, %v; want commits that do not wait", r, err)
	}
	for _, run := range []struct {
		name string
		fn   func() error
	}{
		{"exec", func() error { _, err := db.ExecContext(ctx, "INSERT INTO acks VALUES (1)"); return err }},
		{"a row back", func() error {
			var n int
			return db.GetContext(ctx, &n, "INSERT INTO acks VALUES (2) RETURNING n")
		}},
		{"prepared", func() error {
			st, err := db.PreparexContext(ctx, "INSERT INTO acks VALUES ($1) RETURNING n")
			if err != nil {
				return err
			}
			defer st.Close()
			var n int
			return st.GetContext(ctx, &n, 3)
		}},
		{"a transaction's commit", func() error {
			tctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			tx, err := db.BeginTxx(tctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(tctx, "INSERT INTO acks VALUES (4)"); err != nil {
				return err
			}
			return tx.Commit()
		}},
	} {
		start := time.Now()
		err := run.fn()
		t.Logf("%s: %v after %v", run.name, err, time.Since(start).Round(time.Millisecond))
		// The warning arrives as the rows end, or after the deadline
		// ended the read of the rows: either way, an error.
		if err == nil {
			t.Fatalf("%s: a commit no standby confirmed is acknowledged", run.name)
		}
		if e, ok := errors.AsType[*apperr.Error](postgres.DBErr(err)); !ok || e.Code != apperr.Unavailable {
			t.Fatalf("%s: %v is not answered as unavailable", run.name, err)
		}
	}
}

// TestReplicationOfASingleServer: a server without standbys says its
// commits wait for none; no acknowledged key is at risk for it unless its
// commits do not wait for its disk (the tests' servers: synchronous_commit off).
func TestReplicationOfASingleServer(t *testing.T) {
	store, _, _ := newStore(t) // parallel
	r, err := store.Replication(context.Background())
	if err != nil || r.CommitWaits || r.StandbyNames != "" || r.Attached != 0 || r.Streaming != 0 || r.AtRisk() != (r.SynchronousCommit == "off") {
		t.Fatalf("replication: %+v, %v; want no standby named, none streaming, at risk only with synchronous_commit off", r, err)
	}
	if want := map[bool]string{true: "commits do not wait for their own disk", false: "no standby"}[r.AtRisk()]; !strings.HasPrefix(r.Describe(), want) {
		t.Fatalf("described as %q", r.Describe())
	}
	// The tests' server commits without waiting for its disk: a crash of
	// the server itself can lose what it acknowledged, and the words say so.
	if r.SynchronousCommit != "off" || !strings.Contains(r.Describe(), "a crash of the primary itself") {
		t.Fatalf("synchronous_commit %s described as %q; want off, and a crash of the primary named", r.SynchronousCommit, r.Describe())
	}
}

// TestReplicationAtRisk: a reading warns (AtRisk) only where an acknowledged
// key can be lost: a standby streams that commits do not wait for, or
// commits do not wait for their own disk.
func TestReplicationAtRisk(t *testing.T) {
	for _, tt := range []struct {
		r      postgres.Replication
		atRisk bool
		says   string
	}{
		{postgres.Replication{SynchronousCommit: "on"}, false, "no standby"},
		{postgres.Replication{SynchronousCommit: "local"}, false, "no standby"},
		{postgres.Replication{SynchronousCommit: "off"}, true, "commits do not wait for their own disk"},
		{postgres.Replication{SynchronousCommit: "on", Streaming: 1}, true, "asynchronous"},
		{postgres.Replication{SynchronousCommit: "local", StandbyNames: "s1", Streaming: 1}, true, "asynchronous"},
		{postgres.Replication{SynchronousCommit: "on", StandbyNames: "s1", CommitWaits: true, Attached: 1, Streaming: 1}, false, "synchronous"},
		{postgres.Replication{SynchronousCommit: "on", StandbyNames: "s1", CommitWaits: true}, false, "synchronous, with no"},
	} {
		if tt.r.AtRisk() != tt.atRisk || !strings.HasPrefix(tt.r.Describe(), tt.says) {
			t.Errorf("%+v: at risk %v, %q; want %v, %q…", tt.r, tt.r.AtRisk(), tt.r.Describe(), tt.atRisk, tt.says)
		}
	}
}
