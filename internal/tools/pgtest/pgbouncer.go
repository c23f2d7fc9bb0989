package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peterldowns/pgtestdb"
)

// PgBouncer is a PgBouncer in transaction mode as production runs one: no
// ignore_startup_parameters, and a session's state stays on its connection.
type PgBouncer struct {
	Addr string // host:port, on 127.0.0.1
	Log  string // the path of its log

	dir  string
	halt func() // stops PgBouncer and waits for it
}

// pgbouncerPaths are tried after PATH.
var pgbouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer", "/usr/local/bin/pgbouncer",
	"/opt/homebrew/bin/pgbouncer", "/opt/homebrew/sbin/pgbouncer"}

func findPgBouncer() (string, error) {
	for _, p := range append([]string{"pgbouncer"}, pgbouncerPaths...) {
		if p, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no pgbouncer on PATH or in %s: install PgBouncer: `sudo apt-get install pgbouncer` (Debian, Ubuntu), `brew install pgbouncer` (macOS)",
		strings.Join(pgbouncerPaths, ", "))
}

// pgbouncerWatchdog runs PgBouncer until its stdin closes (see watch).
const pgbouncerWatchdog = "trap '' HUP INT QUIT TERM\n\"$@\" &\npid=$!\nread -r _ || :\nkill -TERM \"$pid\" 2>/dev/null\nwait \"$pid\""

// NewPgBouncer starts a PgBouncer until the test ends, in front of target
// (host:port; empty: the server Main started); without one the test fails.
func NewPgBouncer(t testing.TB, target string) *PgBouncer {
	t.Helper()
	s := need(t)
	bin, err := findPgBouncer()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	host, port, err := net.SplitHostPort(cmp.Or(target, s.addr()))
	if err != nil {
		t.Fatalf("pgtest: pgbouncer target %q: %v", target, err)
	}
	b := &PgBouncer{}
	var prefix []string
	if b.dir, prefix, err = ownDir("PgBouncer", "pgbouncer-"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	b.Log = filepath.Join(b.dir, "pgbouncer.log")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log (%s):\n%s", b.Log, tail(b.Log, 40))
		}
		if b.halt != nil {
			b.halt()
		}
		os.RemoveAll(b.dir)
	})
	// PgBouncer logs in to the server as the client's user, with this password.
	adminUser, _ := url.PathUnescape(s.Config.User)
	adminPassword, _ := url.PathUnescape(s.Config.Password)
	users := fmt.Sprintf("%q %q\n%q %q\n", adminUser, adminPassword, pgtestdb.DefaultRoleUsername, pgtestdb.DefaultRolePassword)
	if err := os.WriteFile(filepath.Join(b.dir, "userlist.txt"), []byte(users), 0o644); err != nil { // in a 0700 folder
		t.Fatalf("pgtest: %v", err)
	}
	_, err = onFreePort(func(p int) (bool, error) {
		b.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		ini := filepath.Join(b.dir, "pgbouncer.ini")
		conf := fmt.Sprintf("[databases]\n* = host=%s port=%s\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %d\n"+
			"unix_socket_dir =\nauth_type = trust\nauth_file = %s\npool_mode = transaction\nmax_client_conn = 1000\n"+
			"default_pool_size = 20\nlogfile = %s\nadmin_users = %s\n",
			host, port, p, filepath.Join(b.dir, "userlist.txt"), b.Log, adminUser)
		if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
			return false, err
		}
		argv := append(slices.Clone(prefix), "/bin/sh", "-c", pgbouncerWatchdog, "pgbouncer-watchdog", bin, ini)
		var exited context.Context
		if b.halt, exited, err = watch(b.dir, argv...); err != nil {
			return false, fmt.Errorf("start pgbouncer: %w", err)
		}
		if err := ping(exited, b.URL(s.URL("postgres")), 10*time.Second); err != nil {
			if exited.Err() != nil {
				err = errors.New("pgbouncer exited")
			}
			b.halt()
			log := tail(b.Log, 20)
			return strings.Contains(log, "in use"), fmt.Errorf("pgbouncer (%s) on %s: %w\nits log %s:\n%s", bin, b.Addr, err, b.Log, log)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return b
}

// URL is dbURL (of the server, as NewURL gives) through PgBouncer.
func (b *PgBouncer) URL(dbURL string) string { return withHost(dbURL, b.Addr) }
