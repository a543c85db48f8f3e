package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

// The exec's command line is one of two fixed bootstraps; the script comes
// first on stdin, framed by a header line "LENGTH NONCE", so that nothing a
// caller sends lands in argv (the API server's audit log records exec
// arguments) and the command line stays short whatever the script. dd with
// iflag=fullblock reads exactly LENGTH bytes and no more (busybox's head -c
// reads ahead through stdio), leaving the rest of stdin to the script.
//
// execBoot also ends stderr with "\nNONCE CODE\n" as the shell exits: the
// API server's own status is lost with the connection (client-go reports
// an error stream that ended early as success), and a script whose
// result is unknown must never read as exit 0.
const (
	bootRead = `IFS=' ' read -r corral_n corral_k || exit 125; corral_s=$(dd bs="$corral_n" count=1 iflag=fullblock 2>/dev/null) || exit 125; `
	execBoot = bootRead + `trap 'corral_x=$?; printf "\n%s %d\n" "$corral_k" "$corral_x" >&2' EXIT; eval "$corral_s"`
	// shellBoot starts a resident shell: nothing to report but its streams.
	shellBoot = bootRead + `eval "$corral_s"`
)

// Transport runs the nohup engine's scripts in one container of one pod
// through the API server's exec subresource. It implements
// nohup.ShellTransport.
type Transport struct {
	c                  *cluster
	ns, pod, container string
	podUID             string // the pod's UID when opened: a pod created again under the name is another sandbox
	name               string // ns/pod[/container], for messages
	runURL, shellURL   *url.URL

	goneMu sync.Mutex
	gone   error // set once the pod is known to be gone for good
}

var (
	_ nohup.ShellTransport = (*Transport)(nil)
)

// newTransport builds the two exec URLs once: the command line is fixed.
func newTransport(c *cluster, ns, pod, container, uid string) *Transport {
	t := &Transport{c: c, ns: ns, pod: pod, container: container, podUID: uid, name: ns + "/" + pod}
	if container != "" {
		t.name += "/" + container
	}
	t.runURL, t.shellURL = t.execURL(execBoot), t.execURL(shellBoot)
	return t
}

func (t *Transport) execURL(boot string) *url.URL {
	return t.c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.ns).Name(t.pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: t.container,
			Command:   []string{"/bin/sh", "-c", boot},
			Stdin:     true,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec).URL()
}

// executor is client-go's WebSocket executor (protocol v5, which can close
// stdin alone) with SPDY as the fallback for API servers that refuse the
// upgrade, as kubectl does. One per call: each keeps its connection in
// its round tripper, so two calls on one executor race (the race detector
// caught it under the conformance suite's concurrent starts).
func (t *Transport) executor(u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(t.c.cfg, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("k8s: exec in %s: %w", t.name, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(t.c.cfg, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("k8s: exec in %s: %w", t.name, err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// frame returns the header and script a bootstrap reads, and the nonce of
// its exit line.
func frame(script string) (io.Reader, string) {
	var n [12]byte
	_, _ = rand.Read(n[:])
	nonce := "corral-exit-" + hex.EncodeToString(n[:])
	return strings.NewReader(strconv.Itoa(len(script)) + " " + nonce + "\n" + script), nonce
}

// Exec implements nohup.Transport.
func (t *Transport) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if err := t.goneErr(); err != nil {
		return -1, err
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	head, nonce := frame(script)
	in := head
	if stdin != nil {
		in = io.MultiReader(head, stdin)
	}
	tail := &exitTail{w: stderr, nonce: nonce}
	errHead := &headWriter{w: tail, max: 4096}
	ex, err := t.executor(t.runURL)
	if err != nil {
		return -1, err
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in, Stdout: stdout, Stderr: errHead})
	if ctx.Err() != nil {
		return -1, fmt.Errorf("k8s: exec in %s: %w", t.name, ctx.Err())
	}
	code, reported := tail.finish()
	var ee utilexec.ExitError
	switch {
	case err == nil && reported:
	case err == nil:
		// The stream ended without the shell's exit line: the connection
		// was cut, or the shell was killed; either way nobody knows how
		// the script ended.
		return -1, t.lost(ctx, errors.New("the exec ended without the script's exit status"))
	case errors.As(err, &ee):
		if !reported {
			code = ee.ExitStatus()
		}
	default:
		return -1, t.lost(ctx, err)
	}
	if code == 125 && !reported && bytes.Contains(errHead.head.Bytes(), []byte("dd")) {
		return -1, fmt.Errorf("k8s: exec in %s: the container has no dd that reads iflag=fullblock (GNU coreutils or busybox), which corral needs to send scripts on stdin", t.name)
	}
	if code != 0 && nohup.ForkFailed(errHead.head.Bytes()) {
		return -1, fmt.Errorf("k8s: exec in %s: cannot fork (pids limit reached?): %.200s: %w",
			t.name, bytes.TrimSpace(errHead.head.Bytes()), env.ErrUnavailable)
	}
	if code >= 126 && !reported {
		// The shell died of a signal or the runtime could not start it: a
		// container that is stopping does both.
		if gerr := t.checkPod(ctx); gerr != nil {
			return -1, gerr
		}
	}
	return code, nil
}

// OpenShell implements nohup.ShellTransport: an exec whose streams stay
// open for as long as the engine keeps the shell. It returns once the
// script has been handed to the shell, which is when the stream is up.
func (t *Transport) OpenShell(ctx context.Context, script string) (*nohup.Shell, error) {
	if err := t.goneErr(); err != nil {
		return nil, err
	}
	ex, err := t.executor(t.shellURL)
	if err != nil {
		return nil, err
	}
	head, _ := frame(script)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: errW})
		if err == nil {
			err = io.EOF
		}
		inR.CloseWithError(err)
		outW.CloseWithError(err)
		errW.CloseWithError(err)
		done <- err
	}()
	stop := sync.OnceValue(func() error {
		cancel()
		inW.Close()
		outR.Close()
		errR.Close()
		return nil
	})
	// The stream copies stdin only once it is up: the write returns then,
	// or fails with the stream's error.
	wrote := make(chan error, 1)
	go func() {
		_, err := io.Copy(inW, head)
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			stop()
			return nil, t.lost(ctx, err)
		}
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("k8s: resident shell in %s: %w", t.name, ctx.Err())
	}
	return &nohup.Shell{Stdin: inW, Stdout: outR, Stderr: errR, Stop: stop}, nil
}

// lost classifies an exec that failed without a result: the pod gone
// (env.ErrSandboxGone), a refusal (ErrForbidden, with the permissions
// that are missing), else the API server or the connection failing
// (env.ErrUnavailable, which the engine retries).
func (t *Transport) lost(ctx context.Context, err error) error {
	if apierrors.IsForbidden(err) || strings.Contains(err.Error(), "403") {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
		defer cancel()
		if aerr := t.c.checkAccess(cctx, t.ns, podPermissions); aerr != nil {
			return aerr
		}
		return fmt.Errorf("k8s: exec in %s refused: %s: %w", t.name, short(err.Error()), ErrForbidden)
	}
	if gerr := t.checkPod(ctx); gerr != nil {
		return gerr
	}
	return fmt.Errorf("k8s: exec in %s: %s: %w", t.name, short(err.Error()), env.ErrUnavailable)
}

// checkPod looks the pod up: nil while it runs, env.ErrSandboxGone once it
// is deleted, replaced (another UID under its name) or its container has
// ended, env.ErrUnavailable when the API server does not answer.
func (t *Transport) checkPod(ctx context.Context) error {
	if err := t.goneErr(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	pod, err := t.c.cs.CoreV1().Pods(t.ns).Get(cctx, t.pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return t.setGone(fmt.Errorf("k8s: pod %s no longer exists: %w", t.name, env.ErrSandboxGone))
	}
	if err != nil {
		return t.c.apiError(cctx, "look up pod "+t.name, err)
	}
	if t.podUID != "" && string(pod.UID) != t.podUID {
		return t.setGone(fmt.Errorf("k8s: pod %s was deleted and created again (a new pod under the old name): %w", t.name, env.ErrSandboxGone))
	}
	if why := notRunning(pod, t.container); why != "" {
		return t.setGone(fmt.Errorf("k8s: pod %s %s: %w", t.name, why, env.ErrSandboxGone))
	}
	return nil
}

func (t *Transport) setGone(err error) error {
	t.goneMu.Lock()
	defer t.goneMu.Unlock()
	if t.gone == nil {
		t.gone = err
	}
	return t.gone
}

func (t *Transport) goneErr() error {
	t.goneMu.Lock()
	defer t.goneMu.Unlock()
	return t.gone
}

// notRunning says why a pod cannot run commands in container (its first
// when ""), or "" when it can.
func notRunning(pod *corev1.Pod, container string) string {
	if pod.DeletionTimestamp != nil {
		return "is being deleted"
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return "has ended (" + strings.ToLower(string(pod.Status.Phase)) + ")"
	}
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
		if d := pod.Annotations["kubectl.kubernetes.io/default-container"]; d != "" {
			container = d
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		if cs.State.Terminated != nil {
			return fmt.Sprintf("container %s has ended (%s, exit %d)", container, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
		return ""
	}
	return ""
}

// exitTail passes a stream on but for its last bytes, which may be the
// bootstrap's exit line "\nNONCE CODE\n": finish takes the line off and
// returns the code.
type exitTail struct {
	w     io.Writer
	nonce string
	held  []byte
	err   error
}

// tailMax bounds the held bytes: "\n" NONCE " " CODE "\n".
const tailMax = 1 + 36 + 1 + 4 + 1

func (x *exitTail) Write(p []byte) (int, error) {
	x.held = append(x.held, p...)
	if over := len(x.held) - tailMax; over > 0 {
		if x.err == nil {
			_, x.err = x.w.Write(x.held[:over])
		}
		x.held = append(x.held[:0], x.held[over:]...)
	}
	return len(p), nil
}

// finish writes what is not the exit line and returns its code.
func (x *exitTail) finish() (int, bool) {
	code, ok := -1, false
	if i := bytes.LastIndex(x.held, []byte("\n"+x.nonce+" ")); i >= 0 && bytes.HasSuffix(x.held, []byte("\n")) {
		n, err := strconv.Atoi(string(x.held[i+len(x.nonce)+2 : len(x.held)-1]))
		if err == nil {
			code, ok = n, true
			x.held = x.held[:i]
		}
	}
	if x.err == nil && len(x.held) > 0 {
		_, x.err = x.w.Write(x.held)
	}
	x.held = nil
	return code, ok
}

// headWriter passes writes on and keeps their first max bytes.
type headWriter struct {
	w    io.Writer
	head bytes.Buffer
	max  int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - h.head.Len(); room > 0 {
		h.head.Write(p[:min(room, len(p))])
	}
	return h.w.Write(p)
}
