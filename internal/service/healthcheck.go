package service

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheckTimeout bounds the whole check, connection and answer.
const healthcheckTimeout = 3 * time.Second

// healthcheckCmd asks the serve on this machine for /healthz and succeeds
// on a 200: the container image's HEALTHCHECK, which has no shell or curl
// to do it with. It asks /healthz, not /readyz: what acts on a container's
// health (Compose's --wait, Swarm's replacement of an unhealthy task) should
// see a process that serves, and replacing it cures a stuck process but not
// a database that is down, which /readyz and the 503s already tell clients.
func healthcheckCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-api healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("listen", cmp.Or(getenv("LISTEN_ADDR"), ":8080"), "the address serve listens on ($LISTEN_ADDR); an unspecified host is asked on loopback")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: demo-api healthcheck [flags]\n\nGETs /healthz from the serve listening on -listen; exits 0 on a 200, 1 otherwise.\n\nFlags:")
		fs.PrintDefaults()
	}
	if wantsHelp(args) {
		fs.SetOutput(stdout)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := healthzURL(*addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s: %s", url, resp.Status)
	}
	fmt.Fprintf(stdout, "healthy: GET %s: %s\n", url, resp.Status)
	return nil
}

// healthzURL is /healthz on addr, a listen address: a host that listens
// on every interface (none, 0.0.0.0, ::) is asked on its loopback.
func healthzURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("LISTEN_ADDR %q: %w", addr, err)
	}
	if port == "" || port == "0" {
		return "", errors.New("LISTEN_ADDR names no port to ask")
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.IsUnspecified() && ip.To4() != nil):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
