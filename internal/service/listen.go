package service

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Listen listens on addr, the value of setting, and says what to do when
// another process holds it.
func Listen(addr, setting string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("listen on %s: another process listens there (a demo-api already running?): stop it, or pick another address with %s, e.g. %s=127.0.0.1:0 for any free port (a second make run also needs DEV_DB_PORT=54330 for a database of its own)", addr, setting, setting)
	case err != nil:
		return nil, fmt.Errorf("listen on %s (%s): %w", addr, setting, err)
	}
	return ln, nil
}
