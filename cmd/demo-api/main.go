// Command demo-api serves the idempotent create API and runs its chores
// (package service says each command).
package main

import "github.com/demo-api/demo-api/internal/service"

func main() { service.Exit(nil) }
