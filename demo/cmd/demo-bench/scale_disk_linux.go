package main

import "syscall"

// freeDisk is the space left to an unprivileged user in the file system
// of dir.
func freeDisk(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
