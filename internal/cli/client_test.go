package cli

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/internal/errclass"
)

// TestEveryClassHasAnExitStatus walks every error class: a class added to
// errclass and not to exitStatuses fails here. Usage errors are exactly
// the requests that name no known process or are malformed.
func TestEveryClassHasAnExitStatus(t *testing.T) {
	usage := map[errclass.Class]bool{errclass.InvalidID: true, errclass.Ambiguous: true,
		errclass.NotFound: true, errclass.Invalid: true, errclass.InvalidSpec: true}
	for _, c := range errclass.Classes() {
		want, ok := exitStatuses[c]
		if !ok {
			assert.Fail(t, fmt.Sprintf("class %v: no exit status in exitStatuses", c))
			continue
		}
		assert.Truef(t, usage[c] == (want == exitUsage) && (want == exitUsage || want == exitCorralError), "class %v: exit status %d", c, want)
		var ee *exitError
		assert.Truef(t, errors.As(daemonError("op", fmt.Errorf("daemon: x: %w", errclass.New(c, "test"))), &ee) && ee.code == want, "class %v: daemonError gives %+v, want exit %d", c, ee, want)
	}
}

// TestDaemonCodesExitStatus: what the daemon answers (docs/api.md) ends
// the command with 2 for invalid_id, ambiguous, invalid and not_found, and
// 125 for anything else.
func TestDaemonCodesExitStatus(t *testing.T) {
	for code, want := range map[string]int{
		daemon.CodeInvalidID: exitUsage, daemon.CodeAmbiguous: exitUsage, daemon.CodeInvalid: exitUsage,
		daemon.CodeNotFound: exitUsage, daemon.CodeRunning: exitCorralError, daemon.CodeNotRunning: exitCorralError,
		daemon.CodeLimit: exitCorralError, daemon.CodeClosed: exitCorralError, daemon.CodeForbidden: exitCorralError,
		daemon.CodeUnsupported: exitCorralError, daemon.CodeInternal: exitCorralError, "": exitCorralError,
	} {
		ae := &daemon.APIError{Status: http.StatusBadRequest, Code: code, Message: "registry: boom"}
		var ee *exitError
		assert.Truef(t, errors.As(daemonError("op", ae), &ee) && ee.code == want && (ee.msg == "op: boom" || strings.HasPrefix(ee.msg, "op: boom (")), "code %q: %+v, want exit %d", code, ee, want)
		// One usage error among several failures makes the command's
		// status a usage error.
		assert.Truef(t, errors.As(daemonError("op", errors.New("daemon: boom"), ae), &ee) && ee.code == want, "code %q after another failure: %+v, want exit %d", code, ee, want)
	}
}

// TestDaemonErrorHints: the CLI's hints name its own commands, the
// process as the user named it, one line per failed request.
func TestDaemonErrorHints(t *testing.T) {
	notFound := &daemon.APIError{Status: 404, Code: daemon.CodeNotFound, Message: "registry: no such process: proc_000000000000: pruned"}
	running := &daemon.APIError{Status: 409, Code: daemon.CodeRunning, Message: "registry: process is still running: proc_0123456789ab is running: kill it first"}
	var ee *exitError
	errors.As(daemonError("rm", &procError{id: "proc_000000000000", err: notFound}, &procError{id: "0123", err: running}), &ee)
	want := "rm: no such process: proc_000000000000: pruned (`corral ps --all` lists the tracked processes)\n" +
		"process is still running: proc_0123456789ab is running: kill it first (corral kill 0123, or corral rm --force 0123)"
	assert.Truef(t, ee != nil && ee.msg == want && ee.code == exitUsage, "got %+v, want exit 2 and\n%s", ee, want)
	errors.As(daemonError("send", &daemon.APIError{Code: daemon.CodeNotRunning, Message: "registry: not running"}), &ee)
	assert.Truef(t, ee.msg == "send: not running", "a class without a hint: %q", ee.msg)
}
