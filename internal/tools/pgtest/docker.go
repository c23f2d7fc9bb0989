package pgtest

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
	"github.com/peterldowns/pgtestdb"
)

const dockerImage, dockerTag = "postgres", "15"

// startDocker runs a postgres:15 container through dockertest, if a Docker
// engine answers.
func startDocker(ctx context.Context, opts Options) (*Server, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("no Docker client: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = pool.Client.PingWithContext(pingCtx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("no Docker engine answers: %w", err)
	}

	cmd := []string{"postgres", "-c", "max_connections=300", "-c", "shared_buffers=128MB"}
	if !opts.Durable {
		cmd = append(cmd, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, kv := range opts.settings() {
		cmd = append(cmd, "-c", kv)
	}
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: dockerImage,
		Tag:        dockerTag,
		Env: []string{"POSTGRES_PASSWORD=postgres", "POSTGRES_HOST_AUTH_METHOD=trust",
			"POSTGRES_INITDB_ARGS=--locale=" + cmp.Or(opts.Locale, "C")},
		Cmd:    cmd,
		Labels: map[string]string{"github.com/demo-api/demo-api": "pgtest"},
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return nil, fmt.Errorf("docker run %s:%s: %w", dockerImage, dockerTag, err)
	}

	host := res.GetBoundIP("5432/tcp")
	if host == "localhost" {
		host = "127.0.0.1"
	}
	// With a remote engine (DOCKER_HOST=tcp://…) the port is published there.
	if u, err := url.Parse(os.Getenv("DOCKER_HOST")); err == nil && u.Scheme == "tcp" && u.Hostname() != "" {
		host = u.Hostname()
	}
	s := &Server{
		Config: pgtestdb.Config{
			DriverName: "postgres",
			Host:       host,
			Port:       res.GetPort("5432/tcp"),
			User:       "postgres",
			Password:   "postgres",
			Database:   "postgres",
			Options:    "sslmode=disable",
		},
		Source: fmt.Sprintf("dockertest (%s:%s)", dockerImage, dockerTag),
		stop:   func() error { return pool.Purge(res) },
	}

	pool.MaxWait = 90 * time.Second
	err = pool.Retry(func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		db, err := sql.Open("postgres", s.Config.URL())
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	})
	if err != nil {
		_ = pool.Purge(res)
		return nil, fmt.Errorf("container %s:%s does not answer on %s: %w", dockerImage, dockerTag, s.addr(), err)
	}
	return s, nil
}
