package desktest

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// Desk is a review desk served over loopback on a database of its own, with
// its fault knobs enabled.
type Desk struct {
	DB     *sqlx.DB
	Server *provider.Server
	URL    string
	Client *deskclient.Client
	srv    *httptest.Server
	calls  deskCalls
}

// StartDesk starts a desk with the provider command's defaults on db, or
// on a fresh database when db is nil, and stops it when t ends.
func StartDesk(t testing.TB, db *sqlx.DB) *Desk {
	t.Helper()
	return StartDeskWith(t, db, provider.DefaultOptions())
}

// StartDeskWith starts a desk with opts (its fault knobs enabled whatever
// opts.Faults says) as StartDesk does. Its expired holds are released only
// when the test calls Server.ReleaseExpiredHolds or runs Server.SweepHolds.
func StartDeskWith(t testing.TB, db *sqlx.DB, opts provider.Options) *Desk {
	t.Helper()
	if db == nil {
		db = pgtest.NewDB(t)
	}
	if err := provider.Migrate(db); err != nil {
		t.Fatal(err)
	}
	opts.Faults = true
	srv, err := provider.NewServer(db, slog.New(slog.NewTextHandler(io.Discard, nil)), opts)
	if err != nil {
		t.Fatal(err)
	}
	d := &Desk{DB: db, Server: srv}
	// A call the desk holds (delay, holdAnswer) reads its body only after
	// the delay: the test's end ends it (serveUntilTheEnd).
	d.srv = testenv.ServeUntilTheEnd(t, d.calls.wrap(d.Server.Handler()))
	d.URL = d.srv.URL
	d.Client = deskclient.New(d.URL, nil)
	return d
}

// Stop stops serving; the database stays.
func (d *Desk) Stop() { d.srv.Close() }

// Faults sets the desk's faults.
func (d *Desk) Faults(t testing.TB, f provider.Faults) {
	t.Helper()
	if err := d.Server.SetFaults(f); err != nil {
		t.Fatal(err)
	}
}

// Submissions counts the submissions the desk holds.
func (d *Desk) Submissions(t testing.TB) int {
	return testenv.Count(t, d.DB, `SELECT count(*) FROM submissions`)
}
