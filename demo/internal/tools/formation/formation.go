//go:build unix

// Package formation runs a pg_auto_failover formation on this machine for
// the fault campaign's failover scenarios (demo-chaos).
package formation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Formation is a pg_auto_failover formation on this machine: a monitor and
// nodes (a primary and its standbys), each node a pg_autoctl keeper that runs
// its own PostgreSQL, all listening on 127.0.0.1 only and trusting loopback
// connections. When the process is root they run as the `postgres` OS user.
//
// Each keeper runs in a process group of its own, with its PostgreSQL and
// every backend, so that [Formation.Crash] can kill a node the way a
// machine dies: every process at once, nothing shut down.
type Formation struct {
	// URL is the formation's multi-host URL, as `pg_autoctl show uri
	// --formation default` prints it: every node, target_session_attrs=read-write.
	URL string
	// Nodes are the formation's nodes; Nodes[0] is the first primary.
	Nodes []*Node
	// Source says what runs it: pg_autoctl's version and the server binaries.
	Source string

	bin, bindir string
	dir         string
	prefix      []string
	uid, gid    int
	env         []string
	monitorData string
	monitorPort int
	monitor     *keeper
}

// Node is one node of a Formation.
type Node struct {
	// Name is its pg_auto_failover name: node1, node2, …
	Name string
	// Port is its PostgreSQL's port on 127.0.0.1.
	Port int

	pgdata string
	keeper *keeper
}

// Options say what Start starts.
type Options struct {
	// Nodes is the number of nodes, 2 (a primary and a standby) if 0.
	Nodes int
	// Database is the database the nodes create and the URL names.
	Database string
	// Monitor are settings of the monitor (pgautofailover.*: how soon it
	// calls a node failed and how long it waits before it promotes another),
	// name to value; empty: pg_auto_failover's defaults.
	Monitor map[string]string
	// PartitionTimeout is how long a keeper whose primary can reach neither
	// the monitor nor a standby waits before it demotes its PostgreSQL
	// (timeout.network_partition_timeout; 0: pg_auto_failover's 20 s). It
	// must stay below the monitor's pgautofailover.primary_demote_timeout,
	// or a primary cut off from the others may still take writes after its
	// standby is promoted.
	PartitionTimeout time.Duration
	// Settings are PostgreSQL settings of every node, name to value.
	Settings map[string]string
}

// FastFailover are monitor settings that fail over within about ten
// seconds of a primary's death on one machine, instead of about a minute:
// a health check every second, a node unhealthy after 4 s without news
// from its keeper, and 6 s for a lost primary to demote itself (with
// Options.PartitionTimeout at 3 s, below it).
var FastFailover = map[string]string{
	"pgautofailover.health_check_period":               "1000",
	"pgautofailover.health_check_timeout":              "1000",
	"pgautofailover.health_check_max_retries":          "1",
	"pgautofailover.health_check_retry_delay":          "500",
	"pgautofailover.node_considered_unhealthy_timeout": "4000",
	"pgautofailover.primary_demote_timeout":            "6000",
}

// pgAutoctlPaths are where packages put pg_autoctl, tried after PATH.
var pgAutoctlPaths = []string{"/usr/lib/postgresql/*/bin/pg_autoctl", "/usr/pgsql-*/bin/pg_autoctl", "/usr/local/bin/pg_autoctl"}

// PgAutoctlHint says how to get pg_autoctl when it is missing.
const PgAutoctlHint = "install pg_auto_failover: `scripts/setup.sh pg_autoctl` (Debian, Ubuntu: `sudo apt-get install postgresql-15-auto-failover`; elsewhere see https://pg-auto-failover.readthedocs.io)"

// findPgAutoctl returns the path of pg_autoctl.
func findPgAutoctl() (string, error) {
	if p, err := exec.LookPath("pg_autoctl"); err == nil {
		return p, nil
	}
	for _, g := range pgAutoctlPaths {
		for _, p := range globNewestFirst(g) {
			if isExec(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("no pg_autoctl on PATH or in %s: %s", strings.Join(pgAutoctlPaths, ", "), PgAutoctlHint)
}

// Start starts a monitor and opts.Nodes nodes, waits until the
// first is primary and every other a secondary, and returns the formation.
// Stop stops it; so does the end of this process, however it ends.
func Start(ctx context.Context, opts Options) (_ *Formation, err error) {
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	if opts.Database == "" {
		opts.Database = "postgres"
	}
	f := &Formation{}
	if f.bin, err = findPgAutoctl(); err != nil {
		return nil, err
	}
	if f.bindir, err = findBinDir(); err != nil {
		return nil, err
	}
	if f.prefix, f.uid, f.gid, err = asPGUser("pg_auto_failover"); err != nil {
		return nil, err
	}
	base := os.TempDir()
	if f.uid >= 0 && !traversable(base) {
		base = "/tmp"
	}
	if f.dir, err = os.MkdirTemp(base, "formation-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	if err := os.Chmod(f.dir, 0o700); err != nil {
		return nil, err
	}
	if f.uid >= 0 {
		if err := os.Chown(f.dir, f.uid, f.gid); err != nil {
			return nil, fmt.Errorf("chown %s to %s: %w", f.dir, pgUser, err)
		}
	}
	// pg_autoctl keeps its configuration and state under the XDG folders:
	// here, not in the user's home, so that nothing outlives the formation.
	f.env = []string{"PATH=" + f.bindir + ":/usr/bin:/bin", "LC_ALL=C", "HOME=" + f.dir,
		"XDG_CONFIG_HOME=" + filepath.Join(f.dir, "config"), "XDG_DATA_HOME=" + filepath.Join(f.dir, "data"),
		"XDG_RUNTIME_DIR=" + filepath.Join(f.dir, "run")}
	out, _ := f.command(ctx, "--version").CombinedOutput()
	version, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	f.Source = fmt.Sprintf("%s (%s), PostgreSQL binaries %s", version, f.bin, f.bindir)

	// The monitor.
	f.monitorData = filepath.Join(f.dir, "monitor")
	if f.monitorPort, err = freePort(); err != nil {
		return nil, err
	}
	if err := f.run(ctx, "create", "monitor", "--pgdata", f.monitorData, "--pgport", strconv.Itoa(f.monitorPort),
		"--pgctl", filepath.Join(f.bindir, "pg_ctl"), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
		"--auth", "trust", "--no-ssl"); err != nil {
		return nil, err
	}
	if f.monitor, err = f.startKeeper(f.monitorData, "monitor"); err != nil {
		return nil, err
	}
	monitorAdmin := f.monitorURL("postgres")
	if err := ping(ctx, monitorAdmin, 60*time.Second); err != nil {
		return nil, fmt.Errorf("the monitor: %w\n%s", err, tail(f.monitor.log, 20))
	}
	if len(opts.Monitor) > 0 {
		db, err := sql.Open("postgres", monitorAdmin)
		if err != nil {
			return nil, err
		}
		for _, name := range sortedKeys(opts.Monitor) {
			if _, err := db.ExecContext(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = '%s'", name, strings.ReplaceAll(opts.Monitor[name], "'", "''"))); err != nil {
				db.Close()
				return nil, fmt.Errorf("monitor setting %s: %w", name, err)
			}
		}
		_, err = db.ExecContext(ctx, "SELECT pg_reload_conf()")
		db.Close()
		if err != nil {
			return nil, err
		}
	}
	monitor := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=prefer", f.monitorPort)

	// The nodes, one at a time: a standby is a copy of the primary.
	for i := range opts.Nodes {
		n := &Node{Name: fmt.Sprintf("node%d", i+1), pgdata: filepath.Join(f.dir, fmt.Sprintf("node%d", i+1))}
		if n.Port, err = freePort(); err != nil {
			return nil, err
		}
		if err := f.run(ctx, "create", "postgres", "--pgdata", n.pgdata, "--pgport", strconv.Itoa(n.Port),
			"--pgctl", filepath.Join(f.bindir, "pg_ctl"), "--listen", "127.0.0.1", "--hostname", "127.0.0.1",
			"--name", n.Name, "--dbname", opts.Database, "--monitor", monitor, "--auth", "trust", "--no-ssl"); err != nil {
			return nil, err
		}
		if opts.PartitionTimeout > 0 {
			if err := f.run(ctx, "config", "set", "--pgdata", n.pgdata, "timeout.network_partition_timeout",
				strconv.Itoa(int(opts.PartitionTimeout.Seconds()))); err != nil {
				return nil, err
			}
		}
		if i == 0 && len(opts.Settings) > 0 {
			// The standbys copy the primary's folder, these settings with it.
			if err := f.appendSettings(ctx, n.pgdata, opts.Settings); err != nil {
				return nil, err
			}
		}
		if n.keeper, err = f.startKeeper(n.pgdata, n.Name); err != nil {
			return nil, err
		}
		f.Nodes = append(f.Nodes, n)
		// The first must be the primary before a standby can copy it.
		want := []string{"single"}
		if i > 0 {
			want = []string{"primary", "secondary"}
		}
		if err := f.waitStates(ctx, 90*time.Second, want); err != nil {
			return nil, err
		}
	}
	out, err = f.command(ctx, "show", "uri", "--pgdata", f.monitorData, "--formation", "default").Output()
	if err != nil {
		return nil, fmt.Errorf("pg_autoctl show uri: %w", err)
	}
	f.URL = strings.TrimSpace(string(out))
	return f, nil
}

// monitorURL is the monitor's database as user.
func (f *Formation) monitorURL(user string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/pg_auto_failover?sslmode=disable", user, f.monitorPort)
}

// NodeURL is node n's database as the postgres user, directly.
func (f *Formation) NodeURL(n *Node, database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.Port, database)
}

// appendSettings stops the PostgreSQL of pgdata if `create` left it running
// and adds settings to its postgresql.conf, for the keeper to start it with.
func (f *Formation) appendSettings(ctx context.Context, pgdata string, settings map[string]string) error {
	if _, err := os.Stat(filepath.Join(pgdata, "postmaster.pid")); err == nil {
		if out, err := f.pg(ctx, "pg_ctl", "stop", "-m", "fast", "-w", "-D", pgdata).CombinedOutput(); err != nil {
			return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
		}
	}
	var b strings.Builder
	b.WriteString("\n# Options.Settings\n")
	for _, name := range sortedKeys(settings) {
		fmt.Fprintf(&b, "%s = '%s'\n", name, strings.ReplaceAll(settings[name], "'", "''"))
	}
	conf, err := os.OpenFile(filepath.Join(pgdata, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = conf.WriteString(b.String())
	return errors.Join(err, conf.Close())
}

// NodeState is a node as the monitor sees it.
type NodeState struct {
	Node               *Node
	Reported, Assigned string
}

// States returns every node's state as the monitor holds it.
func (f *Formation) States(ctx context.Context) ([]NodeState, error) {
	db, err := sql.Open("postgres", f.monitorURL("postgres"))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node ORDER BY nodeid`)
	if err != nil {
		return nil, fmt.Errorf("the monitor's nodes: %w", err)
	}
	defer rows.Close()
	var out []NodeState
	for rows.Next() {
		var name string
		var s NodeState
		if err := rows.Scan(&name, &s.Reported, &s.Assigned); err != nil {
			return nil, err
		}
		for _, n := range f.Nodes {
			if n.Name == name {
				s.Node = n
			}
		}
		if s.Node != nil {
			out = append(out, s)
		}
	}
	return out, rows.Err()
}

// waitStates waits until the monitor reports the nodes in the states of
// want, in order (the last one repeated for any further node), each reached
// as assigned.
func (f *Formation) waitStates(ctx context.Context, timeout time.Duration, want []string) error {
	deadline := time.Now().Add(timeout)
	var last []NodeState
	var lastErr error
	for {
		last, lastErr = f.States(ctx)
		ok := lastErr == nil && len(last) == len(f.Nodes)
		for i, s := range last {
			w := want[min(i, len(want)-1)]
			ok = ok && s.Reported == w && s.Assigned == w
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var seen []string
			for _, s := range last {
				seen = append(seen, s.Node.Name+" "+s.Reported+"/"+s.Assigned)
			}
			var logs []string
			for _, n := range f.Nodes {
				logs = append(logs, n.Name+":\n"+tail(n.keeper.log, 15))
			}
			return fmt.Errorf("the formation did not reach %v in %s (last: %v, %v)\n%s", want, timeout, seen, lastErr, strings.Join(logs, "\n"))
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// Primary returns the node that takes writes now: reported and assigned
// primary, or wait_primary (a primary whose standbys are away), or single.
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	states, err := f.States(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range states {
		if s.Reported == s.Assigned && slices.Contains([]string{"primary", "wait_primary", "single"}, s.Reported) {
			return s.Node, nil
		}
	}
	return nil, nil
}

// WaitPrimary waits until a node other than old is the primary (Primary),
// and returns it.
func (f *Formation) WaitPrimary(ctx context.Context, old *Node, timeout time.Duration) (*Node, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, err := f.Primary(ctx)
		if err == nil && p != nil && p != old {
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			states, _ := f.States(ctx)
			var seen []string
			for _, s := range states {
				seen = append(seen, s.Node.Name+" "+s.Reported+"/"+s.Assigned)
			}
			return nil, fmt.Errorf("no new primary in %s (the monitor: %v; %v)\nmonitor log:\n%s", timeout, seen, err, tail(f.monitor.log, 20))
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// Crash kills node n as a machine dies: its keeper, its PostgreSQL and
// every backend at once. PostgreSQL's backends leave the keeper's process
// group (each is a group of its own), and a backend whose postmaster died
// may still finish what it was doing, answer its client and send WAL; so
// Crash stops every process of the node first (SIGSTOP: none runs another
// instruction), then kills them all (SIGKILL). Nothing is shut down or
// flushed beyond what the kernel already holds. The node stays down. at
// is the moment of the crash: no process of the node ran after it.
func (f *Formation) Crash(n *Node) (at time.Time, err error) {
	k := n.keeper
	if k == nil || k.cmd == nil {
		return time.Time{}, fmt.Errorf("%s is not running", n.Name)
	}
	pids, err := descendants(k.cmd.Process.Pid)
	if err != nil {
		return time.Time{}, err
	}
	at = time.Now()
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return at, k.kill(syscall.SIGKILL)
}

// PauseWALSenders stops primary n's WAL senders (SIGSTOP), as a
// replication link slower than loopback would hold back what its standbys
// have: the primary's WAL goes on, and no standby receives any of it
// until resume (SIGCONT) is called. Under synchronous replication the
// primary's commits wait meanwhile; under asynchronous replication they
// are acknowledged without the standbys. (Pausing a standby's receiver
// instead would not do: what the sender wrote waits in the kernel's socket
// buffers, and the receiver reads it after the primary is gone.)
func (f *Formation) PauseWALSenders(ctx context.Context, n *Node) (resume func(), err error) {
	db, err := sql.Open("postgres", f.NodeURL(n, "postgres"))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT pid FROM pg_stat_replication`)
	if err != nil {
		return nil, fmt.Errorf("the WAL senders of %s: %w", n.Name, err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("%s has no WAL sender: no standby streams from it", n.Name)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	return func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}, nil
}

// descendants returns pid and every process below it, from ps.
func descendants(pid int) ([]int, error) {
	out, err := exec.Command("ps", "-A", "-o", "pid=,ppid=").Output()
	if err != nil {
		return nil, fmt.Errorf("ps: %w", err)
	}
	children := map[int][]int{}
	for line := range strings.Lines(string(out)) {
		var p, pp int
		if _, err := fmt.Sscan(line, &p, &pp); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	all := []int{pid}
	for i := 0; i < len(all); i++ {
		all = append(all, children[all[i]]...)
	}
	return all, nil
}

// SetReplicationQuorum sets whether node n's commits count for the
// primary's synchronous replication (`pg_autoctl set node
// replication-quorum`): with every standby out of the quorum, the monitor
// sets the primary's synchronous_standby_names to ” and commits stop
// waiting for any standby. It returns once the primary runs with it.
func (f *Formation) SetReplicationQuorum(ctx context.Context, n *Node, quorum bool) error {
	// pg_autoctl 2.0 may log an error about the monitor's node list after
	// it set the value; the outcome is checked on the primary below.
	out, err := f.command(ctx, "set", "node", "replication-quorum", strconv.FormatBool(quorum), "--pgdata", n.pgdata).CombinedOutput()
	deadline := time.Now().Add(30 * time.Second)
	for {
		names, qerr := f.SyncStandbyNames(ctx)
		if qerr == nil && (names == "") == !quorum {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("replication-quorum %t on %s: the primary's synchronous_standby_names is %q (%v); pg_autoctl said %v:\n%s",
				quorum, n.Name, names, qerr, err, out)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// SyncStandbyNames returns the primary's synchronous_standby_names.
func (f *Formation) SyncStandbyNames(ctx context.Context) (string, error) {
	p, err := f.Primary(ctx)
	if err != nil {
		return "", err
	}
	if p == nil {
		return "", errors.New("no primary")
	}
	db, err := sql.Open("postgres", f.NodeURL(p, "postgres"))
	if err != nil {
		return "", err
	}
	defer db.Close()
	var names string
	err = db.QueryRowContext(ctx, "SHOW synchronous_standby_names").Scan(&names)
	return names, err
}

// Stop stops every node and the monitor and removes the formation's folder.
// It may be called more than once.
func (f *Formation) Stop() error {
	for _, n := range f.Nodes {
		n.keeper.kill(syscall.SIGINT)
	}
	f.monitor.kill(syscall.SIGINT)
	return os.RemoveAll(f.dir)
}

// Logs are the keepers' logs (pg_autoctl's), by name, for a failed run.
func (f *Formation) Logs() map[string]string {
	out := map[string]string{}
	if f.monitor != nil {
		out["monitor"] = f.monitor.log
	}
	for _, n := range f.Nodes {
		out[n.Name] = n.keeper.log
	}
	return out
}

// command is pg_autoctl with args, as pgUser when root.
func (f *Formation) command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, f.prefix...), f.bin), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = f.dir, f.env
	return cmd
}

// pg is one of the server binaries, as pgUser when root.
func (f *Formation) pg(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, f.prefix...), filepath.Join(f.bindir, name)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = f.dir, f.env
	return cmd
}

// run runs pg_autoctl with args to its end.
func (f *Formation) run(ctx context.Context, args ...string) error {
	if out, err := f.command(ctx, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_autoctl %s: %w\n%s", strings.Join(args, " "), err, tailOf(string(out), 25))
	}
	return nil
}

// keeper is a `pg_autoctl run` in a process group of its own, with a
// watchdog that stops the group once our end of the watchdog's stdin
// closes: at kill, or when this process dies without calling it.
type keeper struct {
	cmd       *exec.Cmd
	exited    chan struct{}
	watchdogW *os.File
	log       string
}

// startKeeper runs `pg_autoctl run` for pgdata, logging to name.log.
func (f *Formation) startKeeper(pgdata, name string) (*keeper, error) {
	k := &keeper{log: filepath.Join(f.dir, name+".log")}
	logFile, err := os.OpenFile(k.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	argv := append(append([]string{}, f.prefix...), f.bin, "run", "--pgdata", pgdata)
	k.cmd = exec.Command(argv[0], argv[1:]...)
	k.cmd.Dir, k.cmd.Env = f.dir, f.env
	k.cmd.Stdout, k.cmd.Stderr = logFile, logFile
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := k.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pg_autoctl run (%s): %w", name, err)
	}
	k.exited = make(chan struct{})
	go func() {
		k.cmd.Wait() //nolint:errcheck // its end is what matters
		close(k.exited)
	}()
	// The watchdog: SIGINT to the group (a fast stop of PostgreSQL), and
	// SIGKILL 10 s later if anything is left.
	const script = `trap '' HUP INT QUIT TERM
read -r _ || :
kill -INT -- "-$1" 2>/dev/null || exit 0
i=0
while [ $i -lt 100 ] && kill -0 -- "-$1" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
kill -KILL -- "-$1" 2>/dev/null
exit 0`
	r, w, err := os.Pipe()
	if err != nil {
		k.cmd.Process.Kill()
		return nil, err
	}
	defer r.Close()
	wd := exec.Command("/bin/sh", "-c", script, "formation-watchdog", strconv.Itoa(k.cmd.Process.Pid))
	wd.Stdin, wd.Dir = r, "/"
	if err := wd.Start(); err != nil {
		w.Close()
		syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		return nil, err
	}
	go wd.Wait() //nolint:errcheck // best effort
	k.watchdogW = w
	return k, nil
}

// kill sends sig to the keeper's whole group, waits up to 10 s for the
// keeper to end (then kills the group), and lets its watchdog go.
func (k *keeper) kill(sig syscall.Signal) error {
	if k == nil || k.cmd == nil {
		return nil
	}
	pgid := k.cmd.Process.Pid
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
	}
	select {
	case <-k.exited:
	case <-time.After(10 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-k.exited
	}
	// A group's other processes (PostgreSQL's) may outlive its leader by
	// a moment.
	for range 100 {
		if syscall.Kill(-pgid, 0) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	if k.watchdogW != nil {
		k.watchdogW.Close()
		k.watchdogW = nil
	}
	k.cmd = nil
	return err
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func tailOf(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
