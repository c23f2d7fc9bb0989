package service

import (
	"cmp"
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

const healthcheckUsage = "usage: demo-api healthcheck [flags]\n\nGETs /healthz from the serve listening on -listen; exits 0 on a 200, 1 otherwise.\n"

// Healthcheck is demo-api healthcheck, the image's HEALTHCHECK: /healthz,
// not /readyz, since replacing a container cures a stuck process, not a
// database that is down.
func Healthcheck(args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo-api healthcheck", flag.ContinueOnError)
	addr := fs.String("listen", cmp.Or(getenv("LISTEN_ADDR"), ":8080"), "the address serve listens on ($LISTEN_ADDR); an unspecified host is asked on loopback")
	if err := parseFlags(fs, args, healthcheckUsage, stdout); err != nil {
		return err
	}
	url, err := healthzURL(*addr)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: healthcheckTimeout}).Get(url)
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

// healthzURL is /healthz on the listen address addr; every interface
// (none, 0.0.0.0, ::) is asked on loopback.
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
