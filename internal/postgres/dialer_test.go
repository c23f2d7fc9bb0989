package postgres

import (
	"net"
	"testing"
	"time"
)

// TestEveryDialIsBounded: whichever of pq.Dialer's methods lib/pq calls,
// the connection it gets fails its reads after the dialer's limit, as a
// partition needs.
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
	for name, dial := range map[string]func() (net.Conn, error){
		"Dial":        func() (net.Conn, error) { return d.Dial("tcp", ln.Addr().String()) },
		"DialTimeout": func() (net.Conn, error) { return d.DialTimeout("tcp", ln.Addr().String(), time.Second) },
	} {
		c, err := dial()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		start := time.Now()
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() || time.Since(start) > 5*time.Second {
			t.Errorf("%s: a read of a silent server ended with %v after %v, want a timeout after the limit", name, err, time.Since(start))
		}
	}
}
