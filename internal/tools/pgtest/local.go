package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/peterldowns/pgtestdb"
)

// pgUser is the OS user the cluster runs as when the process is root.
const pgUser = "postgres"

// local is a throw-away cluster from local PostgreSQL binaries.
type local struct {
	bindir string
	prefix []string // "runuser -u postgres --" when root, else empty
	dir    string   // temporary folder: data dir, log, socket
	data   string
	log    string

	watchdog  *exec.Cmd
	watchdogW *os.File // closing it (or dying) tells the watchdog to clean up
}

func startLocal(ctx context.Context, opts Options) (*Server, error) {
	bindir, err := findBinDir()
	if err != nil {
		return nil, err
	}
	l := &local{bindir: bindir}
	prefix, uid, gid, err := asPGUser("PostgreSQL")
	if err != nil {
		return nil, err
	}
	l.prefix = prefix

	base := os.TempDir()
	if uid >= 0 && !traversable(base) {
		base = "/tmp"
	}
	if l.dir, err = os.MkdirTemp(base, "pgtest-"); err != nil {
		return nil, err
	}
	l.data = filepath.Join(l.dir, "data")
	l.log = filepath.Join(l.dir, "postgres.log")
	fail := func(err error) (*Server, error) {
		l.stop()
		return nil, err
	}
	if err := os.Chmod(l.dir, 0o700); err != nil {
		return fail(err)
	}
	if uid >= 0 {
		if err := os.Chown(l.dir, uid, gid); err != nil {
			return fail(fmt.Errorf("chown %s to %s: %w", l.dir, pgUser, err))
		}
	}

	out, err := l.command(ctx, "initdb", "-D", l.data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale="+cmp.Or(opts.Locale, "C"), "--no-sync").CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("initdb (%s): %w\n%s", bindir, err, out))
	}
	l.startWatchdog()

	settings := []string{
		"listen_addresses=127.0.0.1",
		"max_connections=300",
		"shared_buffers=128MB",
	}
	if runtime.GOOS != "windows" {
		settings = append(settings, "unix_socket_directories="+l.dir)
	}
	if !opts.Durable {
		settings = append(settings, "fsync=off", "synchronous_commit=off", "full_page_writes=off")
	}
	settings = append(settings, opts.settings()...)
	var port int
	// The port is free when picked but may be taken before PostgreSQL binds
	// it (other test binaries start clusters at the same time): try again.
	for attempt := 1; ; attempt++ {
		if port, err = freePort(); err != nil {
			return fail(err)
		}
		var o []string
		for _, s := range append(settings, "port="+strconv.Itoa(port)) {
			o = append(o, "-c", quoteOption(s))
		}
		out, err = l.command(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", l.data, "-l", l.log,
			"-o", strings.Join(o, " ")).CombinedOutput()
		if err == nil {
			break
		}
		log := tail(l.log, 30)
		if attempt < 3 && strings.Contains(log, "could not bind") {
			continue
		}
		return fail(fmt.Errorf("pg_ctl start (%s): %w\n%s\nserver log %s:\n%s", bindir, err, out, l.log, log))
	}

	s := &Server{
		Config: pgtestdb.Config{
			DriverName: "postgres",
			Host:       "127.0.0.1",
			Port:       strconv.Itoa(port),
			User:       "postgres",
			Password:   "", // trust
			Database:   "postgres",
			Options:    "sslmode=disable",
		},
		Source:  fmt.Sprintf("local binaries (%s)", bindir),
		stop:    l.stop,
		restart: l.restart,
	}
	if err := ping(ctx, s.Config.URL(), 10*time.Second); err != nil {
		return fail(fmt.Errorf("started PostgreSQL (%s) does not answer: %w\nserver log %s:\n%s", bindir, err, l.log, tail(l.log, 30)))
	}
	return s, nil
}

// command runs one of the PostgreSQL binaries, as pgUser when root.
func (l *local) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append([]string{}, l.prefix...), filepath.Join(l.bindir, exeName(name)))
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = l.dir // pgUser may not be able to enter the current directory
	// English server messages (the log is searched for "could not bind").
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// startWatchdog starts a shell that stops the cluster and removes its folder
// once our end of its stdin closes: at Stop, or when this process dies
// without running Stop (test timeout panic, os.Exit, SIGKILL), so no cluster
// outlives its test binary. It ignores the terminal's signals so that Ctrl-C
// kills the test binary first. It is best effort: without it Stop still works.
func (l *local) startWatchdog() {
	const script = `trap '' HUP INT QUIT TERM
dir=$1; shift
read -r _ || :
if [ -f "$dir/data/postmaster.pid" ]; then "$@" >/dev/null 2>&1; fi
rm -rf "$dir"`
	r, w, err := os.Pipe()
	if err != nil {
		return
	}
	defer r.Close()
	args := append([]string{"-c", script, "pgtest-watchdog", l.dir}, l.prefix...)
	args = append(args, filepath.Join(l.bindir, "pg_ctl"), "stop", "-m", "immediate", "-D", l.data)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdin = r
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		w.Close()
		return
	}
	l.watchdog, l.watchdogW = cmd, w
}

// restart runs pg_ctl restart with mode; the server keeps the options of
// its start (postmaster.opts).
func (l *local) restart(ctx context.Context, mode string) error {
	out, err := l.command(ctx, "pg_ctl", "restart", "-m", mode, "-w", "-t", "60", "-D", l.data, "-l", l.log).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl restart -m %s: %w\n%s\nserver log %s:\n%s", mode, err, out, l.log, tail(l.log, 30))
	}
	return nil
}

// stop stops the cluster if it runs and removes its folder.
func (l *local) stop() error {
	var errs []error
	if _, err := os.Stat(filepath.Join(l.data, "postmaster.pid")); err == nil {
		out, err := l.command(context.Background(), "pg_ctl", "stop", "-m", "immediate", "-w", "-D", l.data).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("pg_ctl stop: %w\n%s", err, out))
		}
	}
	if err := os.RemoveAll(l.dir); err != nil {
		errs = append(errs, err)
	}
	if l.watchdogW != nil {
		l.watchdogW.Close()
		_ = l.watchdog.Wait() // it finds nothing left to do
		l.watchdogW = nil
	}
	return errors.Join(errs...)
}

// binSearch is where findBinDir looks for the server binaries. Tests give
// it a fake folder tree.
type binSearch struct {
	// pgConfig runs `pg_config --bindir` ("" without a pg_config).
	pgConfig func() string
	// lookPath finds a program on PATH (exec.LookPath).
	lookPath func(string) (string, error)
	// globs are patterns whose * is a version, each tried newest first.
	globs []string
}

// binGlobs are where packages put the binaries: Debian and Ubuntu, Homebrew
// (Apple silicon, then Intel), Postgres.app, and the Windows installer.
var binGlobs = []string{
	"/usr/lib/postgresql/*/bin",
	"/opt/homebrew/opt/postgresql@*/bin",
	"/usr/local/opt/postgresql@*/bin",
	"/Applications/Postgres.app/Contents/Versions/*/bin",
}

func defaultBinSearch() binSearch {
	globs := binGlobs
	if runtime.GOOS == "windows" {
		globs = []string{`C:\Program Files\PostgreSQL\*\bin`}
	}
	return binSearch{
		pgConfig: func() string {
			p, err := exec.LookPath("pg_config")
			if err != nil {
				return ""
			}
			out, err := exec.Command(p, "--bindir").Output()
			if err != nil {
				return ""
			}
			return strings.TrimSpace(string(out))
		},
		lookPath: exec.LookPath,
		globs:    globs,
	}
}

// installHint says what to install when no server binaries are found.
const installHint = "install the PostgreSQL server binaries: `sudo apt-get install postgresql` (Debian, Ubuntu), " +
	"`brew install postgresql@16` (macOS, Homebrew) or Postgres.app (https://postgresapp.com), " +
	"the installer of https://www.postgresql.org/download/windows/ (Windows); or run a Docker engine"

// candidates lists the folders to try, in order and without repeats: the
// bindir of pg_config, the folders of initdb and pg_ctl on PATH (symbolic
// links resolved, so that all three binaries come from one installation),
// then each of globs, newest version first.
func (b binSearch) candidates() []string {
	var dirs []string
	if d := b.pgConfig(); d != "" {
		dirs = append(dirs, d)
	}
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
	seen := map[string]bool{}
	out := dirs[:0]
	for _, d := range dirs {
		key := d
		if r, err := filepath.EvalSymlinks(d); err == nil {
			key = r
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, d)
		}
	}
	return out
}

// find returns the first candidate holding initdb, pg_ctl and postgres.
func (b binSearch) find() (string, error) {
	for _, dir := range b.candidates() {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb, pg_ctl, postgres) in pg_config --bindir, on PATH or in %s",
		strings.Join(b.globs, ", "))
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if !isExec(filepath.Join(dir, exeName(name))) {
			return false
		}
	}
	return true
}

// findBinDir returns the folder of the server binaries (see binSearch).
func findBinDir() (string, error) { return defaultBinSearch().find() }

// globNewestFirst returns the folders matching pattern, whose one * is a
// version, the newest first ("latest", as Postgres.app names a link, before
// any number).
func globNewestFirst(pattern string) []string {
	dirs, _ := filepath.Glob(pattern)
	star := strings.IndexByte(pattern, '*')
	version := func(dir string) string {
		return strings.TrimSuffix(strings.TrimPrefix(dir, pattern[:star]), pattern[star+1:])
	}
	sort.SliceStable(dirs, func(i, j int) bool { return versionLess(version(dirs[j]), version(dirs[i])) })
	return dirs
}

// exeName is the file name of a program on this OS.
func exeName(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

// versionLess compares "9.6" < "15" numerically, part by part.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea != nil || eb != nil {
			if pa[i] != pb[i] {
				return pa[i] < pb[i]
			}
			continue
		}
		if na != nb {
			return na < nb
		}
	}
	return len(pa) < len(pb)
}

// isExec reports whether path is an executable file (on Windows, a file).
func isExec(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	return runtime.GOOS == "windows" || fi.Mode().Perm()&0o111 != 0
}

// asPGUser returns how to run program (which refuses root) as the
// `postgres` OS user when this process is root: the runuser prefix of its
// command, and that user's ids for the folders it must own. For any other
// user it runs as is (nil, -1, -1).
func asPGUser(program string) (prefix []string, uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	if uid, gid, err = lookupPGUser(); err != nil {
		return nil, -1, -1, err
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		return nil, -1, -1, fmt.Errorf("running as root, which %s refuses, and no runuser (util-linux) to run it as %q: %w", program, pgUser, err)
	}
	return []string{runuser, "-u", pgUser, "--"}, uid, gid, nil
}

func lookupPGUser() (uid, gid int, err error) {
	u, err := user.Lookup(pgUser)
	if err != nil {
		return -1, -1, fmt.Errorf("running as root, which PostgreSQL refuses, and no %q OS user to run it as (e.g. `useradd --system %s`, which `apt-get install postgresql` does): %w", pgUser, pgUser, err)
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return -1, -1, err
	}
	if gid, err = strconv.Atoi(u.Gid); err != nil {
		return -1, -1, err
	}
	return uid, gid, nil
}

// traversable reports whether others may enter dir and all its parents.
func traversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// quoteOption quotes s for the command line pg_ctl builds from -o: a sh
// command line, or a cmd.exe one on Windows.
func quoteOption(s string) string {
	if runtime.GOOS == "windows" {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// settings returns Options.Settings as name=value, sorted by name.
func (o Options) settings() []string {
	var out []string
	for name, value := range o.Settings {
		out = append(out, name+"="+value)
	}
	sort.Strings(out)
	return out
}
