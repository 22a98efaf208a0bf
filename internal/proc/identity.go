package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// Identity tells a process apart from a later one that reuses its PID: a
// PID names one process only between its start and its reaping.
type Identity struct {
	PID int
	// StartTime is /proc/<pid>/stat field 22, clock ticks after boot.
	StartTime uint64
	// BootID is /proc/sys/kernel/random/boot_id: StartTime is per boot.
	BootID string
	// Started is StartTime as wall-clock time, for messages.
	Started time.Time
	// Args is the command line, for messages.
	Args []string
}

// ErrGone is returned by Lookup for a PID that names no live process.
var ErrGone = errors.New("no such process")

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// Lookup reads the identity of the process pid. A missing or zombie
// process is ErrGone.
func Lookup(pid int) (Identity, error) {
	if pid <= 0 {
		return Identity{}, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	if err != nil {
		return Identity{}, err
	}
	// The command name in parentheses may hold spaces and ')'.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return Identity{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return Identity{}, fmt.Errorf("pid %d exited: %w", pid, ErrGone)
	}
	id := Identity{PID: pid}
	if id.StartTime, err = strconv.ParseUint(fields[19], 10, 64); err != nil {
		return Identity{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	if id.BootID, err = BootID(); err != nil {
		return Identity{}, err
	}
	if bt, err := bootTime(); err == nil {
		id.Started = bt.Add(time.Duration(id.StartTime) * time.Second / clockTicks)
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		id.Args = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	}
	return id, nil
}

// Same reports whether other is the very process id names.
func (id Identity) Same(other Identity) bool {
	return id.PID == other.PID && id.StartTime == other.StartTime && id.BootID == other.BootID
}

// BootID identifies the current boot of the machine.
func BootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func bootTime() (time.Time, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for line := range bytes.Lines(stat) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			sec, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return time.Unix(sec, 0), err
		}
	}
	return time.Time{}, errors.New("/proc/stat: no btime")
}
