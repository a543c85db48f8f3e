package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/registry"
)

// answer sends err through the daemon's side of the API (status, code and
// JSON body) and reads it back as the client does.
func answer(err error) (*APIError, int) {
	rec := httptest.NewRecorder()
	status, code := errorCode(err)
	writeError(rec, status, code, err.Error())
	resp := rec.Result()
	defer resp.Body.Close()
	var ae *APIError
	if !errors.As(readError(resp), &ae) {
		panic("readError returned no *APIError")
	}
	return ae, resp.StatusCode
}

// TestEveryClassCrossesHTTP walks every error class through the API: the
// status and code it is answered with, and the class the client reads
// back. A class added to errclass and not to httpErrors fails here.
func TestEveryClassCrossesHTTP(t *testing.T) {
	// What the API answered before classes existed (docs/api.md): a class
	// travels as itself, as the registry class a client acts on alike
	// (folded), as itself and also the class it refines (also: a spec the
	// backend refused is an invalid request too), or as an internal error.
	internal := httpError{http.StatusInternalServerError, CodeInternal}
	want := map[errclass.Class]struct {
		h      httpError
		folded errclass.Class
		also   errclass.Class
	}{
		errclass.InvalidID:   {h: httpError{400, CodeInvalidID}},
		errclass.Ambiguous:   {h: httpError{400, CodeAmbiguous}},
		errclass.NotFound:    {h: httpError{404, CodeNotFound}},
		errclass.Invalid:     {h: httpError{400, CodeInvalid}},
		errclass.InvalidSpec: {h: httpError{400, CodeInvalidSpec}, also: errclass.Invalid},
		errclass.Running:     {h: httpError{409, CodeRunning}},
		errclass.NotRunning:  {h: httpError{409, CodeNotRunning}},
		errclass.StdinClosed: {h: httpError{409, CodeNotRunning}, folded: errclass.NotRunning},
		errclass.Limit:       {h: httpError{429, CodeLimit}},
		errclass.Closed:      {h: httpError{503, CodeClosed}},
		errclass.NameInUse:   {h: httpError{409, CodeNameInUse}},
		errclass.WaitTimeout: {h: internal},
		errclass.ProcessGone: {h: internal},
		errclass.Unsupported: {h: httpError{400, CodeUnsupported}},
		errclass.SandboxGone: {h: internal},
		errclass.Released:    {h: internal},
		errclass.Exited:      {h: internal},
		errclass.Unavailable: {h: internal},
	}
	for _, c := range errclass.Classes() {
		_, ok := httpErrors[c]
		if !assert.True(t, ok, "class %v: no HTTP status and code in httpErrors", c) {
			continue
		}
		w, ok := want[c]
		if !assert.True(t, ok, "class %v: this test does not say how it must travel", c) {
			continue
		}
		sentinel := errclass.New(c, "test sentinel")
		got, status := answer(fmt.Errorf("registry: op: %w", sentinel))
		assert.Equal(t, w.h.status, status, "class %v: the status", c)
		assert.Equal(t, w.h.status, got.Status, "class %v: the status the client read", c)
		assert.Equal(t, w.h.code, got.Code, "class %v: the code", c)
		back := errclass.Of(got)
		switch {
		case w.h == internal:
			assert.Equal(t, errclass.Unknown, back, "class %v, an internal error, came back as a class", c)
		case w.also != errclass.Unknown:
			assert.Equal(t, w.also, back, "class %v: the class it refines comes first", c)
			assert.ErrorIs(t, got, sentinel, "class %v", c)
			assert.ErrorIs(t, got, errclass.New(w.also, "its parent"), "class %v", c)
		case w.folded != errclass.Unknown:
			assert.Equal(t, w.folded, back, "class %v: folded", c)
			assert.NotErrorIs(t, got, sentinel, "class %v: folded, it no longer matches its own sentinel", c)
		default:
			assert.Equal(t, c, back, "class %v came back as another", c)
			assert.ErrorIs(t, got, sentinel, "class %v", c)
		}
	}
	got, _ := answer(errors.New("boom"))
	assert.Equal(t, CodeInternal, got.Code, "a plain error")
	assert.Equal(t, errclass.Unknown, errclass.Of(got), "a plain error")
}

// TestSentinelsCrossHTTP: the client's error matches the very sentinel the
// registry returned, and no other; a folded env sentinel matches the
// registry's it travels as; a refused spec matches the env sentinels of
// its class and the registry's invalid options.
func TestSentinelsCrossHTTP(t *testing.T) {
	errSpec := errors.New("the invalid-spec class and the registry's invalid options")
	all := []error{registry.ErrInvalidID, registry.ErrAmbiguous, registry.ErrNotFound, registry.ErrInvalidOptions,
		registry.ErrRunning, registry.ErrNotRunning, registry.ErrLimit, registry.ErrClosed, registry.ErrWaitTimeout, registry.ErrNameInUse,
		env.ErrInvalidSpec, env.ErrDirNotFound, env.ErrStdinClosed, env.ErrNotFound, env.ErrUnsupported,
		env.ErrSandboxGone, env.ErrReleased, env.ErrExited, env.ErrUnavailable}
	cases := []struct {
		err  error
		want error // nil: an internal error
	}{
		{registry.ErrInvalidID, registry.ErrInvalidID},
		{&registry.AmbiguousError{Prefix: "abcd", Candidates: []string{"proc_abcd00000000", "proc_abcd00000001"}}, registry.ErrAmbiguous},
		{registry.ErrNotFound, registry.ErrNotFound},
		{registry.ErrInvalidOptions, registry.ErrInvalidOptions},
		{&env.SpecError{Field: "Dir", Value: "/nope", Reason: "no such directory", Err: env.ErrDirNotFound}, errSpec},
		{registry.ErrRunning, registry.ErrRunning},
		{fmt.Errorf("registry: write x: %w: %w", registry.ErrNotRunning, env.ErrExited), registry.ErrNotRunning},
		{env.ErrStdinClosed, registry.ErrNotRunning},
		{registry.ErrLimit, registry.ErrLimit},
		{registry.ErrClosed, registry.ErrClosed},
		{registry.ErrNameInUse, registry.ErrNameInUse},
		{&env.LimitError{Backend: "ssh://h", Limits: []string{"memory"}, Reason: "no cgroup"}, env.ErrUnsupported},
		{registry.ErrWaitTimeout, nil},
		{env.ErrNotFound, nil},
		{env.ErrUnavailable, nil},
		{env.ErrExited, nil},
	}
	for _, tc := range cases {
		got, _ := answer(fmt.Errorf("op: %w", tc.err))
		assert.Equal(t, "op: "+tc.err.Error(), got.Message, "%v: the message", tc.err)
		for _, s := range all {
			want := s == tc.want
			if tc.want == errSpec {
				// The class travels, not which of its sentinels.
				want = s == registry.ErrInvalidOptions || s == env.ErrInvalidSpec || s == env.ErrDirNotFound
			}
			assert.Equal(t, want, errors.Is(got, s), "%v answered %q: errors.Is(_, %v)", tc.err, got.Code, s)
		}
	}
}

// TestFailedStartKeepsItsClass: a start the backend refuses after the
// process was registered (a working directory that does not exist) comes
// back to the client as the invalid request it is, not as an anonymous
// error, so front ends can tell the caller it is theirs to fix.
func TestFailedStartKeepsItsClass(t *testing.T) {
	c, _ := startDaemon(t)
	in, err := c.Start(t.Context(), registry.StartOptions{Command: "true", Dir: "/nonexistent-corral-dir"})
	require.Error(t, err, "start in a missing directory succeeded")
	assert.ErrorIs(t, err, registry.ErrInvalidOptions, "(%T)", err)
	assert.Equal(t, registry.StateFailed, in.State)
}
