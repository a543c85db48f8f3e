package local

import "golang.org/x/sys/unix"

// archSysKinds are the older calls amd64 keeps besides the generic ones.
var archSysKinds = map[int]sysKind{
	unix.SYS_POLL:       sysPoll,
	unix.SYS_SELECT:     sysSelect,
	unix.SYS_EPOLL_WAIT: sysEpoll,
}
