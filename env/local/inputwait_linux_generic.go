//go:build linux && !amd64

package local

// archSysKinds: the generic calls only. On 386, arm and other
// architectures that also keep poll, select or epoll_wait, a wait in one
// of those is not recognised (never flagged; see InputWaits).
var archSysKinds = map[int]sysKind{}
