package postgres

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestEveryDialIsBounded: whichever dial lib/pq makes, the connection it
// gets fails its reads, as a partition needs: a connect's after the
// dialer's limit, or at once when the connect's context ends; a cancel
// request's after cancelLimit, whatever deadline lib/pq sets on it, as the
// end of the server's answer (EOF).
func TestEveryDialIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept and say nothing, as a partitioned server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	d := &boundedDialer{limit: 100 * time.Millisecond}
	addr := ln.Addr().String()
	ended, end := context.WithCancel(context.Background())
	for _, tt := range []struct {
		name   string
		dial   func() (net.Conn, error)
		within time.Duration
	}{
		{"a connect", func() (net.Conn, error) {
			ctx, _ := connecting(context.Background())
			return d.DialContext(ctx, "tcp", addr)
		}, time.Second},
		{"a connect that ends", func() (net.Conn, error) {
			ctx, dialing := connecting(ended)
			c, err := (&boundedDialer{limit: time.Hour}).DialContext(ctx, "tcp", addr) // only the end ends it
			context.AfterFunc(ctx, dialing.end)
			time.AfterFunc(50*time.Millisecond, end)
			return c, err
		}, time.Second},
		{"a cancel request", func() (net.Conn, error) {
			c, err := d.DialTimeout("tcp", addr, time.Hour)
			if err == nil {
				c.SetDeadline(time.Now().Add(time.Hour)) // as lib/pq's dial does, for its connect timeout
			}
			return c, err
		}, cancelLimit + time.Second},
	} {
		c, err := tt.dial()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		start := time.Now()
		_, err = c.Read(make([]byte, 1))
		c.Close()
		ne, ok := err.(net.Error)
		if tt.name == "a cancel request" {
			ok = err == io.EOF
		} else {
			ok = ok && ne.Timeout()
		}
		if !ok || time.Since(start) > tt.within {
			t.Errorf("%s: a read of a silent server ended with %v after %v, want a timeout within %v", tt.name, err, time.Since(start), tt.within)
		}
	}
}
