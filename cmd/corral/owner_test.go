package main

import "testing"

// Each daemon owns its sandboxes, a private registry too, except its
// persist=true ones, which the next command must find.
func TestSandboxOwners(t *testing.T) {
	home := "/home/a/.local/state/corral"
	if first, again := daemonOwner(home), daemonOwner(home); first != again {
		t.Error("a daemon restarted on its state directory gets another owner")
	}
	if daemonOwner("/home/a/.local/state/corral") == daemonOwner("/home/b/.local/state/corral") {
		t.Error("two daemons share an owner")
	}
	if one, two := privateOwner(), privateOwner(); one == two {
		t.Error("two private registries share an owner")
	}
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
		if got := tc.b.dockerOwner(tc.target); got != tc.want {
			t.Errorf("private=%v %s: owner %q, want %q", tc.b.private, tc.target, got, tc.want)
		}
	}
}
