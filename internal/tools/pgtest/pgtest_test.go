package pgtest

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewDBIsMigrated(t *testing.T) {
	db := NewDB(t)
	var tables []string
	err := db.Select(&tables, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = 'public' AND table_name IN ('idempotency_keys', 'demo_requests')
		ORDER BY table_name`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"demo_requests", "idempotency_keys"}
	slices.Sort(want) // as ORDER BY sorts them, whatever the business table is named
	if got := strings.Join(tables, ","); got != strings.Join(want, ",") {
		t.Errorf("migrated tables = %q, want %q", got, strings.Join(want, ","))
	}
}

func TestNewDBGivesDistinctDatabases(t *testing.T) {
	a, b := NewDB(t), NewDB(t)
	var nameA, nameB string
	if err := a.Get(&nameA, "SELECT current_database()"); err != nil {
		t.Fatal(err)
	}
	if err := b.Get(&nameB, "SELECT current_database()"); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB {
		t.Fatalf("two NewDB calls gave the same database %q", nameA)
	}
	// And they are separate: a row in one is not in the other.
	if _, err := a.Exec(`INSERT INTO demo_requests (id, actor_id, topic, note, state, created_at)
		VALUES (gen_random_uuid(), 'actor', 'topic', 'note', 'accepted', now())`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.Get(&n, "SELECT count(*) FROM demo_requests"); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("second database has %d demo_requests, want 0", n)
	}
}

// A database a passed test leaves is dropped, even when the test left a
// connection open (like a service that still runs at cleanup).
func TestAPassedTestsDatabaseIsDropped(t *testing.T) {
	var name string
	t.Run("holds", func(t *testing.T) {
		db, err := sqlx.Open("postgres", NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Get(&name, "SELECT current_database()"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("BEGIN; LOCK demo_requests"); err != nil {
			t.Fatal(err)
		}
	})
	admin, err := sqlx.Open("postgres", server.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var exists bool
	if err := admin.Get(&exists, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name); err != nil {
		t.Fatal(err)
	}
	if name == "" || exists {
		t.Errorf("database %q still exists after its test passed", name)
	}
}

func TestServerSettings(t *testing.T) {
	if server.Source == envURL {
		t.Skip("settings of a TEST_DATABASE_URL server are its own")
	}
	db := NewDB(t)
	for setting, want := range map[string]string{
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
		"max_connections":    "300",
	} {
		var got string
		if err := db.Get(&got, "SHOW "+setting); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
}

func TestStartDurableAndStop(t *testing.T) {
	if os.Getenv(envURL) != "" {
		t.Skip("Start would hand out TEST_DATABASE_URL again")
	}
	if testing.Short() {
		t.Skip("starts a second server")
	}
	s, err := Start(context.Background(), Options{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	db, err := sqlx.Open("postgres", s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var fsync string
	if err := db.Get(&fsync, "SHOW fsync"); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" {
		t.Errorf("Durable server has fsync = %q, want on", fsync)
	}
	// A restart keeps the port and the settings of the start.
	if s.restart != nil {
		for _, mode := range []string{"fast", "immediate"} {
			if err := s.Restart(context.Background(), mode); err != nil {
				t.Fatal(err)
			}
			db.SetMaxIdleConns(0) // the pooled connection died with the server
			if err := db.Get(&fsync, "SHOW fsync"); err != nil || fsync != "on" {
				t.Fatalf("after restart -m %s: fsync = %q, %v", mode, fsync, err)
			}
			db.SetMaxIdleConns(2)
		}
	}
	db.Close()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := db.Ping(); err == nil {
		t.Error("server still answers after Stop")
	}
}

func TestParseURL(t *testing.T) {
	conf, err := parseURL("postgres://app:p%40ss@db.example:6543/admin?sslmode=require")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := conf.URL(), "postgres://app:p%40ss@db.example:6543/admin?sslmode=require"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	if conf.DriverName != "postgres" {
		t.Errorf("DriverName = %q", conf.DriverName)
	}
	conf, err = parseURL("postgresql://127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := conf.URL(), "postgres://postgres:@127.0.0.1:5432/postgres?"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	if _, err := parseURL("mysql://x"); err == nil {
		t.Error("parseURL accepted a mysql:// URL")
	}
}
