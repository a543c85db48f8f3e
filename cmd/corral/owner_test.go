package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Each daemon owns its sandboxes, a private registry too, except its
// persist=true ones, which the next command must find.
func TestSandboxOwners(t *testing.T) {
	home := "/home/a/.local/state/corral"
	first, again := daemonOwner(home), daemonOwner(home)
	assert.True(t, first == again, "a daemon restarted on its state directory gets another owner")
	assert.True(t, daemonOwner("/home/a/.local/state/corral") != daemonOwner("/home/b/.local/state/corral"), "two daemons share an owner")
	one, two := privateOwner(), privateOwner()
	assert.True(t, one != two, "two private registries share an owner")
	d := backendOptions{owner: daemonOwner("/s")}
	p := backendOptions{owner: privateOwner(), private: true}
	for _, tc := range []struct {
		b      backendOptions
		target string
		want   string
	}{
		{d, "docker-image://img", d.owner},
		{d, "docker-image://img?persist=true", d.owner},
		{p, "docker-image://img", p.owner},
		{p, "docker-image://img?persist=true", ""},
	} {
		got := tc.b.dockerOwner(tc.target)
		assert.Truef(t, got == tc.want, "private=%v %s: owner %q, want %q", tc.b.private, tc.target, got, tc.want)
	}
}
