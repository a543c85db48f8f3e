package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/errclass"
)

// TestErrorRoundTrip sends every sentinel through ToStatus and FromStatus
// and checks it still matches, with the plugin's message kept.
func TestErrorRoundTrip(t *testing.T) {
	sentinels := []error{env.ErrNotFound, env.ErrUnsupported, env.ErrSandboxGone, env.ErrReleased, env.ErrExited,
		env.ErrStdinClosed, env.ErrUnavailable, env.ErrInvalidSpec, env.ErrDirNotFound}
	for _, sentinel := range sentinels {
		orig := fmt.Errorf("mybackend: something: %w", sentinel)
		got := FromStatus("plugin x: op", ToStatus(orig))
		assert.Truef(t, errors.Is(got, sentinel), "%v: round trip gives %v, which does not match", sentinel, got)
		for _, other := range sentinels {
			assert.Truef(t, (other == sentinel || !errors.Is(got, other)) || (sentinel == env.ErrDirNotFound && other == env.ErrInvalidSpec), "%v: round trip also matches %v", sentinel, other)
		}
		if want := "plugin x: op: " + orig.Error(); got.Error() != want {
			assert.Fail(t, fmt.Sprintf("message %q, want %q", got.Error(), want))
		}
	}
}

func TestSpecErrorRoundTrip(t *testing.T) {
	for _, inner := range []error{nil, env.ErrDirNotFound} {
		orig := fmt.Errorf("start: %w", &env.SpecError{Field: "Dir", Value: "/no such", Reason: "does not exist", Err: inner})
		got := FromStatus("op", ToStatus(orig))
		var se *env.SpecError
		require.Truef(t, errors.As(got, &se), "round trip %v is no *env.SpecError", got)
		assert.Truef(t, se.Field == "Dir" && se.Value == "/no such" && se.Reason == "does not exist", "fields lost: %+v", se)
		assert.Truef(t, errors.Is(got, env.ErrInvalidSpec), "%v does not match ErrInvalidSpec", got)
		if errors.Is(got, env.ErrDirNotFound) != (inner != nil) {
			assert.Fail(t, fmt.Sprintf("%v: ErrDirNotFound match = %v, want %v", got, errors.Is(got, env.ErrDirNotFound), inner != nil))
		}
	}
}

// TestTransportFailureIsUnavailable: a bare Unavailable status (the plugin
// died; no details) is ErrUnavailable on the host.
func TestTransportFailureIsUnavailable(t *testing.T) {
	got := FromStatus("op", status.Error(codes.Unavailable, "connection reset"))
	assert.Truef(t, errors.Is(got, env.ErrUnavailable), "%v does not match ErrUnavailable", got)
	if got := FromStatus("op", status.Error(codes.Internal, "boom")); errors.Is(got, env.ErrUnavailable) {
		assert.Fail(t, fmt.Sprintf("an internal error %v matches ErrUnavailable", got))
	}
	if got := FromStatus("op", ToStatus(context.DeadlineExceeded)); !errors.Is(got, context.DeadlineExceeded) {
		assert.Fail(t, fmt.Sprintf("deadline round trip = %v", got))
	}
	if got := FromStatus("op", ToStatus(errors.New("plain"))); got.Error() != "op: plain" {
		assert.Fail(t, fmt.Sprintf("plain error round trip = %q", got))
	}
}

// TestEveryClassCrossesTheWire walks every error class: a class the plugin
// protocol carries has a gRPC code and a proto kind for each of its
// sentinels, and each sentinel comes back as itself under that code; a
// class it does not carry (the registry's) has neither, and comes back as
// no class at all. A class added to errclass without a decision here fails.
func TestEveryClassCrossesTheWire(t *testing.T) {
	// The codes on the wire, as plugins built with earlier SDKs send them.
	want := map[error]codes.Code{
		env.ErrInvalidSpec: codes.InvalidArgument,
		env.ErrDirNotFound: codes.InvalidArgument,
		env.ErrNotFound:    codes.NotFound,
		env.ErrUnsupported: codes.Unimplemented,
		env.ErrSandboxGone: codes.FailedPrecondition,
		env.ErrReleased:    codes.FailedPrecondition,
		env.ErrExited:      codes.FailedPrecondition,
		env.ErrStdinClosed: codes.FailedPrecondition,
		env.ErrUnavailable: codes.Unavailable,
	}
	for _, c := range errclass.Classes() {
		code, ok := classCodes[c]
		if !ok {
			assert.Fail(t, fmt.Sprintf("class %v: no gRPC code (codes.Unknown if plugins never return it)", c))
			continue
		}
		var members []error
		for _, k := range kinds {
			if errclass.Of(k.err) == c {
				members = append(members, k.err)
			}
		}
		if code == codes.Unknown {
			assert.Truef(t, len(members) <= 0, "class %v is not carried, yet %v have proto kinds", c, members)
			got := FromStatus("op", ToStatus(fmt.Errorf("x: %w", errclass.New(c, "test"))))
			cl := errclass.Of(got)
			assert.Truef(t, cl == errclass.Unknown, "class %v, not carried, came back as %v", c, cl)
			continue
		}
		assert.Truef(t, len(members) != 0, "class %v travels as %v but no sentinel of it has a proto kind", c, code)
		for _, s := range members {
			st, _ := status.FromError(ToStatus(fmt.Errorf("mybackend: %w", s)))
			if st.Code() != code || st.Code() != want[s] {
				assert.Fail(t, fmt.Sprintf("%v (class %v) travels as %v, want %v", s, c, st.Code(), want[s]))
			}
			got := FromStatus("op", st.Err())
			if !errors.Is(got, s) || errclass.Of(got) != c {
				assert.Fail(t, fmt.Sprintf("%v (class %v) came back as %v, class %v", s, c, got, errclass.Of(got)))
			}
		}
	}
	for s := range want {
		c := errclass.Of(s)
		assert.Truef(t, classCodes[c] != codes.Unknown, "%v: its class %v is not carried", s, c)
	}
}
