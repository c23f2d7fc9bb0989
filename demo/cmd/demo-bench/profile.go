package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// -profile DIR: every server runs with PPROF_ADDR on a loopback port
// (serve's, and the baseline server's, which is this program), and each
// phase of the first round at 8 clients leaves in DIR the CPU profile of
// the server that phase loads, taken during its measured second(s), and its
// allocations during the phase (the allocs profile before and after: read
// them with -diff_base):
//
//	go tool pprof -top DIR/create-c8.cpu.pprof
//	go tool pprof -sample_index=alloc_objects -diff_base DIR/create-c8.allocs-before.pprof -top DIR/create-c8.allocs-after.pprof
//
// Profiling costs the server a little CPU: the round it runs in reads a
// few per cent dearer, so leave it out of a run whose targets are judged.

// profileConcurrency is the client count whose phases are profiled.
const profileConcurrency = 8

// serverOf returns the server that scenario sc loads.
func (cl *client) serverOf(sc string) *serverProc {
	switch sc {
	case scBaseline:
		return cl.baseline
	case scOutbox:
		return cl.outbox
	case scKeyRow:
		return cl.keyRow
	case scCreate2P:
		return cl.twoPhase
	}
	return cl.api
}

// profilePhase runs phase while it profiles the server of scenario sc, and
// writes the profiles into dir.
func profilePhase(ctx context.Context, dir string, s *serverProc, sc string, c int, d time.Duration, phase func()) error {
	if s.pprof == "" {
		return fmt.Errorf("server %s serves no profiler", s.name)
	}
	name := filepath.Join(dir, fmt.Sprintf("%s-c%d", sc, c))
	if err := fetchProfile(ctx, s.pprof+"allocs", name+".allocs-before.pprof"); err != nil {
		return err
	}
	secs := max(1, int(math.Round(d.Seconds())))
	var wg sync.WaitGroup
	var cpuErr error
	wg.Go(func() {
		cpuErr = fetchProfile(ctx, fmt.Sprintf("%sprofile?seconds=%d", s.pprof, secs), name+".cpu.pprof")
	})
	phase()
	wg.Wait()
	if cpuErr != nil {
		return cpuErr
	}
	return fetchProfile(ctx, s.pprof+"allocs", name+".allocs-after.pprof")
}

// fetchProfile saves the profile at url into path.
func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
