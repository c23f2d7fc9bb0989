package pgtest_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestHangup: the server hears the request; the client reads EOF where the
// answer would begin.
func TestHangup(t *testing.T) {
	heard := make(chan string, 1)
	p, c := through(t, nil, func(c net.Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil {
			heard <- line
			c.Write([]byte("answer\n"))
		}
	})
	p.Set(pgtest.LinkHangup)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("request\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := bufio.NewReader(c).ReadString('\n'); err == nil || got != "" {
		t.Fatalf("hangup: the client read %q, %v; want EOF and nothing", got, err)
	}
	if got := <-heard; got != "request\n" {
		t.Fatalf("hangup: the server heard %q", got)
	}
}

// TestLinks: each link does to an echo server's connection what it says.
func TestLinks(t *testing.T) {
	heard := make(chan string, 10)
	p, c := through(t, nil, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			heard <- line
			c.Write([]byte(line))
		}
	})
	r := bufio.NewReader(c)
	say := func(s string) (string, error) {
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte(s + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := say("up"); err != nil || got != "up\n" {
		t.Fatalf("up: %q %v", got, err)
	}
	<-heard
	p.Set(pgtest.LinkMute)
	if got, err := say("muted"); err == nil {
		t.Fatalf("muted: the reply %q came through", got)
	}
	if got := <-heard; got != "muted\n" {
		t.Fatalf("muted: the server heard %q", got)
	}
	p.Set(pgtest.LinkBlackhole)
	if got, err := say("held"); err == nil {
		t.Fatalf("blackhole: %q came through", got)
	}
	select {
	case got := <-heard:
		t.Fatalf("blackhole: the server heard %q", got)
	case <-time.After(100 * time.Millisecond):
	}
	p.Set(pgtest.LinkCut)
	if _, err := say("cut"); err == nil {
		t.Fatal("cut: the connection still answers")
	}
}

// TestWrap: the wrap StartProxy is given sees the client's bytes on their
// way to the server.
func TestWrap(t *testing.T) {
	saw, heard := make(chan string, 1), make(chan string, 1)
	_, c := through(t, func(c net.Conn) net.Conn { return seeing{c, saw} }, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		heard <- line
	})
	if _, err := c.Write([]byte("request\n")); err != nil {
		t.Fatal(err)
	}
	if got := <-heard; got != "request\n" {
		t.Fatalf("the server heard %q", got)
	}
	select {
	case got := <-saw:
		if got != "request\n" {
			t.Fatalf("the wrap saw %q", got)
		}
	default: // what the server heard went through the wrap first
		t.Fatal("the wrap saw nothing")
	}
}

// seeing is a connection that tells saw what is written to it.
type seeing struct {
	net.Conn
	saw chan string
}

func (c seeing) Write(b []byte) (int, error) {
	c.saw <- string(b)
	return c.Conn.Write(b)
}

// through starts a server that runs serve on each connection, a proxy to
// it (with wrap), and a connection through the proxy; all end with the test.
func through(t *testing.T, wrap func(net.Conn) net.Conn, serve func(net.Conn)) (*pgtest.Proxy, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	p, err := pgtest.StartProxy(ln.Addr().String(), wrap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}
