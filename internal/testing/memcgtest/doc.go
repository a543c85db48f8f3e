// Package memcgtest gives a test a memory-limited cgroup of its own, so
// that the kernel's OOM killer can be made to end a process for real.
//
// The cgroup is made under the test process's own memory cgroup (cgroup
// v1's memory hierarchy, or cgroup v2 where the test's cgroup hands the
// memory controller down), never at the root: whatever limits the test
// runs under still apply to what runs in it. It needs root; without it, or
// without a memory controller to use, the test is skipped with the
// reason. Linux only.
package memcgtest
