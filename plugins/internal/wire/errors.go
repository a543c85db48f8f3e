package wire

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/errclass"
	pb "github.com/corralhq/corral/plugins/proto"
)

// kinds is the proto identity of each env sentinel, so that the host
// re-creates the very sentinel the plugin returned. Order matters for
// ToStatus: ErrDirNotFound is checked before ErrInvalidSpec, which it also
// matches.
var kinds = []struct {
	err  error
	kind pb.Error_Kind
}{
	{env.ErrDirNotFound, pb.Error_KIND_DIR_NOT_FOUND},
	{env.ErrInvalidSpec, pb.Error_KIND_INVALID_SPEC},
	{env.ErrNotFound, pb.Error_KIND_NOT_FOUND},
	{env.ErrUnsupported, pb.Error_KIND_UNSUPPORTED},
	{env.ErrSandboxGone, pb.Error_KIND_SANDBOX_GONE},
	{env.ErrReleased, pb.Error_KIND_RELEASED},
	{env.ErrExited, pb.Error_KIND_EXITED},
	{env.ErrStdinClosed, pb.Error_KIND_STDIN_CLOSED},
	{env.ErrUnavailable, pb.Error_KIND_UNAVAILABLE},
}

// classCodes is the gRPC translation of the error classes: the code each
// class travels under. Only env's classes cross the plugin boundary (a
// plugin serves an env.Environment, which returns no registry errors): the
// registry's are listed as codes.Unknown, "not carried", so that a class
// added to errclass and forgotten here fails TestEveryClassCrossesTheWire.
var classCodes = map[errclass.Class]codes.Code{
	errclass.InvalidSpec: codes.InvalidArgument,
	errclass.ProcessGone: codes.NotFound,
	errclass.Unsupported: codes.Unimplemented,
	errclass.SandboxGone: codes.FailedPrecondition,
	errclass.Released:    codes.FailedPrecondition,
	errclass.Exited:      codes.FailedPrecondition,
	errclass.StdinClosed: codes.FailedPrecondition,
	errclass.Unavailable: codes.Unavailable,

	errclass.InvalidID:   codes.Unknown,
	errclass.Ambiguous:   codes.Unknown,
	errclass.NotFound:    codes.Unknown,
	errclass.Invalid:     codes.Unknown,
	errclass.Running:     codes.Unknown,
	errclass.NotRunning:  codes.Unknown,
	errclass.Limit:       codes.Unknown,
	errclass.Closed:      codes.Unknown,
	errclass.WaitTimeout: codes.Unknown,
	errclass.NameInUse:   codes.Unknown,
}

// ToStatus turns an error of the plugin's Environment into a gRPC status
// error whose details carry the sentinel kind (and the SpecError fields).
// The message is err's text, so the host shows the plugin's own words.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isEnvError(err) {
		return err
	}
	code := codes.Unknown
	detail := &pb.Error{}
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			code, detail.Kind = classCodes[errclass.Of(k.err)], k.kind
			break
		}
	}
	var se *env.SpecError
	if errors.As(err, &se) {
		detail.Spec = &pb.SpecError{Field: se.Field, Value: se.Value, Reason: se.Reason}
	}
	st, derr := status.New(code, err.Error()).WithDetails(detail)
	if derr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

func isEnvError(err error) bool {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return true
		}
	}
	return false
}

// FromStatus turns a gRPC error received by the host back into an error
// matching the same env sentinels (and *env.SpecError) as the plugin's.
// Transport failures (the plugin died, the connection broke) match
// env.ErrUnavailable. op names the operation for the message.
func FromStatus(op string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	var detail *pb.Error
	for _, d := range st.Details() {
		if e, ok := d.(*pb.Error); ok {
			detail = e
			break
		}
	}
	msg := st.Message()
	if detail != nil {
		if s := detail.GetSpec(); s != nil {
			se := &env.SpecError{Field: s.GetField(), Value: s.GetValue(), Reason: s.GetReason()}
			if detail.GetKind() == pb.Error_KIND_DIR_NOT_FOUND {
				se.Err = env.ErrDirNotFound
			}
			return &remoteError{op: op, msg: msg, err: se}
		}
		for _, k := range kinds {
			if k.kind == detail.GetKind() {
				return &remoteError{op: op, msg: msg, err: k.err}
			}
		}
	}
	switch st.Code() {
	case codes.Canceled:
		return fmt.Errorf("%s: %s: %w", op, msg, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %s: %w", op, msg, context.DeadlineExceeded)
	case codes.Unavailable:
		// No detail: the transport itself failed, which for a local plugin
		// means the plugin process is gone.
		return &remoteError{op: op, msg: "plugin unreachable: " + msg, err: env.ErrUnavailable}
	case codes.Unimplemented:
		// No detail: gRPC's own answer for a method the plugin does not
		// have (built before it was added), which is unsupported.
		return &remoteError{op: op, msg: "the plugin does not implement this call (built with an older corral SDK): " + msg, err: env.ErrUnsupported}
	}
	return &remoteError{op: op, msg: msg}
}

// remoteError is an error that crossed the plugin boundary: the plugin's
// message, matching the sentinel (or *env.SpecError) it matched there.
type remoteError struct {
	op  string
	msg string
	err error
}

func (e *remoteError) Error() string { return e.op + ": " + e.msg }
func (e *remoteError) Unwrap() error { return e.err }
