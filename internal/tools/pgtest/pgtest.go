// Package pgtest starts a PostgreSQL for tests and tools, hands out fresh
// migrated databases ([NewDB], after [Main] in TestMain), and puts a fault
// proxy in front of one. The server is TEST_DATABASE_URL if set, else a
// throw-away cluster from local binaries, else a postgres:15 container
// (PGTEST_SOURCE=local or docker: that one only); without one, Main fails.
package pgtest

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // driver "postgres"
	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/golangmigrator"

	"github.com/demo-api/demo-api/migrations"
)

const (
	envURL    = "TEST_DATABASE_URL" // an existing server, its user with CREATEDB and CREATEROLE
	envSource = "PGTEST_SOURCE"     // "local", "docker" or empty (local, else docker)
)

// Server is a PostgreSQL reachable for tests.
type Server struct {
	// Config is the admin connection; User and Password are URL-escaped,
	// as pgtestdb.Config.URL pastes them verbatim.
	Config pgtestdb.Config
	Source string // where it comes from, for messages
	Citus  string // the citus version of a Citus coordinator: a schema per test (citus.go)

	stop    func() error // once only
	restart func(ctx context.Context, mode string) error
}

// Options tune a server Start starts; not TEST_DATABASE_URL.
type Options struct {
	Durable  bool              // fsync, synchronous_commit and full_page_writes on
	Settings map[string]string // extra -c name=value, over the defaults
	Locale   string            // initdb --locale (empty: C), one of locale -a
}

// sources are where Start looks for a server past TEST_DATABASE_URL.
var sources = map[string]func(context.Context, Options) (*Server, error){"local": startLocal, "docker": startDocker}

// Start finds or starts a PostgreSQL, as the package comment says.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if raw := os.Getenv(envURL); raw != "" {
		s, err := existing(ctx, raw)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %s=%s: %w", envURL, redact(raw), err)
		}
		return s, nil
	}
	names := []string{"local", "docker"}
	if only := os.Getenv(envSource); only != "" {
		if sources[only] == nil {
			return nil, fmt.Errorf("pgtest: %s=%q: want local, docker or nothing", envSource, only)
		}
		names = []string{only}
	}
	var errs []string
	for _, name := range names {
		s, err := sources[name](ctx, opts)
		if err == nil {
			return s, nil
		}
		errs = append(errs, fmt.Sprintf("  %s: %v", name, err))
	}
	return nil, fmt.Errorf("pgtest: no PostgreSQL for the tests: %s; or set %s to a server whose user may "+
		"create roles and databases (e.g. `docker compose up -d --wait postgres-test` and "+
		"%s=postgres://postgres@127.0.0.1:55433/postgres?sslmode=disable).\n%s",
		installHint, envURL, envURL, strings.Join(errs, "\n"))
}

// existing is the server at TEST_DATABASE_URL.
func existing(ctx context.Context, raw string) (*Server, error) {
	conf, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	s := &Server{Config: conf, Source: envURL, stop: func() error { return nil }}
	if err := ping(ctx, s.Config.URL(), 10*time.Second); err != nil {
		return nil, err
	}
	if s.Citus, err = citusVersion(ctx, s.Config.URL()); s.Citus != "" {
		s.Source += " (Citus " + s.Citus + ", a coordinator: a schema per test, its tables distributed by actor)"
	}
	return s, err
}

// Own starts a server for the test alone; skipped under TEST_DATABASE_URL.
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

// Stop stops and removes what Start started; it may be called again.
func (s *Server) Stop() error { return s.stop() }

// Restart restarts the server (mode fast, or immediate: a crash) and waits until it answers.
func (s *Server) Restart(ctx context.Context, mode string) error {
	if s.restart == nil {
		return fmt.Errorf("pgtest: a server from %s cannot be restarted here", s.Source)
	}
	if err := s.restart(ctx, mode); err != nil {
		return err
	}
	return ping(ctx, s.Config.URL(), 30*time.Second)
}

// URL is a lib/pq URL of database on this server, as the admin user.
func (s *Server) URL(database string) string {
	c := s.Config
	c.Database = url.PathEscape(database)
	return c.URL()
}

func (s *Server) addr() string {
	return net.JoinHostPort(strings.Trim(s.Config.Host, "[]"), s.Config.Port)
}

// server is the one Main started, set before any test runs.
var server *Server

func need(t testing.TB) *Server {
	t.Helper()
	if server == nil {
		t.Fatal("pgtest: no PostgreSQL server: call pgtest.Main(m) from TestMain in this package")
	}
	return server
}

// Addr is host:port of the server Main started, for a proxy in front of it.
func Addr(t testing.TB) string { return need(t).addr() }

// Main is for TestMain: os.Exit(Run(m)).
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main, returning the exit code.
func Run(m *testing.M) int {
	s, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "pgtest: PostgreSQL from %s on %s\n", s.Source, s.addr())
	server = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		code = max(code, 1)
	}
	return code
}

// Migrator migrates the template the test databases clone. A module adds its own before Main.
var Migrator pgtestdb.Migrator = golangmigrator.New(".", golangmigrator.WithFS(migrations.FS))

// NewDB connects to an empty migrated database of the test's own, as its
// owner: a clone of the template, dropped when the test passes.
func NewDB(t testing.TB) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open("postgres", fresh(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// fresh is an empty, migrated database for t.
func fresh(t testing.TB) pgtestdb.Config {
	t.Helper()
	if Citus() {
		return freshCitus(t)
	}
	conf := need(t).Config
	conf.ForceTerminateConnections = true
	return *pgtestdb.Custom(t, conf, Migrator)
}

// NewURL is NewDB's database as a URL, no connection open (DATABASE_URL).
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
	conf := pgtestdb.Config{DriverName: "postgres", Host: cmp.Or(u.Hostname(), "localhost"), Port: cmp.Or(u.Port(), "5432"),
		User: url.User(cmp.Or(u.User.Username(), "postgres")).String(), Options: u.RawQuery,
		Database: cmp.Or(strings.TrimPrefix(u.EscapedPath(), "/"), "postgres")}
	if strings.Contains(conf.Host, ":") { // an IPv6 literal
		conf.Host = "[" + conf.Host + "]"
	}
	if pw, ok := u.User.Password(); ok {
		conf.Password = url.User(pw).String()
	}
	return conf, nil
}

// redact hides a URL's password.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// ping connects to dsn until it answers, timeout passes or ctx ends.
func ping(ctx context.Context, dsn string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var last error // the server's answer, not the deadline's
	for {
		if err = db.PingContext(ctx); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cannot connect within %v: %w", timeout, cmp.Or(last, err))
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitDown reports whether url refuses a connection within timeout.
func WaitDown(url string, timeout time.Duration) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		db, err := sql.Open("postgres", url)
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

// Proxied is dbURL through a fault proxy, link up, closed when t ends.
func Proxied(t testing.TB, dbURL string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := StartProxy(u.Host, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return withHost(dbURL, proxy.Addr()), proxy
}

// withHost is dbURL with host:port addr.
func withHost(dbURL, addr string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Host = addr
	return u.String()
}
