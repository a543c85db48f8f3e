package sshtest

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/procstat"
)

// daemonAttr puts a daemon in its own process group, so a ^C to the test
// run reaches it through the test binary's cleanup, never directly; and
// gives it a parent-death signal, so a test binary killed before its
// cleanup (SIGPIPE, a timeout) leaves no daemon behind.
func daemonAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killConnections kills the connection handlers of the sshd listening as
// pid. The listener is frozen first so it forks no new handler while its
// children are collected: they are found through their parent, which they
// lose once the listener is gone.
func killConnections(pid int) {
	syscall.Kill(pid, syscall.SIGSTOP)
	for _, child := range sshdDescendants(pid) {
		syscall.Kill(child, syscall.SIGKILL)
	}
}

// sshdDescendants returns the PIDs of sshd processes below pid.
func sshdDescendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	comm := map[int]string{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procstat.Read(p)
		if err != nil {
			continue
		}
		children[st.PPID] = append(children[st.PPID], p)
		comm[p] = st.Comm
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if strings.HasPrefix(comm[c], "sshd") {
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}
