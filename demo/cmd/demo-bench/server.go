package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
)

// moduleRoot is the folder of go.mod, found upwards from the working
// directory (make bench runs from the repository root).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run make bench from the repository")
		}
		dir = parent
	}
}

// goTool is the go command: the one on PATH, else the one of this toolchain.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// buildServer builds ./cmd/demo-api into dir and returns the binary's path.
func buildServer(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "demo-api")
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, "./cmd/demo-api")
	cmd.Dir = root
	cmd.Env = os.Environ()
	if !strings.Contains(os.Getenv("GOFLAGS"), "-mod=") {
		cmd.Env = append(cmd.Env, "GOFLAGS=-mod=mod "+os.Getenv("GOFLAGS"))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/demo-api: %w\n%s", err, out)
	}
	return bin, nil
}

// serverProc is a running server: demo-api serve, or the baseline server.
type serverProc struct {
	name string
	cmd  *exec.Cmd
	base string // http://127.0.0.1:port
	// pprof is its profiler, http://127.0.0.1:port/debug/pprof/, when it
	// runs with PPROF_ADDR (-profile); empty otherwise.
	pprof string
	log   string // its stderr
	done  chan error
}

// serverEnv is the environment of both servers: a loopback port of their
// choosing, the bench's token for actor "bench", JSON logs (to a file), and
// the sweeper idle so that every statement during a phase is a request's,
// and the bound on new keys far above what one actor sends here.
func serverEnv(databaseURL, token string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + databaseURL,
		"LISTEN_ADDR=127.0.0.1:0",
		"API_TOKENS=bench:" + auth.Hash(token),
		"LOG_FORMAT=json",
		"SWEEP_INTERVAL=1h",
		"NEW_KEYS_PER_SECOND=1000000", "NEW_KEYS_BURST=1000000",
	}, extraServerEnv...)
}

// extraServerEnv is added to every server's environment: PPROF_ADDR with
// -profile.
var extraServerEnv []string

// startAPI runs bin serve (which migrates the database first).
func startAPI(ctx context.Context, name, bin, dir, databaseURL, token string) (*serverProc, error) {
	return startServer(ctx, name, []string{bin, "serve"}, dir, serverEnv(databaseURL, token))
}

// startBaseline runs this program again as the baseline server (see
// baseline.go), on a database that startAPI has migrated.
func startBaseline(ctx context.Context, name, dir, databaseURL, token string, env ...string) (*serverProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start the baseline server: %w", err)
	}
	return startServer(ctx, name, []string{self, baselineCommand}, dir, append(serverEnv(databaseURL, token), env...))
}

// startServer runs argv with env, learns its address from the line
// "<name> listening on http://ADDR" it prints first, and waits for /readyz.
// Its stderr goes to dir/name.log.
func startServer(ctx context.Context, name string, argv []string, dir string, env []string) (*serverProc, error) {
	s := &serverProc{
		name: name,
		log:  filepath.Join(dir, name+".log"),
		done: make(chan error, 1),
	}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = env
	s.cmd.Stderr = logf
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	_, addr, ok := strings.Cut(strings.TrimSpace(line), " listening on ")
	if !ok {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		return nil, fmt.Errorf("server %s printed no address (%v); its log:\n%s", name, err, tailFile(s.log, 20))
	}
	s.base = addr
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PPROF_ADDR=") }) {
		// The line after the address: "<name> pprof on http://ADDR/debug/pprof/".
		line, err := out.ReadString('\n')
		if _, url, ok := strings.Cut(strings.TrimSpace(line), " pprof on "); ok {
			s.pprof = url
		} else {
			s.cmd.Process.Kill()
			s.cmd.Wait()
			return nil, fmt.Errorf("server %s printed no profiler address (%q, %v)", name, line, err)
		}
	}
	go io.Copy(io.Discard, out) // the pipe must not fill up
	go func() { s.done <- s.cmd.Wait() }()

	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			return nil, fmt.Errorf("server %s exited before it was ready (%v); its log:\n%s", name, err, tailFile(s.log, 20))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("server %s not ready within 30s; its log:\n%s", name, tailFile(s.log, 20))
		}
	}
}

// memory returns the server's peak and current resident set in bytes
// (Linux only).
func (s *serverProc) memory() (peak, current int64, err error) {
	return memory(s.cmd.Process.Pid)
}

// stop sends SIGTERM and waits up to 10s, then kills.
func (s *serverProc) stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil { // Windows has no SIGTERM
		_ = s.cmd.Process.Kill()
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
