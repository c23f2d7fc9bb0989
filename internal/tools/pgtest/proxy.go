// Package faultproxy is a TCP proxy on loopback that the tests, the chaos
// campaign and the bench put between the service and PostgreSQL: to break
// the link on demand (cut it, hold its bytes as a partition does, or drop
// its replies), and to count the network round trips of what runs through
// it.
package pgtest

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Link is what a Proxy does to the connections through it.
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
	// LinkMute forwards what the client sends and drops what the server
	// answers: the statements run, their answers never arrive.
	LinkMute
	// LinkHangup forwards what the client sends and closes the connection as
	// the server's answer begins: the request ran, the client reads EOF (a
	// lost response).
	LinkHangup
)

// Proxy forwards connections from its address to a target.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	trips  atomic.Int64

	mu      sync.Mutex
	link    Link
	changed chan struct{} // closed, and replaced, when link changes
	closed  bool
	conns   map[net.Conn]struct{}
}

// StartProxy listens on a free loopback port and forwards to target (host:port)
// with the link up.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// RoundTrips is how many times a PostgreSQL client waited for its server,
// through the proxy, since ResetRoundTrips: its Sync and Query messages.
func (p *Proxy) RoundTrips() int64 { return p.trips.Load() }

// ResetRoundTrips starts the count of RoundTrips again from zero.
func (p *Proxy) ResetRoundTrips() { p.trips.Store(0) }

// Set changes the link; Cut closes the open connections.
func (p *Proxy) Set(l Link) {
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
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Set(LinkCut)
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

func (p *Proxy) serve(client net.Conn) {
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
	sent := &frontend{trips: &p.trips}
	go func() { p.pipe(server, client, sent.scan); done <- struct{}{} }()
	go func() { p.pipe(client, server, nil); done <- struct{}{} }()
	<-done // either side ended: end both
	p.untrack(client)
	p.untrack(server)
	<-done
}

// pipe copies src to dst chunk by chunk, each as the link allows. What the
// client sends goes through scan first; replies (scan is nil: src is the
// server) are dropped while the link is muted.
func (p *Proxy) pipe(dst, src net.Conn, scan func([]byte)) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			link, ok := p.pass()
			if !ok {
				return
			}
			switch {
			case scan != nil:
				scan(buf[:n])
			case link == LinkMute:
				continue
			case link == LinkHangup:
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

// pass waits out a blackhole and returns the link, and whether bytes may
// go on at all.
func (p *Proxy) pass() (Link, bool) {
	for {
		p.mu.Lock()
		link, changed := p.link, p.changed
		p.mu.Unlock()
		switch link {
		case LinkUp, LinkMute, LinkHangup:
			return link, true
		case LinkCut:
			return link, false
		}
		<-changed
	}
}

// track registers c, unless the link is cut; then it closes c.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.link == LinkCut || p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}
