package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMeasured says whether this OS gives the CPU and memory figures.
const cpuMeasured = true

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// machineBusy is the busy time of all CPUs so far: user, nice, system, irq,
// softirq and steal of the "cpu" line of /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * clockTick
}

// postmasterPid is the parent of a backend of the cluster admin talks to.
func postmasterPid(ctx context.Context, s *statsDB) (int, error) {
	var backend int
	if err := s.admin.GetContext(ctx, &backend, `SELECT pg_backend_pid()`); err != nil {
		return 0, err
	}
	st, err := procStat(backend)
	if err != nil {
		return 0, fmt.Errorf("cluster processes are not readable (is PostgreSQL local?): %w", err)
	}
	return st.ppid, nil
}

type procStatus struct {
	ppid   int
	cpu    time.Duration // utime + stime
	reaped time.Duration // cutime + cstime: its children that exited and were waited for
	comm   string
}

// procStat reads /proc/<pid>/stat: comm, ppid, utime + stime, cutime + cstime.
func procStat(pid int) (procStatus, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStatus{}, err
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStatus{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[closing+1:]) // f[0] is the state, field 3 of the file
	if len(f) < 15 {
		return procStatus{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	cutime, _ := strconv.ParseInt(f[13], 10, 64)
	cstime, _ := strconv.ParseInt(f[14], 10, 64)
	return procStatus{ppid: ppid, cpu: time.Duration(utime+stime) * clockTick,
		reaped: time.Duration(cutime+cstime) * clockTick, comm: s[open+1 : closing]}, nil
}

func (m *cpuMeter) sample() cpuTimes {
	var t cpuTimes
	if m == nil {
		return t
	}
	for _, pid := range m.serverPids {
		t.server += runTime(pid)
	}
	if m.postmasterPid > 0 {
		// A process of the cluster that exits between two samples (an
		// autovacuum worker) leaves the sum of the living ones; its time
		// moves into the postmaster's reaped children, which stay counted.
		if st, err := procStat(m.postmasterPid); err == nil {
			t.postgres += runTime(m.postmasterPid) + st.reaped
		}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == m.postmasterPid {
				continue
			}
			if st, err := procStat(pid); err == nil && st.ppid == m.postmasterPid {
				t.postgres += runTime(pid)
			}
		}
	}
	t.machine = machineBusy()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		t.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return t
}

// runTime is the time process pid has run on a CPU, in nanoseconds: the
// sum over its threads of the first field of /proc/<pid>/task/<tid>/schedstat.
// utime and stime count in clock ticks (10 ms), too coarse for a phase of a
// second summed over some forty processes. It falls back to them where
// schedstat is missing (a kernel without it, a process that just exited).
func runTime(pid int) time.Duration {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	var sum time.Duration
	for _, task := range tasks {
		b, rerr := os.ReadFile(dir + "/" + task.Name() + "/schedstat")
		f := strings.Fields(string(b))
		if rerr != nil || len(f) == 0 {
			err = errors.Join(err, rerr, errors.New("empty schedstat"))
			break
		}
		ns, perr := strconv.ParseInt(f[0], 10, 64)
		if perr != nil {
			err = perr
			break
		}
		sum += time.Duration(ns)
	}
	if err != nil || len(tasks) == 0 {
		st, _ := procStat(pid)
		return st.cpu
	}
	return sum
}

// memory returns the peak (VmHWM) and current (VmRSS) resident set of
// process pid in bytes.
func memory(pid int) (peak, current int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmHWM:":
			peak = kb << 10
		case "VmRSS:":
			current = kb << 10
		}
	}
	if peak == 0 {
		return 0, 0, errors.New("no VmHWM in /proc/<pid>/status")
	}
	return peak, current, sc.Err()
}
