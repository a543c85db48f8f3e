package env_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in   string
		want env.Signal
	}{
		{"TERM", env.SIGTERM},
		{"SIGTERM", env.SIGTERM},
		{"term", env.SIGTERM},
		{"sigterm", env.SIGTERM},
		{"SigTerm", env.SIGTERM},
		{" TERM\n", env.SIGTERM},
		{"15", env.SIGTERM},
		{" 15 ", env.SIGTERM},
		{"KILL", env.SIGKILL},
		{"sigkill", env.SIGKILL},
		{"9", env.SIGKILL},
		{"HUP", env.SIGHUP},
		{"1", env.SIGHUP},
		{"int", env.SIGINT},
		{"2", env.SIGINT},
		{"QUIT", env.SIGQUIT},
		{"USR1", env.SIGUSR1},
		{"10", env.SIGUSR1},
		{"SIGUSR2", env.SIGUSR2},
		{"12", env.SIGUSR2},
		{"PIPE", env.SIGPIPE},
		{"ALRM", env.SIGALRM},
		{"CONT", env.SIGCONT},
		{"18", env.SIGCONT},
		{"STOP", env.SIGSTOP},
		{"19", env.SIGSTOP},
		{"TSTP", env.SIGTSTP},
		{"winch", env.SIGWINCH},
		{"28", env.SIGWINCH},
		{"SIGCHLD", "CHLD"},
		{"SEGV", "SEGV"},
		{"31", "SYS"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := env.ParseSignal(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.True(t, got.Valid())
		})
	}
}

func TestParseSignalRejects(t *testing.T) {
	tests := []struct {
		in      string
		message string // a part of the error that names the bad input
	}{
		{"", `unknown signal ""`},
		{"   ", `unknown signal "   "`},
		{"SIG", `unknown signal "SIG"`},
		{"TERMINATE", `unknown signal "TERMINATE"`},
		{"SIGSIGTERM", `unknown signal "SIGSIGTERM"`},
		{"SIG TERM", `unknown signal "SIG TERM"`},
		{"SIG15", `unknown signal "SIG15"`},
		{"RTMIN", `unknown signal "RTMIN"`},
		{"SIGRTMIN+1", `unknown signal "SIGRTMIN+1"`},
		{"0x0f", `unknown signal "0x0f"`},
		{"1.5", `unknown signal "1.5"`},
		{"0", "unknown signal number 0"},
		{"32", "unknown signal number 32"},
		{"64", "unknown signal number 64"},
		{"-15", "unknown signal number -15"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := env.ParseSignal(tt.in)
			require.Error(t, err)
			assert.Equal(t, env.Signal(""), got)
			assert.Contains(t, err.Error(), tt.message)
			// The error says what is accepted.
			assert.Contains(t, err.Error(), "TERM")
		})
	}
}

func TestSignalFromNumber(t *testing.T) {
	tests := []struct {
		n    int
		want env.Signal
	}{
		{1, env.SIGHUP},
		{2, env.SIGINT},
		{3, env.SIGQUIT},
		{6, "ABRT"},
		{9, env.SIGKILL},
		{10, env.SIGUSR1},
		{11, "SEGV"},
		{12, env.SIGUSR2},
		{13, env.SIGPIPE},
		{14, env.SIGALRM},
		{15, env.SIGTERM},
		{17, "CHLD"},
		{18, env.SIGCONT},
		{19, env.SIGSTOP},
		{20, env.SIGTSTP},
		{28, env.SIGWINCH},
		{31, "SYS"},
		{0, ""},
		{-1, ""},
		{32, ""},
		{34, ""}, // SIGRTMIN on Linux: real-time signals have no portable name
		{64, ""},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.n), func(t *testing.T) {
			assert.Equal(t, tt.want, env.SignalFromNumber(tt.n))
		})
	}
}

// TestSignalNumbersRoundTrip checks that names and numbers agree for every
// number ParseSignal accepts, so a signal reported by number and one asked
// for by name are the same signal.
func TestSignalNumbersRoundTrip(t *testing.T) {
	for n := 1; n <= 31; n++ {
		name := env.SignalFromNumber(n)
		require.NotEmpty(t, name, "signal %d", n)
		assert.Equal(t, n, name.Number(), "signal %s", name)
		assert.True(t, name.Valid(), "signal %s", name)
		parsed, err := env.ParseSignal(strconv.Itoa(n))
		require.NoError(t, err)
		assert.Equal(t, name, parsed)
		parsed, err = env.ParseSignal(name.String())
		require.NoError(t, err)
		assert.Equal(t, name, parsed)
	}
}

func TestSignalMethods(t *testing.T) {
	tests := []struct {
		sig    env.Signal
		number int
		valid  bool
		str    string
	}{
		{env.SIGTERM, 15, true, "SIGTERM"},
		{env.SIGKILL, 9, true, "SIGKILL"},
		{env.SIGWINCH, 28, true, "SIGWINCH"},
		{"SIGTERM", 0, false, "SIGSIGTERM"}, // names carry no prefix
		{"term", 0, false, "SIGterm"},       // names are upper case
		{"RTMIN", 0, false, "SIGRTMIN"},
		{"", 0, false, "SIG"},
	}
	for _, tt := range tests {
		t.Run(string(tt.sig), func(t *testing.T) {
			assert.Equal(t, tt.number, tt.sig.Number())
			assert.Equal(t, tt.valid, tt.sig.Valid())
			assert.Equal(t, tt.str, tt.sig.String())
		})
	}
}
