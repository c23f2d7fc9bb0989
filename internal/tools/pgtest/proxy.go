package pgtest

import (
	"net"
	"sync"
	"time"
)

// Link is what a Proxy does to the connections through it.
type Link int

const (
	LinkUp        Link = iota // forwards every byte both ways
	LinkCut                   // closes every connection, and each new one at once
	LinkBlackhole             // holds every byte until the link changes, as a partition does
	LinkMute                  // drops the server's answers: statements run, unanswered
	LinkHangup                // closes the connection as the server's answer begins: a lost response
)

// Proxy is a TCP proxy on loopback in front of a PostgreSQL, which breaks
// the link on demand.
type Proxy struct {
	ln     net.Listener
	target string
	wrap   func(net.Conn) net.Conn
	wg     sync.WaitGroup

	mu      sync.Mutex
	link    Link
	changed chan struct{} // closed, and replaced, when link changes
	closed  bool
	conns   map[net.Conn]struct{}
}

// StartProxy forwards a free loopback port to target (host:port), link up;
// wrap, if not nil, wraps each connection to target, to watch its bytes.
func StartProxy(target string, wrap func(net.Conn) net.Conn) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, wrap: wrap, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

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

// Close closes the listener and every connection, and waits for them.
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
	if err != nil || !p.track(server) { // track closed a server it refused
		p.untrack(client)
		return
	}
	to := server
	if p.wrap != nil {
		to = p.wrap(server)
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(to, client, true); done <- struct{}{} }()
	go func() { p.pipe(client, to, false); done <- struct{}{} }()
	<-done // either side ended: end both
	p.untrack(client)
	p.untrack(server)
	<-done
}

// pipe copies src to dst as the link allows; the server's bytes (not
// fromClient) are muted or hung up on.
func (p *Proxy) pipe(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch link := p.pass(); {
			case fromClient && link != LinkCut: // the client's bytes pass
			case link == LinkMute:
				continue
			case link == LinkCut || link == LinkHangup:
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

// pass waits out a blackhole and reports the link.
func (p *Proxy) pass() Link {
	for {
		p.mu.Lock()
		link, changed := p.link, p.changed
		p.mu.Unlock()
		if link != LinkBlackhole {
			return link
		}
		<-changed
	}
}

// track registers c, or closes it if the link is cut.
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
