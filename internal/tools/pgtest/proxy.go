package pgtest

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
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
// the link on demand and counts the round trips through it.
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

// StartProxy forwards a free loopback port to target (host:port), link up.
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

// RoundTrips counts the clients' Sync and Query messages, each a wait for
// the server, since ResetRoundTrips.
func (p *Proxy) RoundTrips() int64 { return p.trips.Load() }

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
	done := make(chan struct{}, 2)
	sent := &frontend{trips: &p.trips}
	go func() { p.pipe(server, client, sent.scan); done <- struct{}{} }()
	go func() { p.pipe(client, server, nil); done <- struct{}{} }()
	<-done // either side ended: end both
	p.untrack(client)
	p.untrack(server)
	<-done
}

// pipe copies src to dst as the link allows; the client's bytes (scan not
// nil) are counted, the server's muted or hung up on.
func (p *Proxy) pipe(dst, src net.Conn, scan func([]byte)) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch link := p.pass(); {
			case scan != nil && link != LinkCut:
				scan(buf[:n])
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

// The untyped requests a client may send before its startup message.
const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// frontend counts the Sync and Query messages a client sends on one
// connection, whatever its chunks; the first messages (SSL or GSS request,
// startup) have no type byte.
type frontend struct {
	trips *atomic.Int64
	typed bool    // past the startup message
	hdr   [8]byte // the header being read: type and length, or length and code
	n     int     // bytes of hdr read
	skip  int64   // bytes of the current message's body still to pass
}

func (f *frontend) scan(b []byte) {
	for len(b) > 0 {
		if f.skip > 0 {
			k := min(f.skip, int64(len(b)))
			f.skip, b = f.skip-k, b[k:]
			continue
		}
		size := 8
		if f.typed {
			size = 5
		}
		k := copy(f.hdr[f.n:size], b)
		f.n, b = f.n+k, b[k:]
		if f.n < size {
			return
		}
		f.n = 0
		if !f.typed {
			f.skip = int64(binary.BigEndian.Uint32(f.hdr[:4])) - 8
			code := binary.BigEndian.Uint32(f.hdr[4:8])
			f.typed = code != sslRequest && code != gssEncRequest
			continue
		}
		if f.hdr[0] == 'S' || f.hdr[0] == 'Q' {
			f.trips.Add(1)
		}
		f.skip = int64(binary.BigEndian.Uint32(f.hdr[1:5])) - 4
	}
}
