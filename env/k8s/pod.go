package k8s

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/corralhq/corral/env"
)

// Labels and annotations on every sandbox pod corral creates.
const (
	LabelManaged     = "dev.corral.managed" // "true"
	LabelOwner       = "dev.corral.owner"   // 12 hex digits of the owner's SHA-256
	LabelConfig      = "dev.corral.config"  // Target.configHash
	AnnotationOwner  = "dev.corral/owner"   // the owner, for people
	AnnotationTarget = "dev.corral/target"  // the target, for people
)

// sandboxContainer names the one container of a sandbox pod.
const sandboxContainer = "sandbox"

// keepAlive is the container's command: it idles with only a POSIX sh and
// exits at once on SIGTERM, so that deleting the pod takes no grace
// period. The pod shares one process namespace, whose PID 1 is the pause
// container's, which reaps the engine's orphans.
const keepAlive = `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`

// deleteTimeout bounds the deletion of a sandbox pod and its check.
const deleteTimeout = 30 * time.Second

// sandboxPod is a pod created (or found again) for a k8s-pod:// target.
type sandboxPod struct {
	c        *cluster
	ns, name string
	uid      string
	log      *slog.Logger
}

// podName is the sandbox's name: the owner's and the configuration's
// hashes, so that the same daemon finds its pod again after a restart and
// no other daemon (another owner) ever picks the same name.
func podName(owner string, t Target) string {
	return "corral-" + ownerHash(owner)[:10] + "-" + t.configHash()[:8]
}

func ownerHash(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:6])
}

// ensureSandbox finds the target's pod (same name, owner and
// configuration, running) or creates it, and waits until it runs. A pod it
// created that cannot run is deleted before the error, which gives the
// reason from the pod's status and events, is returned.
func ensureSandbox(ctx context.Context, c *cluster, t Target, target, owner string, log *slog.Logger) (*sandboxPod, error) {
	ns := t.Namespace
	if ns == "" {
		ns = c.namespace
	}
	if err := c.checkAccess(ctx, ns, append(append([]permission(nil), podPermissions...), sandboxPermissions...)); err != nil {
		return nil, err
	}
	sb := &sandboxPod{c: c, ns: ns, name: podName(owner, t), log: log}
	pods := c.cs.CoreV1().Pods(ns)
	for attempt := 0; ; attempt++ {
		found, err := pods.Get(ctx, sb.name, metav1.GetOptions{})
		switch {
		case err == nil:
			if found.Labels[LabelOwner] == ownerHash(owner) && found.Labels[LabelConfig] == t.configHash() &&
				found.DeletionTimestamp == nil && notRunning(found, sandboxContainer) == "" {
				sb.uid = string(found.UID)
				log.Info("k8s: re-using sandbox pod", "pod", ns+"/"+sb.name)
				if err := sb.waitRunning(ctx, t.StartTimeout); err != nil {
					return nil, err
				}
				return sb, nil
			}
			// Ended, being deleted, or another configuration under the
			// name: it is ours (the name holds our owner's hash); make way.
			sb.uid = string(found.UID)
			if err := sb.remove(ctx); err != nil {
				return nil, err
			}
		case apierrors.IsNotFound(err):
		default:
			return nil, c.apiError(ctx, "look up sandbox pod "+ns+"/"+sb.name, err)
		}
		created, err := pods.Create(ctx, sb.spec(t, target, owner), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) && attempt < 3 {
			continue // another opener of this owner raced us: look again
		}
		if err != nil {
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return nil, fmt.Errorf("k8s: the cluster refused sandbox pod %s/%s: %s", ns, sb.name, short(apiMessage(err)))
			}
			return nil, c.apiError(ctx, "create sandbox pod "+ns+"/"+sb.name, err)
		}
		sb.uid = string(created.UID)
		log.Info("k8s: created sandbox pod", "pod", ns+"/"+sb.name, "image", t.Image)
		if err := sb.waitRunning(ctx, t.StartTimeout); err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
			defer cancel()
			return nil, errors.Join(err, sb.remove(rctx))
		}
		return sb, nil
	}
}

func (sb *sandboxPod) spec(t Target, target, owner string) *corev1.Pod {
	yes, no := true, false
	grace := int64(1)
	pull := corev1.PullPolicy(t.Pull)
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	res := corev1.ResourceRequirements{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: t.CPU, corev1.ResourceMemory: t.Memory} {
		if v == "" {
			continue
		}
		q := resource.MustParse(v) // checked by ParseTarget
		if res.Limits == nil {
			res.Limits, res.Requests = corev1.ResourceList{}, corev1.ResourceList{}
		}
		res.Limits[name], res.Requests[name] = q, q
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      sb.name,
			Namespace: sb.ns,
			Labels:    map[string]string{LabelManaged: "true", LabelOwner: ownerHash(owner), LabelConfig: t.configHash()},
			Annotations: map[string]string{
				AnnotationOwner:  owner,
				AnnotationTarget: short(target),
			},
		},
		Spec: corev1.PodSpec{
			ShareProcessNamespace:         &yes,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			ServiceAccountName:            t.ServiceAccount,
			AutomountServiceAccountToken:  map[bool]*bool{true: &yes, false: &no}[t.ServiceAccount != ""],
			EnableServiceLinks:            &no,
			NodeSelector:                  t.NodeSelector,
			Containers: []corev1.Container{{
				Name:            sandboxContainer,
				Image:           t.Image,
				ImagePullPolicy: pull,
				Command:         []string{"/bin/sh", "-c", keepAlive},
				Resources:       res,
			}},
		},
	}
}

// startFailures are the reasons of a waiting container that will not go
// away by waiting.
var startFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "CrashLoopBackOff": true, "RunContainerError": true,
}

// waitRunning watches the pod until its container runs, it fails to start
// (a reason above, or the pod ends), or bound passes; the last two say
// why, from the pod's status and its warning events.
func (sb *sandboxPod) waitRunning(ctx context.Context, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var last *corev1.Pod
	err := sb.watch(ctx, func(pod *corev1.Pod, deleted bool) (bool, error) {
		if deleted {
			return false, fmt.Errorf("k8s: sandbox pod %s/%s was deleted while it started: %w", sb.ns, sb.name, env.ErrSandboxGone)
		}
		last = pod
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("k8s: sandbox pod %s/%s ended as it started: %s", sb.ns, sb.name, sb.why(ctx, pod))
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && startFailures[w.Reason] {
				return false, fmt.Errorf("k8s: sandbox pod %s/%s cannot start: %s: %s", sb.ns, sb.name, w.Reason, short(w.Message))
			}
			if cs.State.Running != nil && pod.Status.Phase == corev1.PodRunning {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil && !errors.Is(err, env.ErrSandboxGone) {
		why := "no status yet"
		if last != nil {
			why = sb.why(context.WithoutCancel(ctx), last)
		}
		return fmt.Errorf("k8s: sandbox pod %s/%s did not run within %v: %s (raise it with ?start-timeout=)", sb.ns, sb.name, bound, why)
	}
	return err
}

// why sums up why a pod does not run: its unschedulable condition, its
// container's waiting or terminated state, and its last warning event.
func (sb *sandboxPod) why(ctx context.Context, pod *corev1.Pod) string {
	var parts []string
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			parts = append(parts, "not scheduled: "+c.Reason+": "+short(c.Message))
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			parts = append(parts, "container "+w.Reason+": "+short(w.Message))
		}
		if x := cs.State.Terminated; x != nil {
			parts = append(parts, fmt.Sprintf("container exited %d (%s)", x.ExitCode, x.Reason))
		}
	}
	ectx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	evs, err := sb.c.cs.CoreV1().Events(sb.ns).List(ectx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.name": sb.name, "involvedObject.namespace": sb.ns, "type": corev1.EventTypeWarning,
	}.String()})
	if err == nil && len(evs.Items) > 0 {
		sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
		e := evs.Items[len(evs.Items)-1]
		parts = append(parts, "event "+e.Reason+": "+short(e.Message))
	}
	if len(parts) == 0 {
		return "phase " + string(pod.Status.Phase)
	}
	return strings.Join(parts, "; ")
}

// watch calls f with the pod's current state (listed), then with each
// change, until f says done or fails; a watch the server ends is opened
// again after a fresh list.
func (sb *sandboxPod) watch(ctx context.Context, f func(pod *corev1.Pod, deleted bool) (bool, error)) error {
	pods := sb.c.cs.CoreV1().Pods(sb.ns)
	sel := fields.OneTermEqualSelector("metadata.name", sb.name).String()
	for {
		// The state as of now, then every change after it.
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return sb.c.apiError(ctx, "watch sandbox pod "+sb.ns+"/"+sb.name, err)
		}
		if len(list.Items) == 0 {
			if done, err := f(nil, true); done || err != nil {
				return err
			}
		} else if done, err := f(&list.Items[0], false); done || err != nil {
			return err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return sb.c.apiError(ctx, "watch sandbox pod "+sb.ns+"/"+sb.name, err)
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return false, ctx.Err()
				case ev, ok := <-w.ResultChan():
					if !ok {
						return false, nil // the server ended the watch: list again
					}
					pod, isPod := ev.Object.(*corev1.Pod)
					switch {
					case ev.Type == watch.Error:
						return false, nil
					case !isPod:
						continue
					case ev.Type == watch.Deleted:
						if done, err := f(pod, true); done || err != nil {
							return done, err
						}
					default:
						if done, err := f(pod, false); done || err != nil {
							return done, err
						}
					}
				}
			}
		}()
		if done || err != nil {
			return err
		}
	}
}

// remove deletes the pod (this UID only: a pod created again under the
// name is left alone) and watches until it is gone, so that a Close that
// returns nil means nothing is left in the cluster.
func (sb *sandboxPod) remove(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, deleteTimeout)
	defer cancel()
	grace := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if sb.uid != "" {
		uid := types.UID(sb.uid)
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := sb.c.cs.CoreV1().Pods(sb.ns).Delete(ctx, sb.name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or another pod under the name
	}
	if err != nil {
		return sb.c.apiError(ctx, "delete sandbox pod "+sb.ns+"/"+sb.name, err)
	}
	err = sb.watch(ctx, func(pod *corev1.Pod, deleted bool) (bool, error) {
		return deleted || (pod != nil && string(pod.UID) != sb.uid), nil
	})
	if err != nil {
		return fmt.Errorf("k8s: sandbox pod %s/%s was deleted but is still there (kubectl -n %s delete pod %s removes it): %w", sb.ns, sb.name, sb.ns, sb.name, err)
	}
	sb.log.Info("k8s: deleted sandbox pod", "pod", sb.ns+"/"+sb.name)
	return nil
}
