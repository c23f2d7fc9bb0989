package main

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// countingProxy forwards TCP connections to PostgreSQL and counts the
// messages of the frontend protocol that make the client wait for the
// server: Sync (end of an extended-protocol exchange) and Query (a simple
// query). Each is one network round trip.
type countingProxy struct {
	ln     net.Listener
	target string
	syncs  atomic.Int64
	simple atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(target string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }

// roundTrips returns the round trips counted since the last reset.
func (p *countingProxy) roundTrips() int64 { return p.syncs.Load() + p.simple.Load() }

func (p *countingProxy) reset() { p.syncs.Store(0); p.simple.Store(0) }

func (p *countingProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *countingProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() {
			io.Copy(client, server)
			client.Close()
		})
		p.wg.Go(func() {
			p.frontend(client, server)
			server.Close()
		})
	}
}

// frontend copies the client's messages to the server, counting them. The
// first messages (startup, or SSL/GSS requests before it) have no type byte.
func (p *countingProxy) frontend(client, server net.Conn) {
	r := bufio.NewReaderSize(client, 32<<10)
	w := bufio.NewWriterSize(server, 32<<10)
	// flush sends what was read once the client has nothing more queued.
	flush := func() error {
		if r.Buffered() > 0 {
			return nil
		}
		return w.Flush()
	}
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:4]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		var code [4]byte
		if _, err := io.ReadFull(r, code[:]); err != nil {
			return
		}
		w.Write(hdr[:4])
		w.Write(code[:])
		if _, err := io.CopyN(w, r, int64(n)-8); err != nil {
			return
		}
		if err := flush(); err != nil {
			return
		}
		if c := binary.BigEndian.Uint32(code[:]); c != 80877103 && c != 80877104 {
			break // the startup message; typed messages follow
		}
	}
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		switch hdr[0] {
		case 'S':
			p.syncs.Add(1)
		case 'Q':
			p.simple.Add(1)
		}
		w.Write(hdr[:])
		n := binary.BigEndian.Uint32(hdr[1:])
		if _, err := io.CopyN(w, r, int64(n)-4); err != nil {
			return
		}
		if err := flush(); err != nil {
			return
		}
	}
}
