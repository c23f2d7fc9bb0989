//go:build unix

package formation

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/lib/pq" // the "postgres" driver
)

// pgUser is the OS user the formation runs as when this process is root:
// PostgreSQL and pg_autoctl refuse root.
const pgUser = "postgres"

// findBinDir returns the folder of the PostgreSQL server binaries the
// nodes run: `pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin
// (Debian, Ubuntu), the folder pg_auto_failover's packages install into.
func findBinDir() (string, error) {
	var tried []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		tried = append(tried, strings.TrimSpace(string(out)))
	}
	tried = append(tried, globNewestFirst("/usr/lib/postgresql/*/bin")...)
	for _, dir := range tried {
		if isExec(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (pg_ctl) in pg_config --bindir or /usr/lib/postgresql/*/bin")
}

// globNewestFirst returns the paths matching pattern, whose one * is a
// major version, the newest first.
func globNewestFirst(pattern string) []string {
	paths, _ := filepath.Glob(pattern)
	prefix, suffix, _ := strings.Cut(pattern, "*")
	major := func(p string) int {
		v, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, prefix), suffix))
		return v
	}
	slices.SortStableFunc(paths, func(a, b string) int { return major(b) - major(a) })
	return paths
}

// isExec reports whether path is an executable file.
func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// asPGUser returns how to run program as pgUser when this process is root:
// the runuser prefix of its command and the user's ids, for the folders it
// must own. Any other user runs it as is (nil, -1, -1).
func asPGUser(program string) (prefix []string, uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	u, err := user.Lookup(pgUser)
	if err != nil {
		return nil, -1, -1, fmt.Errorf("running as root, which %s refuses, and no %q OS user to run it as: %w", program, pgUser, err)
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		return nil, -1, -1, fmt.Errorf("running as root, which %s refuses, and no runuser (util-linux) to run it as %q: %w", program, pgUser, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return []string{runuser, "-u", pgUser, "--"}, uid, gid, nil
}

// traversable reports whether others may enter dir and every folder above it.
func traversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	for err == nil {
		fi, statErr := os.Stat(dir)
		if statErr != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if parent := filepath.Dir(dir); parent != dir {
			dir = parent
			continue
		}
		return true
	}
	return false
}

// freePort returns a port of 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ping connects to dsn until it answers or timeout passes.
func ping(ctx context.Context, dsn string, timeout time.Duration) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	end := time.Now().Add(timeout)
	for {
		err := db.PingContext(ctx)
		if err == nil || ctx.Err() != nil || time.Now().After(end) {
			if err != nil {
				return fmt.Errorf("cannot connect within %v: %w", timeout, err)
			}
			return nil
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	return tailOf(string(b), n)
}
