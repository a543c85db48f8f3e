package backends

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Each daemon owns its sandboxes, a private registry too, except its
// persist=true ones, which the next command must find.
func TestSandboxOwners(t *testing.T) {
	home := "/home/a/.local/state/corral"
	first, again := DaemonOwner(home), DaemonOwner(home)
	assert.True(t, first == again, "a daemon restarted on its state directory gets another owner")
	assert.True(t, DaemonOwner("/home/a/.local/state/corral") != DaemonOwner("/home/b/.local/state/corral"), "two daemons share an owner")
	one, two := PrivateOwner(), PrivateOwner()
	assert.True(t, one != two, "two private registries share an owner")
	d := Options{Owner: DaemonOwner("/s")}
	p := Options{Owner: PrivateOwner(), Private: true}
	for _, tc := range []struct {
		b      Options
		target string
		want   string
	}{
		{d, "docker-image://img", d.Owner},
		{d, "docker-image://img?persist=true", d.Owner},
		{p, "docker-image://img", p.Owner},
		{p, "docker-image://img?persist=true", ""},
	} {
		got := tc.b.dockerOwner(tc.target)
		assert.Truef(t, got == tc.want, "private=%v %s: owner %q, want %q", tc.b.Private, tc.target, got, tc.want)
	}
}
