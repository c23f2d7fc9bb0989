package main

import (
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// TestRoundTrips: a frontend counts a PostgreSQL client's Sync and Query
// messages, whatever chunks they are written in, and not those of its
// startup.
func TestRoundTrips(t *testing.T) {
	msg := func(typ byte, body string) []byte {
		b := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
		return append(b, body...)
	}
	untyped := func(code uint32, body string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
		return append(binary.BigEndian.AppendUint32(b, code), body...)
	}
	var stream []byte
	stream = append(stream, untyped(80877103, "")...)                        // SSLRequest
	stream = append(stream, untyped(196608, "user\x00S\x00\x00")...)         // startup, with an S in its body
	stream = append(stream, msg('P', "\x00SELECT 1\x00\x00\x00")...)         // Parse
	stream = append(stream, msg('B', "\x00\x00\x00\x00\x00\x00\x00\x00")...) // Bind
	stream = append(stream, msg('S', "")...)                                 // Sync: 1
	stream = append(stream, msg('Q', "SELECT 'S'\x00")...)                   // Query: 2
	stream = append(stream, msg('S', "")...)                                 // Sync: 3
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	heard := make(chan int, 2)
	go func() {
		for _, size := range []int{len(stream), 5} {
			n, _ := io.ReadFull(server, make([]byte, size))
			heard <- n
		}
	}()
	var trips atomic.Int64
	c := &frontend{Conn: client, trips: &trips}
	for i := 0; i < len(stream); i += 3 { // chunks that split every header
		c.Write(stream[i:min(i+3, len(stream))])
	}
	if n := <-heard; n != len(stream) {
		t.Fatalf("the server heard %d of %d bytes", n, len(stream))
	}
	if got := trips.Load(); got != 3 {
		t.Errorf("round trips %d, want 3", got)
	}
	trips.Store(0) // as countRoundTrips does before each scenario
	c.Write(msg('S', ""))
	if n := <-heard; n != 5 {
		t.Fatalf("the server heard %d of the Sync's 5 bytes", n)
	}
	if got := trips.Load(); got != 1 {
		t.Errorf("round trips after the reset and one Sync %d, want 1", got)
	}
}
