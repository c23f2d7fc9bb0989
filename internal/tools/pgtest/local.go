package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peterldowns/pgtestdb"
)

// pgUser runs PostgreSQL and PgBouncer, which refuse root, when root.
const pgUser = "postgres"

const installHint = "install the PostgreSQL server binaries: `sudo apt-get install postgresql` (Debian, Ubuntu), " +
	"`brew install postgresql@16` (macOS, Homebrew) or Postgres.app (https://postgresapp.com), " +
	"the installer of https://www.postgresql.org/download/windows/ (Windows); or run a Docker engine"

// local is a throw-away cluster from local PostgreSQL binaries.
type local struct {
	bindir, dir, data, log string
	prefix                 []string // runuser -u postgres -- when root
	unwatch                func()   // stops the watchdog
}

// localWatchdog stops the cluster and removes its folder once its stdin
// closes: at stop, or when this process dies (a timeout's panic, SIGKILL).
const localWatchdog = `trap '' HUP INT QUIT TERM
dir=$1; shift
read -r _ || :
if [ -f "$dir/data/postmaster.pid" ]; then "$@" >/dev/null 2>&1; fi
rm -rf "$dir"`

func startLocal(ctx context.Context, opts Options) (*Server, error) {
	bindir, err := defaultBinSearch().find()
	if err != nil {
		return nil, err
	}
	l := &local{bindir: bindir}
	if l.dir, l.prefix, err = ownDir("PostgreSQL", "pgtest-"); err != nil {
		return nil, err
	}
	l.data, l.log = filepath.Join(l.dir, "data"), filepath.Join(l.dir, "postgres.log")
	fail := func(err error) (*Server, error) { return nil, errors.Join(err, l.stop()) }
	out, err := l.command(ctx, "initdb", "-D", l.data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale="+cmp.Or(opts.Locale, "C"), "--no-sync").CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("initdb (%s): %w\n%s", bindir, err, out))
	}
	argv := append([]string{"/bin/sh", "-c", localWatchdog, "pgtest-watchdog", l.dir}, l.prefix...)
	l.unwatch, _, _ = watch("/", append(argv, filepath.Join(l.bindir, "pg_ctl"), "stop", "-m", "immediate", "-D", l.data)...)
	settings := append([]string{"listen_addresses=127.0.0.1"}, opts.settings()...)
	if runtime.GOOS != "windows" {
		settings = append(settings, "unix_socket_directories="+l.dir)
	}
	port, err := onFreePort(func(port int) (bool, error) {
		var o []string
		for _, s := range append(settings, "port="+strconv.Itoa(port)) {
			o = append(o, "-c", quoteOption(s))
		}
		out, err := l.command(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", l.data, "-l", l.log,
			"-o", strings.Join(o, " ")).CombinedOutput()
		if err != nil {
			log := l.logTail()
			return strings.Contains(log, "could not bind"), fmt.Errorf("pg_ctl start (%s): %w\n%s\n%s", bindir, err, out, log)
		}
		return false, nil
	})
	if err != nil {
		return fail(err)
	}
	s := &Server{Config: ownConfig("127.0.0.1", port, ""), Source: fmt.Sprintf("local binaries (%s)", bindir),
		stop: sync.OnceValue(l.stop), restart: l.restart}
	return s.answering(ctx, 10*time.Second, l.logTail)
}

// ownConfig is the admin connection of a server Start started.
func ownConfig(host string, port int, password string) pgtestdb.Config {
	return pgtestdb.Config{DriverName: "postgres", Host: host, Port: strconv.Itoa(port), User: "postgres",
		Password: password, Database: "postgres", Options: "sslmode=disable"}
}

// answering is s once it answers within timeout; else s is stopped.
func (s *Server) answering(ctx context.Context, timeout time.Duration, log func() string) (*Server, error) {
	if err := ping(ctx, s.Config.URL(), timeout); err != nil {
		return nil, errors.Join(fmt.Errorf("PostgreSQL from %s does not answer on %s: %w\n%s", s.Source, s.addr(), err, log()), s.Stop())
	}
	return s, nil
}

// command runs a PostgreSQL binary as pgUser when root, in English.
func (l *local) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(slices.Clone(l.prefix), filepath.Join(l.bindir, exeName(name)))
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], args...)...)
	cmd.Dir = l.dir // pgUser may not enter the current directory
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// watch starts argv, a shell in dir that ignores Ctrl-C and acts once its
// stdin closes: at stop, or when this process dies; exited ends with it.
func watch(dir string, argv ...string) (stop func(), exited context.Context, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdin, cmd.Env = dir, r, append(os.Environ(), "LC_ALL=C")
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, nil, err
	}
	exited, done := context.WithCancel(context.Background())
	go func() {
		_ = cmd.Wait() // its end is what matters
		done()
	}()
	return sync.OnceFunc(func() { w.Close(); <-exited.Done() }), exited, nil
}

// restart runs pg_ctl restart, which keeps the start's options.
func (l *local) restart(ctx context.Context, mode string) error {
	out, err := l.command(ctx, "pg_ctl", "restart", "-m", mode, "-w", "-t", "60", "-D", l.data, "-l", l.log).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl restart -m %s: %w\n%s\n%s", mode, err, out, l.logTail())
	}
	return nil
}

func (l *local) logTail() string { return "server log " + l.log + ":\n" + tail(l.log, 30) }

// stop stops the cluster if it runs and removes its folder.
func (l *local) stop() error {
	var errs []error
	if _, err := os.Stat(filepath.Join(l.data, "postmaster.pid")); err == nil {
		if out, err := l.command(context.Background(), "pg_ctl", "stop", "-m", "immediate", "-w", "-D", l.data).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("pg_ctl stop: %w\n%s", err, out))
		}
	}
	errs = append(errs, os.RemoveAll(l.dir))
	if l.unwatch != nil {
		l.unwatch()
	}
	return errors.Join(errs...)
}

// binSearch is where find looks for the server binaries.
type binSearch struct {
	pgConfig func() string                // `pg_config --bindir`, "" without one
	lookPath func(string) (string, error) // exec.LookPath
	globs    []string                     // each * a version, newest tried first
}

// binGlobs are the folders of Debian, Homebrew (ARM, Intel), Postgres.app.
var binGlobs = []string{"/usr/lib/postgresql/*/bin", "/opt/homebrew/opt/postgresql@*/bin",
	"/usr/local/opt/postgresql@*/bin", "/Applications/Postgres.app/Contents/Versions/*/bin"}

func defaultBinSearch() binSearch {
	b := binSearch{lookPath: exec.LookPath, globs: binGlobs, pgConfig: func() string {
		out, _ := exec.Command("pg_config", "--bindir").Output()
		return strings.TrimSpace(string(out))
	}}
	if runtime.GOOS == "windows" {
		b.globs = []string{`C:\Program Files\PostgreSQL\*\bin`}
	}
	return b
}

// find is the first folder holding initdb, pg_ctl and postgres, of: pg_config's
// bindir, those of initdb and pg_ctl on PATH (links resolved), the globs.
func (b binSearch) find() (string, error) {
	dirs := []string{b.pgConfig()}
	for _, name := range []string{"initdb", "pg_ctl"} {
		if p, err := b.lookPath(name); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	for _, g := range b.globs {
		dirs = append(dirs, globNewestFirst(g)...)
	}
	for _, dir := range dirs {
		if dir != "" && isExec(filepath.Join(dir, exeName("initdb"))) && isExec(filepath.Join(dir, exeName("pg_ctl"))) &&
			isExec(filepath.Join(dir, exeName("postgres"))) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb, pg_ctl, postgres) in pg_config --bindir, on PATH or in %s",
		strings.Join(b.globs, ", "))
}

// globNewestFirst is the folders matching pattern (* a version), newest first.
func globNewestFirst(pattern string) []string {
	dirs, _ := filepath.Glob(pattern)
	before, after, _ := strings.Cut(pattern, "*")
	version := func(dir string) string { return strings.TrimSuffix(strings.TrimPrefix(dir, before), after) }
	sort.SliceStable(dirs, func(i, j int) bool { return versionLess(version(dirs[j]), version(dirs[i])) })
	return dirs
}

// versionLess compares the major versions of folder names ("9.6" < "15");
// a name ("latest", a Postgres.app link) is newer than any number.
func versionLess(a, b string) bool {
	major := func(v string) float64 {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
		return math.Inf(1)
	}
	return major(a) < major(b)
}

func exeName(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

// isExec reports whether path is an executable file (on Windows, a file).
func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && (runtime.GOOS == "windows" || fi.Mode().Perm()&0o111 != 0)
}

// ownDir makes a folder of pattern for program, and when root one of
// pgUser's in /tmp with the prefix that runs program as pgUser.
func ownDir(program, pattern string) (dir string, prefix []string, err error) {
	uid, gid := -1, -1
	base := os.TempDir()
	if os.Geteuid() == 0 {
		base = "/tmp" // where pgUser may enter, unlike root's TMPDIR maybe
		u, err := user.Lookup(pgUser)
		if err != nil {
			return "", nil, fmt.Errorf("running as root, which %s refuses, and no %q OS user to run it as (e.g. `useradd --system %s`, which `apt-get install postgresql` does): %w", program, pgUser, pgUser, err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			return "", nil, fmt.Errorf("running as root, which %s refuses, and no runuser (util-linux) to run it as %q: %w", program, pgUser, err)
		}
		prefix = []string{runuser, "-u", pgUser, "--"}
	}
	if dir, err = os.MkdirTemp(base, pattern); err != nil {
		return "", nil, err
	}
	if uid >= 0 { // MkdirTemp made it 0700
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
	}
	return dir, prefix, nil
}

// onFreePort calls try with a free loopback port, up to three times while
// it fails by a clash (the port taken since the pick), and returns the port.
func onFreePort(try func(port int) (clash bool, err error)) (int, error) {
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		clash, err := try(port)
		if err == nil || !clash || attempt == 3 {
			return port, err
		}
	}
}

// quoteOption quotes s for the command line pg_ctl builds from -o.
func quoteOption(s string) string {
	if runtime.GOOS == "windows" {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// settings are the server's -c name=value: defaults, then Settings by name.
func (o Options) settings() []string {
	out := []string{"max_connections=300", "shared_buffers=128MB"}
	if !o.Durable {
		out = append(out, "fsync=off", "synchronous_commit=off", "full_page_writes=off")
	}
	for _, name := range slices.Sorted(maps.Keys(o.Settings)) {
		out = append(out, name+"="+o.Settings[name])
	}
	return out
}
