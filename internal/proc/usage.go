package proc

import (
	"os"
	"strconv"
	"strings"
)

// CPUSeconds is a process's utime+stime (all threads) in seconds, from
// /proc/<pid>/stat; 0 once it is gone. Benchmarks measure a process's CPU
// by it.
func CPUSeconds(pid int) float64 {
	user, system := CPUTimes(pid)
	return user + system
}

// CPUTimes is a process's CPU time in user space and in the kernel
// (utime, stime), in seconds; 0 for a process gone.
func CPUTimes(pid int) (user, system float64) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	s := string(data)
	// The command, in parentheses, may hold spaces: count after it.
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, 0
	}
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return ut / 100, st / 100 // USER_HZ
}

// RSS is a process's resident set (VmRSS) in bytes; 0 for a kernel thread
// or a process gone.
func RSS(pid int) int64 { return kbField(pid, "status", "VmRSS:") }

// PSS is a process's proportional set size (Pss of smaps_rollup) in
// bytes: pages shared with other processes (the same binary's, mapped by
// each of several nodes) counted in shares; 0 for a process gone.
func PSS(pid int) int64 { return kbField(pid, "smaps_rollup", "Pss:") }

// kbField is the "<name> <n> kB" line of /proc/<pid>/<file>, in bytes.
func kbField(pid int, file, name string) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
