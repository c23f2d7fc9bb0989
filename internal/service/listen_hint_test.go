package service

import (
	"net"
	"strings"
	"testing"
)

// TestListenOnATakenAddressSaysWhatToDo: a second make run meets the first
// one's address; the error names the setting that picks another.
func TestListenOnATakenAddressSaysWhatToDo(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, err = Listen(held.Addr().String(), "LISTEN_ADDR")
	if err == nil || !strings.Contains(err.Error(), "LISTEN_ADDR=127.0.0.1:0") || !strings.Contains(err.Error(), "DEV_DB_PORT") {
		t.Fatalf("listen on a taken address: %v; want what to set instead", err)
	}
}
