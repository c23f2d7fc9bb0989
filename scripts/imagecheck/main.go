// Command imagecheck proves the container image (make image) serves: it
// starts a throw-away PostgreSQL (internal/tools/pgtest: TEST_DATABASE_URL,
// else the local binaries, else dockertest), runs the image against it with
// a real Docker engine, and checks what a deploy relies on: the image runs
// as a numeric user that is not root and holds no shell; /readyz answers 200;
// its HEALTHCHECK (demo-api healthcheck) turns the container healthy; a
// create answers 201 and its retry replays it byte for byte with
// Idempotent-Replayed: true. It prints the image's size.
//
//	go run ./scripts/imagecheck -image demo-api   (make image-check)
//
// The container shares the host's network (--network host), so that it
// reaches the PostgreSQL on 127.0.0.1 and listens on a free port of its own.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	_ "github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

func main() {
	image := flag.String("image", "demo-api", "the image to check")
	flag.Parse()
	if err := check(*image); err != nil {
		fmt.Fprintln(os.Stderr, "image-check:", err)
		os.Exit(1)
	}
}

func check(image string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	user, err := docker(ctx, "image", "inspect", "-f", "{{.Config.User}}", image)
	if err != nil {
		return err
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		return fmt.Errorf("%s runs as %q, want a numeric user that is not root", image, user)
	}
	if out, err := docker(ctx, "run", "--rm", "--entrypoint", "/bin/sh", image, "-c", "true"); err == nil {
		return fmt.Errorf("%s has a shell (/bin/sh ran: %q)", image, out)
	}

	pg, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		return err
	}
	defer pg.Stop()
	db := "imagecheck_" + strings.ToLower(rand.Text()[:8])
	admin, err := sql.Open("postgres", pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+db); err != nil {
		return fmt.Errorf("create database %s on %s: %w", db, pg.Source, err)
	}
	defer admin.Exec("DROP DATABASE " + db + " WITH (FORCE)")

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	const token = "image-check-token"
	id, err := docker(ctx, "run", "-d", "--network", "host",
		"-e", "DATABASE_URL="+pg.URL(db),
		"-e", "LISTEN_ADDR="+addr,
		"-e", "API_TOKENS=checker:"+auth.Hash(token),
		image)
	if err != nil {
		return err
	}
	defer docker(context.Background(), "rm", "-f", id)
	fmt.Printf("image-check: %s runs as %s on http://%s with PostgreSQL from %s\n", image, user, addr, pg.Source)

	base := "http://" + addr
	if err := until(ctx, "GET /readyz answers 200", func() (bool, error) {
		if running, err := docker(ctx, "inspect", "-f", "{{.State.Running}}", id); err != nil || running != "true" {
			return false, fmt.Errorf("the container is not running (%s, %v)", running, err)
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return errWithLogs(err, id)
	}
	fmt.Println("image-check: /readyz 200")

	post := func() (*http.Response, []byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/demo-requests",
			strings.NewReader(`{"topic":"billing","note":"from the image check"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "image-check-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, body, err
	}
	first, firstBody, err := post()
	if err != nil {
		return err
	}
	if first.StatusCode != http.StatusCreated {
		return fmt.Errorf("create: %s, want 201 Created: %s", first.Status, firstBody)
	}
	again, againBody, err := post()
	if err != nil {
		return err
	}
	if again.StatusCode != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(firstBody, againBody) {
		return fmt.Errorf("retry: %s, Idempotent-Replayed %q, body %s; want the 201 replayed byte for byte (%s)",
			again.Status, again.Header.Get("Idempotent-Replayed"), againBody, firstBody)
	}
	fmt.Println("image-check: create 201, its retry replayed byte for byte")

	if err := until(ctx, "the container's health check says healthy", func() (bool, error) {
		status, err := docker(ctx, "inspect", "-f", "{{.State.Health.Status}}", id)
		if err != nil {
			return false, err
		}
		return status == "healthy", nil
	}); err != nil {
		return errWithLogs(err, id)
	}
	fmt.Println("image-check: healthy (demo-api healthcheck)")

	size, err := docker(ctx, "image", "inspect", "-f", "{{.Size}}", image)
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil {
		return fmt.Errorf("image size %q: %w", size, err)
	}
	fmt.Printf("image-check: %s passes; its size: %.1f MB (%d bytes)\n", image, float64(n)/1e6, n)
	return nil
}

// docker runs the docker CLI and returns its trimmed stdout.
func docker(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return strings.TrimSpace(stdout.String() + stderr.String()), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// until polls ok every 250 ms until it holds, fails, or ctx ends.
func until(ctx context.Context, what string, ok func() (bool, error)) error {
	for {
		done, err := ok()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within the check's time", what)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func errWithLogs(err error, id string) error {
	logs, _ := docker(context.Background(), "logs", "--tail", "30", id)
	return errors.Join(err, fmt.Errorf("the container's log:\n%s", logs))
}

// freeAddr is a loopback address with a port free at the time of asking.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
