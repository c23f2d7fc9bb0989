package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peterldowns/pgtestdb"
)

// PgBouncer is a PgBouncer in transaction mode, configured as production
// runs one: no ignore_startup_parameters, so a client that sends a setting
// PgBouncer does not track is refused, and a session's state (a prepared
// statement, a SET) stays on whichever server connection ran it.
type PgBouncer struct {
	// Addr is host:port of PgBouncer, on 127.0.0.1.
	Addr string
	// Log is the path of PgBouncer's log.
	Log string

	dir       string
	watchdogW *os.File      // closing it stops PgBouncer
	exited    chan struct{} // closed once PgBouncer (its shell) has exited
}

// pgbouncerPaths are where packages put the pgbouncer binary, tried after PATH.
var pgbouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer", "/usr/local/bin/pgbouncer",
	"/opt/homebrew/bin/pgbouncer", "/opt/homebrew/sbin/pgbouncer"}

// pgbouncerHint says what to install when no pgbouncer is found.
const pgbouncerHint = "install PgBouncer: `sudo apt-get install pgbouncer` (Debian, Ubuntu), `brew install pgbouncer` (macOS)"

// findPgBouncer returns the path of the pgbouncer binary.
func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range pgbouncerPaths {
		if isExec(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("no pgbouncer on PATH or in %s: %s", strings.Join(pgbouncerPaths, ", "), pgbouncerHint)
}

// StartPgBouncer starts a PgBouncer in transaction mode on 127.0.0.1 that
// forwards every database to target (host:port of a PostgreSQL, or of a
// proxy in front of one). Clients log in as the server's admin user or as
// pgtestdb's role, with no password (PgBouncer trusts them and logs in to
// the server with the passwords it knows). When the process is root,
// PgBouncer runs as the `postgres` OS user, since it refuses root. Stop
// stops it; so does the end of this process, however it ends.
func (s *Server) StartPgBouncer(ctx context.Context, target string) (*PgBouncer, error) {
	bin, err := findPgBouncer()
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer target %q: %w", target, err)
	}
	prefix, uid, gid, err := asPGUser("PgBouncer")
	if err != nil {
		return nil, err
	}
	base := os.TempDir()
	if uid >= 0 && !traversable(base) {
		base = "/tmp"
	}
	b := &PgBouncer{}
	if b.dir, err = os.MkdirTemp(base, "pgbouncer-"); err != nil {
		return nil, err
	}
	b.Log = filepath.Join(b.dir, "pgbouncer.log")
	fail := func(err error) (*PgBouncer, error) {
		b.Stop()
		return nil, err
	}

	// PgBouncer logs in to the server as the client's user, with the
	// password it has for it here (none is needed by a cluster of the
	// tests, which trusts local connections).
	adminUser, _ := url.PathUnescape(s.Config.User)
	adminPassword, _ := url.PathUnescape(s.Config.Password)
	users := fmt.Sprintf("%q %q\n%q %q\n", adminUser, adminPassword, pgtestdb.DefaultRoleUsername, pgtestdb.DefaultRolePassword)
	if err := os.WriteFile(filepath.Join(b.dir, "userlist.txt"), []byte(users), 0o600); err != nil {
		return fail(err)
	}
	if uid >= 0 {
		for _, p := range []string{b.dir, filepath.Join(b.dir, "userlist.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return fail(fmt.Errorf("chown %s to %s: %w", p, pgUser, err))
			}
		}
	}

	// The port is free when picked but may be taken before PgBouncer binds
	// it: try again.
	for attempt := 1; ; attempt++ {
		p, err := freePort()
		if err != nil {
			return fail(err)
		}
		b.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		ini := filepath.Join(b.dir, "pgbouncer.ini")
		conf := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
logfile = %s
admin_users = %s
`, host, port, p, filepath.Join(b.dir, "userlist.txt"), b.Log, adminUser)
		if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
			return fail(err)
		}
		if err := b.start(prefix, bin, ini); err != nil {
			return fail(err)
		}
		err = b.waitUp(ctx, s, 10*time.Second)
		if err == nil {
			return b, nil
		}
		b.stopProcess()
		log := tail(b.Log, 20)
		if attempt < 3 && strings.Contains(log, "in use") {
			continue
		}
		return fail(fmt.Errorf("pgbouncer (%s) on %s: %w\nits log %s:\n%s", bin, b.Addr, err, b.Log, log))
	}
}

// start runs PgBouncer in the foreground under a shell that stops it once
// our end of the shell's stdin closes: at Stop, or when this process dies
// without running Stop, so that no PgBouncer outlives its test binary.
func (b *PgBouncer) start(prefix []string, bin, ini string) error {
	const script = `trap '' HUP INT QUIT TERM
"$@" &
pid=$!
read -r _ || :
kill -TERM "$pid" 2>/dev/null
wait "$pid"`
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	argv := append(append([]string{}, prefix...), "/bin/sh", "-c", script, "pgbouncer-watchdog", bin, ini)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = r
	cmd.Dir = b.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start pgbouncer: %w", err)
	}
	b.watchdogW, b.exited = w, make(chan struct{})
	go func() {
		cmd.Wait() //nolint:errcheck // its end is what matters
		close(b.exited)
	}()
	return nil
}

// waitUp connects through PgBouncer until it answers or timeout passes.
func (b *PgBouncer) waitUp(ctx context.Context, s *Server, timeout time.Duration) error {
	exited := b.exited
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := ping(ctx, b.URL(s.URL("postgres")), timeout)
	select {
	case <-exited:
		return errors.New("pgbouncer exited")
	default:
	}
	return err
}

// URL is dbURL (a URL of the server, as Server.URL or NewURL give) through
// PgBouncer.
func (b *PgBouncer) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Host = b.Addr
	return u.String()
}

// stopProcess stops PgBouncer and waits for it.
func (b *PgBouncer) stopProcess() {
	if b.watchdogW != nil {
		b.watchdogW.Close()
		<-b.exited
		b.watchdogW = nil
	}
}

// Stop stops PgBouncer and removes its folder. It may be called more than
// once.
func (b *PgBouncer) Stop() error {
	b.stopProcess()
	return os.RemoveAll(b.dir)
}

// NewPgBouncer starts a PgBouncer (StartPgBouncer) in front of target, or
// of the server Main started when target is empty, for the rest of the
// test. Without a pgbouncer binary the test fails, saying what to install:
// it never skips.
func NewPgBouncer(t testing.TB, target string) *PgBouncer {
	t.Helper()
	if server == nil {
		t.Fatal("pgtest: no PostgreSQL server: call pgtest.Main(m) from TestMain in this package")
	}
	if target == "" {
		target = server.addr()
	}
	b, err := server.StartPgBouncer(context.Background(), target)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log (%s):\n%s", b.Log, tail(b.Log, 40))
		}
		b.Stop()
	})
	return b
}

// Addr is host:port of the server Main started, for a proxy in front of it.
func Addr(t testing.TB) string {
	t.Helper()
	if server == nil {
		t.Fatal("pgtest: no PostgreSQL server: call pgtest.Main(m) from TestMain in this package")
	}
	return server.addr()
}
