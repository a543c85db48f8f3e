package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corralhq/corral/env"
)

// TestErrorRoundTrip sends every sentinel through ToStatus and FromStatus
// and checks it still matches, with the plugin's message kept.
func TestErrorRoundTrip(t *testing.T) {
	sentinels := []error{env.ErrNotFound, env.ErrUnsupported, env.ErrSandboxGone, env.ErrReleased, env.ErrExited,
		env.ErrStdinClosed, env.ErrUnavailable, env.ErrInvalidSpec, env.ErrDirNotFound}
	for _, sentinel := range sentinels {
		orig := fmt.Errorf("mybackend: something: %w", sentinel)
		got := FromStatus("plugin x: op", ToStatus(orig))
		if !errors.Is(got, sentinel) {
			t.Errorf("%v: round trip gives %v, which does not match", sentinel, got)
		}
		for _, other := range sentinels {
			if other != sentinel && errors.Is(got, other) && !(sentinel == env.ErrDirNotFound && other == env.ErrInvalidSpec) {
				t.Errorf("%v: round trip also matches %v", sentinel, other)
			}
		}
		if want := "plugin x: op: " + orig.Error(); got.Error() != want {
			t.Errorf("message %q, want %q", got.Error(), want)
		}
	}
}

func TestSpecErrorRoundTrip(t *testing.T) {
	for _, inner := range []error{nil, env.ErrDirNotFound} {
		orig := fmt.Errorf("start: %w", &env.SpecError{Field: "Dir", Value: "/no such", Reason: "does not exist", Err: inner})
		got := FromStatus("op", ToStatus(orig))
		var se *env.SpecError
		if !errors.As(got, &se) {
			t.Fatalf("round trip %v is no *env.SpecError", got)
		}
		if se.Field != "Dir" || se.Value != "/no such" || se.Reason != "does not exist" {
			t.Errorf("fields lost: %+v", se)
		}
		if !errors.Is(got, env.ErrInvalidSpec) {
			t.Errorf("%v does not match ErrInvalidSpec", got)
		}
		if errors.Is(got, env.ErrDirNotFound) != (inner != nil) {
			t.Errorf("%v: ErrDirNotFound match = %v, want %v", got, errors.Is(got, env.ErrDirNotFound), inner != nil)
		}
	}
}

// TestTransportFailureIsUnavailable: a bare Unavailable status (the plugin
// died; no details) is ErrUnavailable on the host.
func TestTransportFailureIsUnavailable(t *testing.T) {
	got := FromStatus("op", status.Error(codes.Unavailable, "connection reset"))
	if !errors.Is(got, env.ErrUnavailable) {
		t.Errorf("%v does not match ErrUnavailable", got)
	}
	if got := FromStatus("op", status.Error(codes.Internal, "boom")); errors.Is(got, env.ErrUnavailable) {
		t.Errorf("an internal error %v matches ErrUnavailable", got)
	}
	if got := FromStatus("op", ToStatus(context.DeadlineExceeded)); !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("deadline round trip = %v", got)
	}
	if got := FromStatus("op", ToStatus(errors.New("plain"))); got.Error() != "op: plain" {
		t.Errorf("plain error round trip = %q", got)
	}
}
