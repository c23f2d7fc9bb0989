package faultproxy_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/faultproxy"
)

// TestLinks: each link does to an echo server's connection what it says.
func TestLinks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	heard := make(chan string, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					heard <- line
					c.Write([]byte(line))
				}
			}()
		}
	}()
	p, err := faultproxy.Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
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
	p.Set(faultproxy.Mute)
	if got, err := say("muted"); err == nil {
		t.Fatalf("muted: the reply %q came through", got)
	}
	if got := <-heard; got != "muted\n" {
		t.Fatalf("muted: the server heard %q", got)
	}
	p.Set(faultproxy.Blackhole)
	if got, err := say("held"); err == nil {
		t.Fatalf("blackhole: %q came through", got)
	}
	select {
	case got := <-heard:
		t.Fatalf("blackhole: the server heard %q", got)
	case <-time.After(100 * time.Millisecond):
	}
	p.Set(faultproxy.Cut)
	if _, err := say("cut"); err == nil {
		t.Fatal("cut: the connection still answers")
	}
}
