package sdk

import "testing"

func TestScheme(t *testing.T) {
	for target, want := range map[string]string{"bwrap://x": "bwrap", "localplugin://": "localplugin", "nothing": ""} {
		if got := Scheme(target); got != want {
			t.Errorf("Scheme(%q) = %q, want %q", target, got, want)
		}
	}
}
