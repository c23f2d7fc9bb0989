package testkit

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Link is what a FaultProxy does to the connections through it.
type Link int

const (
	// LinkUp forwards every byte both ways.
	LinkUp Link = iota
	// LinkCut closes every connection, and each new one as soon as it is
	// accepted: the client reads EOF or a reset at once.
	LinkCut
	// LinkBlackhole accepts connections and keeps them open, but holds every
	// byte either way until the link changes: a partition, where each wait
	// lasts until someone's timeout. Held bytes go on if the link comes back
	// up, as TCP would retransmit them.
	LinkBlackhole
)

// FaultProxy is a TCP proxy on loopback that a test puts between the service
// and PostgreSQL to break the link on demand.
type FaultProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	link    Link
	changed chan struct{} // closed, and replaced, when link changes
	closed  bool
	conns   map[net.Conn]struct{}
}

// StartFaultProxy listens on a free loopback port and forwards to target
// (host:port) with the link up. It closes when t ends.
func StartFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// Set changes the link; LinkCut closes the open connections.
func (p *FaultProxy) Set(l Link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.link = l
	close(p.changed)
	p.changed = make(chan struct{})
	if l == LinkCut {
		for c := range p.conns {
			c.Close()
		}
	}
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines.
func (p *FaultProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Set(LinkCut)
	p.wg.Wait()
}

func (p *FaultProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

func (p *FaultProxy) serve(client net.Conn) {
	if !p.track(client) {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil || !p.track(server) {
		if server != nil {
			server.Close()
		}
		p.untrack(client)
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done // either side ended: end both
	p.untrack(client)
	p.untrack(server)
	<-done
}

// pipe copies src to dst chunk by chunk, each as the link allows.
func (p *FaultProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits out a blackhole and reports whether the link is up.
func (p *FaultProxy) pass() bool {
	for {
		p.mu.Lock()
		link, changed := p.link, p.changed
		p.mu.Unlock()
		switch link {
		case LinkUp:
			return true
		case LinkCut:
			return false
		}
		<-changed
	}
}

// track registers c, unless the link is cut; then it closes c.
func (p *FaultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.link == LinkCut || p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *FaultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}
