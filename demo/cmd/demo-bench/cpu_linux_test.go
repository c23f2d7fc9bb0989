package main

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestCPUMeterCountsExitedChildren: a process of the cluster that runs and
// exits between two samples (as an autovacuum worker does) is counted,
// through the reaped children of its parent, against the CPU time the
// kernel reports for it once waited for.
func TestCPUMeterCountsExitedChildren(t *testing.T) {
	// The parent waits for a line, runs a busy child to its end, says so,
	// and waits again: the child exits between the two samples.
	parent := exec.Command("sh", "-c", `read go; (i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done); echo done; read stop || true`)
	stdin, err := parent.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var before syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	m := &cpuMeter{postmasterPid: parent.Process.Pid}
	start := m.sample()
	stdin.Write([]byte("go\n"))
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "done\n" {
		t.Fatalf("parent said %q, %v", line, err)
	}
	measured := m.sample().sub(start).postgres
	stdin.Close()
	if err := parent.Wait(); err != nil {
		t.Fatal(err)
	}
	var after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
	spent := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	if spent < 100*time.Millisecond {
		t.Fatalf("the child ran only %v: too little to tell", spent)
	}
	if measured < spent*8/10 {
		t.Errorf("the meter counted %v of the %v that the parent and its exited child ran", measured, spent)
	}
}

// TestRunTimeIsFinerThanATick: the meter's unit is the nanosecond of
// schedstat, not the 10 ms tick of /proc/<pid>/stat. The kernel adds a
// running thread's time to schedstat only at a tick or a switch, so the test
// works until the figure moves, then asks that it moved by no whole tick.
func TestRunTimeIsFinerThanATick(t *testing.T) {
	pid := syscall.Getpid()
	a := runTime(pid)
	var d time.Duration
	for deadline := time.Now().Add(5 * time.Second); d <= 0 && time.Now().Before(deadline); {
		d = runTime(pid) - a
	}
	if d <= 0 || d%clockTick == 0 {
		t.Errorf("run time grew by %v: not finer than a tick", d)
	}
}
