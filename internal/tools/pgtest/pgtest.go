// Package pgtest starts a PostgreSQL for tests and benchmarks and hands out
// fresh migrated databases.
//
// A package whose tests need a database calls [Main] from its TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and each test then asks for its own database with [NewDB] (or [NewURL]):
// a clone of a template that pgtestdb migrates once with [migrations.FS], so a
// new database costs a CREATE DATABASE ... TEMPLATE, not a migration run; or
// a database that an earlier test of the package passed with, emptied.
//
// The server comes from, in this order: TEST_DATABASE_URL; a throw-away
// cluster from local PostgreSQL binaries (initdb, pg_ctl); a postgres:15
// container through dockertest. If none works, Main fails the run: tests that
// need PostgreSQL never skip silently. PGTEST_SOURCE=docker (or local) takes
// that one only, e.g. to run the tests as on a laptop with Docker and no
// PostgreSQL binaries.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // driver "postgres"
	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/common"
	"github.com/peterldowns/pgtestdb/migrators/golangmigrator"

	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/migrations"
)

// envURL names the environment variable that points the tests at an existing
// server instead of starting one.
const envURL = "TEST_DATABASE_URL"

// envSource names the environment variable that picks where Start takes its
// server from, past TEST_DATABASE_URL: "local" (the local binaries only),
// "docker" (dockertest only), or empty (the local binaries, else dockertest).
const envSource = "PGTEST_SOURCE"

// Server is a PostgreSQL reachable for tests.
type Server struct {
	// Config is the admin connection (DriverName "postgres", i.e. lib/pq). Its
	// User and Password are URL-escaped, because pgtestdb.Config.URL pastes
	// them into the URL verbatim.
	Config pgtestdb.Config
	// Source says where the server comes from: "TEST_DATABASE_URL",
	// "local binaries (/usr/lib/postgresql/15/bin)" or "dockertest (postgres:15)".
	Source string
	// Citus is the version of the citus extension when the server is a
	// Citus coordinator (TEST_DATABASE_URL only): each test then gets a
	// schema of the one database, not a database (citus.go).
	Citus string

	stopOnce sync.Once
	stopErr  error
	stop     func() error // nil when there is nothing to stop
	restart  func(ctx context.Context, mode string) error
}

// Options tune the server that Start starts. They do not apply to
// TEST_DATABASE_URL.
type Options struct {
	// Durable keeps PostgreSQL's defaults for fsync, synchronous_commit and
	// full_page_writes. When false (tests), all three are off: a crash can
	// lose the cluster, which is fine for a throw-away one, and commits are
	// much cheaper.
	Durable bool
	// Settings are extra server settings, name to value, passed as -c
	// name=value after the defaults (so they may override them), e.g.
	// {"shared_preload_libraries": "pg_stat_statements"}.
	Settings map[string]string
	// Locale is the cluster's initdb --locale (empty: C), e.g. en_US.UTF-8
	// to measure a language collation; the locale must exist (locale -a).
	Locale string
}

// Start finds or starts a PostgreSQL, in this order:
//
//  1. TEST_DATABASE_URL if set (a postgres:// URL, parsed into Config). Its
//     user needs CREATEDB and CREATEROLE (pgtestdb creates a role and
//     databases).
//  2. A throw-away cluster from local PostgreSQL binaries (initdb, pg_ctl,
//     postgres), in the first folder that holds all three of: `pg_config
//     --bindir`; the folders of initdb and pg_ctl on PATH;
//     /usr/lib/postgresql/*/bin (Debian, Ubuntu);
//     /opt/homebrew/opt/postgresql@*/bin and /usr/local/opt/postgresql@*/bin
//     (Homebrew); /Applications/Postgres.app/Contents/Versions/*/bin; on
//     Windows C:\Program Files\PostgreSQL\*\bin; each newest version
//     first. When the process is root, the cluster runs as the `postgres` OS
//     user (through runuser), since PostgreSQL refuses to run as root.
//  3. dockertest with the postgres:15 image, if a Docker engine answers.
//
// PGTEST_SOURCE=local or docker tries that one only. Otherwise the error
// says what to install and what each attempt said.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if raw := os.Getenv(envURL); raw != "" {
		conf, err := parseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %s: %w", envURL, err)
		}
		s := &Server{Config: conf, Source: envURL}
		if err := ping(ctx, s.Config.URL(), 10*time.Second); err != nil {
			return nil, fmt.Errorf("pgtest: %s=%s: %w", envURL, redact(raw), err)
		}
		if s.Citus, err = citusVersion(ctx, s.Config.URL()); err != nil {
			return nil, fmt.Errorf("pgtest: %s=%s: %w", envURL, redact(raw), err)
		}
		if s.Citus != "" {
			s.Source += " (Citus " + s.Citus + ", a coordinator: a schema per test, its tables distributed by actor)"
		}
		return s, nil
	}

	source := os.Getenv(envSource)
	switch source {
	case "":
	case "local":
		s, err := startLocal(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %s=local: %w; %s", envSource, err, installHint)
		}
		return s, nil
	case "docker":
		s, err := startDocker(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %s=docker: %w", envSource, err)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("pgtest: %s=%q: want local, docker or nothing", envSource, source)
	}
	s, localErr := startLocal(ctx, opts)
	if localErr == nil {
		return s, nil
	}
	s, dockerErr := startDocker(ctx, opts)
	if dockerErr == nil {
		return s, nil
	}
	return nil, fmt.Errorf("pgtest: no PostgreSQL for the tests: %s; "+
		"or set %s to a server whose user may create roles and databases "+
		"(e.g. `docker compose up -d --wait postgres-test` and "+
		"%s=postgres://postgres@127.0.0.1:55433/postgres?sslmode=disable).\n"+
		"  local binaries: %v\n  dockertest: %v", installHint, envURL, envURL, localErr, dockerErr)
}

// Own starts a server of the test's own with opts (Start), stopped when
// the test ends. A test that needs one (its own settings, a restart) is
// skipped under TEST_DATABASE_URL, which Start would hand out instead.
func Own(t testing.TB, opts Options) *Server {
	t.Helper()
	if os.Getenv(envURL) != "" {
		t.Skip("needs a PostgreSQL of its own; " + envURL + " is shared")
	}
	pg, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	return pg
}

// Stop stops what Start started: nothing for TEST_DATABASE_URL; pg_ctl stop
// -m immediate and removal of the temporary folder for local binaries; a
// purge of the container for dockertest. It may be called more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.stop != nil {
			s.stopErr = s.stop()
		}
	})
	return s.stopErr
}

// Restart restarts the server with `pg_ctl restart -m mode` (fast: the
// sessions are ended cleanly; immediate: as after a crash, with recovery at
// the start), and waits until it answers. A server from local binaries is
// restarted with pg_ctl, a container by stopping it with the signal of mode
// and starting it again; TEST_DATABASE_URL cannot be restarted.
func (s *Server) Restart(ctx context.Context, mode string) error {
	if s.restart == nil {
		return fmt.Errorf("pgtest: a server from %s cannot be restarted here", s.Source)
	}
	if err := s.restart(ctx, mode); err != nil {
		return err
	}
	return ping(ctx, s.Config.URL(), 30*time.Second)
}

// URL is a lib/pq URL for a database on this server, connecting as the admin
// user.
func (s *Server) URL(database string) string {
	c := s.Config
	c.Database = url.PathEscape(database)
	return c.URL()
}

// addr is host:port of the server.
func (s *Server) addr() string {
	return net.JoinHostPort(strings.Trim(s.Config.Host, "[]"), s.Config.Port)
}

// server is the one Main started, for NewDB and NewURL. It is written before
// m.Run starts any test and never again.
var server *Server

// Main is for TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// It starts a server (Options{}), prints one line to stderr naming where it
// comes from, runs the tests, stops the server and exits with the tests' code.
// If no server can be had it prints why and exits 1: tests never skip silently.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain with set-up of its own: it
// returns the code to exit with.
func Run(m *testing.M) int {
	s, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "pgtest: PostgreSQL from %s on %s\n", s.Source, s.addr())
	server = s
	code := m.Run()
	if err := dropSpares(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stopping PostgreSQL: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// migrator migrates the template database that every test database is
// cloned from. pgtestdb names the template after a hash of the migrations, so
// it is migrated once per server (or again when the migrations change).
var migrator pgtestdb.Migrator = golangmigrator.New(".", golangmigrator.WithFS(migrations.FS))

// Extra gives every test database more schema after the template's: the
// migrations of fsys's folder dir, with their own migrations table. A
// module built on this one (the full demo) calls it in TestMain, before
// Main.
func Extra(fsys fs.FS, dir, table string) {
	migrator = extended{base: migrator, fsys: fsys, dir: dir, table: table}
}

// extended is base's schema, then the migrations of fsys's dir.
type extended struct {
	base  pgtestdb.Migrator
	fsys  fs.FS
	dir   string
	table string
}

func (e extended) Hash() (string, error) {
	a, err := e.base.Hash()
	if err != nil {
		return "", err
	}
	b, err := common.HashDirs(e.fsys, "*.sql", e.dir)
	return a + "-" + b, err
}

// migrationTables are the tables that say which migrations of m ran:
// golang-migrate's schema_migrations, then each Extra's.
func migrationTables(m pgtestdb.Migrator) []string {
	if e, ok := m.(extended); ok {
		return append(migrationTables(e.base), e.table)
	}
	return []string{"schema_migrations"}
}

func (e extended) Migrate(ctx context.Context, db *sql.DB, conf pgtestdb.Config) error {
	if err := e.base.Migrate(ctx, db, conf); err != nil {
		return err
	}
	return postgres.MigrateFS(sqlx.NewDb(db, "postgres"), e.fsys, e.dir, e.table, 0)
}

func testConfig(t testing.TB) pgtestdb.Config {
	t.Helper()
	if server == nil {
		t.Fatal("pgtest: no PostgreSQL server: call pgtest.Main(m) from TestMain in this package")
	}
	return server.Config
}

// NewDB returns a connection to an empty database, migrated with
// migrations.FS, of the test's own until it ends (kept if the test failed,
// for a look; its URL is in the test log). The database is a clone of the
// template or one that an earlier test of the package left and pgtest
// emptied (spare.go). It connects as pgtestdb's role (pgtdbuser: no
// superuser, no CREATEDB), which owns the database. NewDB may only be
// called once Main has started the server; it fails the test otherwise.
func NewDB(t testing.TB) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open("postgres", fresh(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// NewURL is like NewDB but returns the (lib/pq) URL of the fresh database and
// keeps no connection open, for tests that start the service binary or run()
// with DATABASE_URL.
func NewURL(t testing.TB) string {
	t.Helper()
	return fresh(t).URL()
}

// parseURL turns a postgres:// URL into an admin Config.
func parseURL(raw string) (pgtestdb.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return pgtestdb.Config{}, err
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return pgtestdb.Config{}, fmt.Errorf("want a postgres:// URL, not %q", redact(raw))
	}
	conf := pgtestdb.Config{
		DriverName: "postgres",
		Host:       u.Hostname(),
		Port:       u.Port(),
		User:       "postgres",
		Database:   strings.TrimPrefix(u.EscapedPath(), "/"),
		Options:    u.RawQuery,
	}
	if conf.Host == "" {
		conf.Host = "localhost"
	}
	if strings.Contains(conf.Host, ":") { // IPv6 literal
		conf.Host = "[" + conf.Host + "]"
	}
	if conf.Port == "" {
		conf.Port = "5432"
	}
	if conf.Database == "" {
		conf.Database = "postgres"
	}
	if u.User != nil {
		if name := u.User.Username(); name != "" {
			conf.User = escapeUserinfo(name)
		}
		if pw, ok := u.User.Password(); ok {
			conf.Password = escapeUserinfo(pw)
		}
	}
	return conf, nil
}

// escapeUserinfo escapes s for the user or password part of a URL.
func escapeUserinfo(s string) string {
	return url.User(s).String()
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// ping connects to dsn until it answers or timeout passes.
func ping(ctx context.Context, dsn string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var last error
	for {
		err = db.PingContext(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cannot connect within %v: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitDown reports whether the database at url refuses a connection within
// timeout.
func WaitDown(url string, timeout time.Duration) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		db, err := sqlx.Open("postgres", url)
		if err != nil {
			return false
		}
		err = db.Ping()
		db.Close()
		if err != nil {
			return true
		}
	}
	return false
}

// Proxied returns dbURL through a fault proxy of its own (the link up),
// closed when t ends, and the proxy.
func Proxied(t testing.TB, dbURL string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := StartProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	u.Host = proxy.Addr()
	return u.String(), proxy
}
