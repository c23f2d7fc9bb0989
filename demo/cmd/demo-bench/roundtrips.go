package main

import (
	"encoding/binary"
	"net"
	"sync/atomic"
)

// The untyped requests a client may send before its startup message.
const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// frontend is a connection to PostgreSQL that counts the Sync and Query
// messages written to it, each a wait for the server, whatever their
// chunks; the first messages (SSL or GSS request, startup) have no type
// byte.
type frontend struct {
	net.Conn
	trips *atomic.Int64
	typed bool    // past the startup message
	hdr   [8]byte // the header being read: type and length, or length and code
	n     int     // bytes of hdr read
	skip  int64   // bytes of the current message's body still to pass
}

func (f *frontend) Write(b []byte) (int, error) {
	f.scan(b)
	return f.Conn.Write(b)
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
