package postgres_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestParseURL: a URL of several hosts, as pg_auto_failover prints it,
// becomes lib/pq's keyword form with the same hosts, ports and settings;
// anything else is left as it is.
func TestParseURL(t *testing.T) {
	type host struct {
		host string
		port uint16
	}
	for _, tt := range []struct {
		name, in string
		same     bool // returned as it is
		hosts    []host
		db, user string
		password string
		tsa      pq.TargetSessionAttrs
		wantErr  bool
	}{
		{name: "pg_auto_failover's", in: "postgres://autoctl@127.0.0.1:5001,127.0.0.1:5002/app?target_session_attrs=read-write&sslmode=disable",
			hosts: []host{{"127.0.0.1", 5001}, {"127.0.0.1", 5002}}, db: "app", user: "autoctl", tsa: pq.TargetSessionAttrsReadWrite},
		{name: "postgresql scheme, password with escapes", in: "postgresql://app:p%40ss%27w%5Cd@db1:6432,db2:6433/orders?sslmode=disable",
			hosts: []host{{"db1", 6432}, {"db2", 6433}}, db: "orders", user: "app", password: `p@ss'w\d`},
		{name: "a host without a port takes the default", in: "postgres://u@db1,db2:5433/d?sslmode=disable",
			hosts: []host{{"db1", 5432}, {"db2", 5433}}, db: "d", user: "u"},
		{name: "IPv6", in: "postgres://u@[::1]:5001,[fe80::1]:5002/d?sslmode=disable",
			hosts: []host{{"::1", 5001}, {"fe80::1", 5002}}, db: "d", user: "u"},
		{name: "three hosts", in: "postgres://u@a:1,b:2,c:3/d?sslmode=disable&target_session_attrs=primary",
			hosts: []host{{"a", 1}, {"b", 2}, {"c", 3}}, db: "d", user: "u", tsa: pq.TargetSessionAttrsPrimary},
		{name: "one host stays a URL", in: "postgres://u@db1:5433/d?sslmode=disable", same: true,
			hosts: []host{{"db1", 5433}}, db: "d", user: "u"},
		{name: "the keyword form stays", in: "host=db1,db2 port=5001,5002 dbname=d user=u sslmode=disable target_session_attrs=read-write", same: true,
			hosts: []host{{"db1", 5001}, {"db2", 5002}}, db: "d", user: "u", tsa: pq.TargetSessionAttrsReadWrite},
		{name: "a port that is no number", in: "postgres://u@db1:x,db2:5433/d", wantErr: true},
		{name: "an unclosed bracket", in: "postgres://u@[::1:5001,db2/d", wantErr: true},
		{name: "ports twice", in: "postgres://u@db1:1,db2:2/d?port=3", wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := postgres.ParseURL(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %q, want an error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.in, err)
			}
			if (got == tt.in) != tt.same {
				t.Fatalf("ParseURL(%q) = %q; returned as it is: %v, want %v", tt.in, got, got == tt.in, tt.same)
			}
			cfg, err := pq.NewConfig(got)
			if err != nil {
				t.Fatalf("lib/pq does not read %q: %v", got, err)
			}
			hosts := []host{{cfg.Host, cfg.Port}}
			for _, m := range cfg.Multi {
				hosts = append(hosts, host{m.Host, m.Port})
			}
			if fmt.Sprint(hosts) != fmt.Sprint(tt.hosts) {
				t.Errorf("hosts %v, want %v (from %q)", hosts, tt.hosts, got)
			}
			if cfg.Database != tt.db || cfg.User != tt.user || cfg.Password != tt.password {
				t.Errorf("dbname %q user %q password %q, want %q %q %q", cfg.Database, cfg.User, cfg.Password, tt.db, tt.user, tt.password)
			}
			if cfg.TargetSessionAttrs != tt.tsa {
				t.Errorf("target_session_attrs %q, want %q", cfg.TargetSessionAttrs, tt.tsa)
			}
		})
	}
}

// TestOpenSeveralHosts opens a pool with a URL of three hosts, in
// pg_auto_failover's form: one where nothing listens (a stopped node), a
// server that takes no writes (as a standby), and the test server. With
// target_session_attrs=read-write its connections reach the last one.
func TestOpenSeveralHosts(t *testing.T) {
	testenv.Long(t, "starts a second PostgreSQL")
	t.Parallel()
	ctx := context.Background()
	readOnly := pgtest.Own(t, pgtest.Options{Settings: map[string]string{"default_transaction_read_only": "on"}})
	// The read-only server gets the test's role and database too, so that
	// only target_session_attrs can turn the pool away from it.
	ro, err := url.Parse(readOnly.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	testURL := pgtest.NewURL(t)
	u, err := url.Parse(testURL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := postgres.Open(ctx, readOnly.URL("postgres"), postgres.LongStatements)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	pw, _ := u.User.Password()
	for _, stmt := range []string{
		"BEGIN READ WRITE",
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", pq.QuoteIdentifier(u.User.Username()), pw),
		"COMMIT",
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	conn, err := admin.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SET default_transaction_read_only = off"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(u.Path[1:])+" OWNER "+pq.QuoteIdentifier(u.User.Username())); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	stopped, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stoppedAddr := stopped.Addr().String()
	stopped.Close() // nothing listens there now

	u.Host = stoppedAddr + "," + ro.Host + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	multi := "postgres://" + u.User.String() + "@" + u.Host + u.Path + "?" + u.RawQuery
	t.Logf("URL %s", multi)
	db, err := postgres.Open(ctx, multi, postgres.KeyStatements)
	if err != nil {
		t.Fatalf("open %s: %v", multi, err)
	}
	defer db.Close()
	// A server is told by its cluster's identifier: its own port is not
	// the address a client dials where a container publishes it.
	const identity = "SELECT system_identifier::text FROM pg_control_system()"
	direct, err := postgres.Open(ctx, testURL, postgres.LongStatements)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	var got, want, readOnlyID string
	for _, q := range []struct {
		db  *sqlx.DB
		out *string
	}{{db, &got}, {direct, &want}, {admin, &readOnlyID}} {
		if err := q.db.GetContext(ctx, q.out, identity); err != nil {
			t.Fatal(err)
		}
	}
	if want == readOnlyID {
		t.Fatalf("the writable and the read-only server have one identifier, %s: the check cannot tell them apart", want)
	}
	if got != want {
		t.Fatalf("the pool reached the server %s, want the writable one at %s (%s)", got, pgtest.Addr(t), want)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO demo_requests (id, actor_id, topic, note, state, created_at) VALUES (gen_random_uuid(), 'a', 't', 'n', 'accepted', now())"); err != nil {
		t.Fatalf("a write through the pool: %v", err)
	}
}
