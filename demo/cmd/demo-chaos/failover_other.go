//go:build !unix

package main

// failoverState is a failover scenario's; pg_auto_failover runs on Linux
// and macOS only, so there is none here (failover.go).
type failoverState struct{}
