package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
)

const dockerImage, dockerTag = "postgres", "15"

// startDocker runs a postgres:15 container, its port published on loopback
// (it trusts every connection) at a port picked here, which a restart keeps.
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
	cmd := []string{"postgres"}
	for _, kv := range opts.settings() {
		cmd = append(cmd, "-c", kv)
	}
	// A remote engine (DOCKER_HOST=tcp://…) publishes on its every address.
	host, bindIP := "127.0.0.1", "127.0.0.1"
	if u, err := url.Parse(os.Getenv("DOCKER_HOST")); err == nil && u.Scheme == "tcp" && u.Hostname() != "" {
		host, bindIP = u.Hostname(), ""
	}
	var res *dockertest.Resource
	port, err := onFreePort(func(port int) (bool, error) {
		name := fmt.Sprintf("pgtest-%d-%d", os.Getpid(), port)
		res, err = pool.RunWithOptions(&dockertest.RunOptions{
			Name: name, Repository: dockerImage, Tag: dockerTag, Cmd: cmd,
			Env: []string{"POSTGRES_PASSWORD=postgres", "POSTGRES_HOST_AUTH_METHOD=trust",
				"POSTGRES_INITDB_ARGS=--encoding=UTF8 --locale=" + cmp.Or(opts.Locale, "C")},
			Labels:       map[string]string{"github.com/demo-api/demo-api": "pgtest"},
			PortBindings: map[docker.Port][]docker.PortBinding{"5432/tcp": {{HostIP: bindIP, HostPort: strconv.Itoa(port)}}},
		}, func(hc *docker.HostConfig) {
			hc.RestartPolicy = docker.RestartPolicy{Name: "no"} // kept when it stops, for Restart; Stop removes it
		})
		if err != nil { // a container that could not start is left created
			_ = pool.Client.RemoveContainer(docker.RemoveContainerOptions{ID: name, Force: true, RemoveVolumes: true})
			return strings.Contains(err.Error(), "already allocated") || strings.Contains(err.Error(), "address already in use"),
				fmt.Errorf("docker run %s:%s: %w", dockerImage, dockerTag, err)
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	c := &container{pool: pool, res: res}
	s := &Server{Config: ownConfig(host, port, "postgres"), Source: fmt.Sprintf("dockertest (%s:%s)", dockerImage, dockerTag),
		stop: sync.OnceValue(c.stop), restart: c.restart}
	return s.answering(ctx, 90*time.Second, c.logs) // the first start runs initdb: slow on a busy machine
}

// container is a PostgreSQL container that dockertest started.
type container struct {
	pool *dockertest.Pool
	res  *dockertest.Resource
}

// restart stops the container's PostgreSQL as pg_ctl stop -m mode would
// (fast: SIGINT; immediate: SIGQUIT) and starts it again on its port.
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
		return fmt.Errorf("pgtest: start container %s again: %w\n%s", id[:12], err, c.logs())
	}
	return nil
}

// stop removes the container and its volumes.
func (c *container) stop() error {
	err := c.pool.Purge(c.res)
	if _, gone := errors.AsType[*docker.NoSuchContainer](err); gone {
		return nil
	}
	return err
}

// logs is the container log's last lines, for a message.
func (c *container) logs() string {
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.pool.Client.Logs(docker.LogsOptions{Context: ctx, Container: c.res.Container.ID,
		OutputStream: &out, ErrorStream: &out, Stdout: true, Stderr: true, Tail: "30"})
	if err != nil {
		return fmt.Sprintf("(cannot read the container log: %v)", err)
	}
	return "container log:\n" + out.String()
}
