package env_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/corralhq/corral/env"
)

func TestLogKeep(t *testing.T) {
	for _, tc := range []struct{ max, head, tail int64 }{
		{0, env.DefaultLogMax / 4, env.DefaultLogMax - env.DefaultLogMax/4},
		{-1, 0, 0},
		{1, env.MinLogMax / 4, env.MinLogMax - env.MinLogMax/4},
		{1 << 30, 1 << 28, 3 << 28},
	} {
		h, tl := env.LogKeep(tc.max)
		assert.Falsef(t, h != tc.head || tl != tc.tail, "LogKeep(%d) = %d, %d; want %d, %d", tc.max, h, tl, tc.head, tc.tail)
	}
}

func TestParseLogMax(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "33554432": 32 << 20, "32MiB": 32 << 20, "32m": 32 << 20, "1GiB": 1 << 30,
		"512 KiB": 512 << 10, "none": -1, "-1": -1, "100b": 100} {
		got, err := env.ParseLogMax(in)
		assert.Falsef(t, err != nil || got != want, "ParseLogMax(%q) = %d, %v; want %d", in, got, err, want)
	}
	for _, in := range []string{"", "lots", "-5", "1TiB?", "99999999999G"} {
		_, err := env.ParseLogMax(in)
		assert.Errorf(t, err, "ParseLogMax(%q) accepted it", in)
	}
}
