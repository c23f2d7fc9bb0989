package pgtest

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
	"github.com/peterldowns/pgtestdb"
)

const dockerImage, dockerTag = "postgres", "15"

// startDocker runs a postgres:15 container through dockertest, if a Docker
// engine answers. Its port is published on 127.0.0.1 (the server trusts
// every connection) at a port picked here, so that a restart of the
// container keeps it.
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
	// With a remote engine (DOCKER_HOST=tcp://…) the port is published
	// there, on its every address; here, on loopback only.
	host, bindIP := "127.0.0.1", "127.0.0.1"
	if u, err := url.Parse(os.Getenv("DOCKER_HOST")); err == nil && u.Scheme == "tcp" && u.Hostname() != "" {
		host, bindIP = u.Hostname(), ""
	}
	var res *dockertest.Resource
	var port int
	// The port is free when picked but may be taken before the engine
	// publishes it: try again.
	for attempt := 1; ; attempt++ {
		if port, err = freePort(); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("pgtest-%d-%d", os.Getpid(), port)
		res, err = pool.RunWithOptions(&dockertest.RunOptions{
			Name:       name,
			Repository: dockerImage,
			Tag:        dockerTag,
			Env: []string{"POSTGRES_PASSWORD=postgres", "POSTGRES_HOST_AUTH_METHOD=trust",
				"POSTGRES_INITDB_ARGS=--encoding=UTF8 --locale=" + cmp.Or(opts.Locale, "C")},
			Cmd:          cmd,
			Labels:       map[string]string{"github.com/demo-api/demo-api": "pgtest"},
			PortBindings: map[docker.Port][]docker.PortBinding{"5432/tcp": {{HostIP: bindIP, HostPort: strconv.Itoa(port)}}},
		}, func(hc *docker.HostConfig) {
			// Not removed when it stops, so that Restart can start it
			// again; Stop removes it.
			hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
		})
		if err == nil {
			break
		}
		// A container that could not start is left created: remove it.
		_ = pool.Client.RemoveContainer(docker.RemoveContainerOptions{ID: name, Force: true, RemoveVolumes: true})
		if attempt < 3 && (strings.Contains(err.Error(), "already allocated") || strings.Contains(err.Error(), "address already in use")) {
			continue
		}
		return nil, fmt.Errorf("docker run %s:%s: %w", dockerImage, dockerTag, err)
	}

	c := &container{pool: pool, res: res}
	s := &Server{
		Config: pgtestdb.Config{
			DriverName: "postgres",
			Host:       host,
			Port:       strconv.Itoa(port),
			User:       "postgres",
			Password:   "postgres",
			Database:   "postgres",
			Options:    "sslmode=disable",
		},
		Source:  fmt.Sprintf("dockertest (%s:%s)", dockerImage, dockerTag),
		stop:    c.stop,
		restart: c.restart,
	}

	// The first start initialises the cluster, which takes a while on a busy
	// machine.
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
		logs := c.logs()
		_ = c.stop()
		return nil, fmt.Errorf("container %s:%s does not answer on %s: %w\ncontainer log:\n%s", dockerImage, dockerTag, s.addr(), err, logs)
	}
	return s, nil
}

// container is a PostgreSQL container that dockertest started.
type container struct {
	pool *dockertest.Pool
	res  *dockertest.Resource
}

// restart stops the container's PostgreSQL as pg_ctl stop -m mode would
// (fast: SIGINT; immediate: SIGQUIT, as after a crash, with recovery at the
// next start) and starts the container again, on the same port.
func (c *container) restart(ctx context.Context, mode string) error {
	sig := map[string]docker.Signal{"smart": docker.SIGTERM, "fast": docker.SIGINT, "immediate": docker.SIGQUIT}[mode]
	if sig == 0 {
		return fmt.Errorf("pgtest: restart mode %q: want smart, fast or immediate", mode)
	}
	id := c.res.Container.ID
	stopCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.pool.Client.KillContainer(docker.KillContainerOptions{ID: id, Signal: sig, Context: stopCtx}); err != nil {
		return fmt.Errorf("pgtest: stop container %s (-m %s): %w", id[:12], mode, err)
	}
	if _, err := c.pool.Client.WaitContainerWithContext(id, stopCtx); err != nil {
		return fmt.Errorf("pgtest: wait for container %s to stop: %w", id[:12], err)
	}
	if err := c.pool.Client.StartContainerWithContext(id, nil, ctx); err != nil {
		return fmt.Errorf("pgtest: start container %s again: %w\ncontainer log:\n%s", id[:12], err, c.logs())
	}
	return nil
}

// stop removes the container and its volumes.
func (c *container) stop() error {
	err := c.pool.Purge(c.res)
	var gone *docker.NoSuchContainer
	if errors.As(err, &gone) {
		return nil
	}
	return err
}

// logs returns the last lines of the container's log, for a message.
func (c *container) logs() string {
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.pool.Client.Logs(docker.LogsOptions{Context: ctx, Container: c.res.Container.ID,
		OutputStream: &out, ErrorStream: &out, Stdout: true, Stderr: true, Tail: "30"})
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	return out.String()
}
