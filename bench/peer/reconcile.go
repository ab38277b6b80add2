// The AppService reconciler of the peer: the same steps as lib/appservice/reconcile.ts, written
// the controller-runtime way (cached client reads, an API reader for the finalizer's check,
// optimistic-lock merge patches, status through the status subresource only when it changed).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

const (
	specHashAnnotation = "apps.our-org.com/spec-hash"
	managedBy          = "appservice-operator"
	containerName      = "app"
	ownerUIDIndex      = ".metadata.controllerUID"
	cleanupPoll        = 2 * time.Second
	fieldOwner         = "appservice-peer"
)

var ordinalRe = regexp.MustCompile(`^(0|[1-9][0-9]{0,2})$`)

// Reconciler reconciles AppServices.
type Reconciler struct {
	client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
}

func ownedLabels(as *AppService) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       as.Name,
		"app.kubernetes.io/instance":   as.Name,
		"app.kubernetes.io/managed-by": managedBy,
	}
}

func selectorLabels(as *AppService) map[string]string {
	return map[string]string{
		"app.kubernetes.io/instance":   as.Name,
		"app.kubernetes.io/managed-by": managedBy,
	}
}

func ownerRef(as *AppService) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{
		APIVersion: GroupVersion.String(), Kind: "AppService", Name: as.Name, UID: as.UID,
		Controller: &t, BlockOwnerDeletion: &t,
	}
}

func replicasOf(as *AppService) int {
	if as.Spec.Replicas == nil {
		return 1
	}
	return int(*as.Spec.Replicas)
}

func restartPolicyOf(as *AppService) corev1.RestartPolicy {
	if as.Spec.RestartPolicy == "" {
		return corev1.RestartPolicyAlways
	}
	return as.Spec.RestartPolicy
}

func podSpec(as *AppService) corev1.PodSpec {
	c := corev1.Container{Name: containerName, Image: as.Spec.Image, Env: as.Spec.Env,
		Ports: as.Spec.Ports}
	if as.Spec.Resources != nil {
		c.Resources = *as.Spec.Resources
	}
	return corev1.PodSpec{Containers: []corev1.Container{c}, RestartPolicy: restartPolicyOf(as)}
}

// specHash: 10 hex digits of SHA-256 over the Pod template as JSON with sorted keys (the same
// function as lib/appservice/pods.ts specHash for the fields AppService sets).
func specHash(as *AppService) string {
	c := map[string]any{"name": containerName, "image": as.Spec.Image}
	if len(as.Spec.Env) > 0 {
		c["env"] = generic(as.Spec.Env)
	}
	if len(as.Spec.Ports) > 0 {
		c["ports"] = generic(as.Spec.Ports)
	}
	if as.Spec.Resources != nil {
		if r := generic(as.Spec.Resources); r != nil && len(r.(map[string]any)) > 0 {
			c["resources"] = r
		}
	}
	v := map[string]any{"containers": []any{c}, "restartPolicy": string(restartPolicyOf(as))}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // maps marshal with sorted keys
	sum := sha256.Sum256(bytes.TrimRight(buf.Bytes(), "\n"))
	return hex.EncodeToString(sum[:])[:10]
}

func generic(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

func desiredPod(as *AppService, ordinal int, hash string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("%s-%d", as.Name, ordinal),
			Namespace:       as.Namespace,
			Labels:          ownedLabels(as),
			Annotations:     map[string]string{specHashAnnotation: hash},
			OwnerReferences: []metav1.OwnerReference{ownerRef(as)},
		},
		Spec: podSpec(as),
	}
}

func podOrdinal(as *AppService, p *corev1.Pod) (int, bool) {
	prefix := as.Name + "-"
	if !strings.HasPrefix(p.Name, prefix) {
		return 0, false
	}
	rest := p.Name[len(prefix):]
	if !ordinalRe.MatchString(rest) {
		return 0, false
	}
	n, _ := strconv.Atoi(rest)
	return n, true
}

func isPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func restartCount(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func desiredService(as *AppService) *unstructured.Unstructured {
	if len(as.Spec.Ports) == 0 {
		return nil
	}
	ports := []any{}
	for i, p := range as.Spec.Ports {
		name := p.Name
		if name == "" && len(as.Spec.Ports) > 1 {
			name = fmt.Sprintf("port-%d-%d", i, p.ContainerPort)
		}
		proto := string(p.Protocol)
		if proto == "" {
			proto = "TCP"
		}
		sp := map[string]any{"port": int64(p.ContainerPort), "targetPort": int64(p.ContainerPort),
			"protocol": proto}
		if name != "" {
			sp["name"] = name
		}
		ports = append(ports, sp)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata": map[string]any{
			"name":            as.Name,
			"namespace":       as.Namespace,
			"labels":          toAny(ownedLabels(as)),
			"ownerReferences": []any{generic(ownerRef(as))},
		},
		"spec": map[string]any{"type": "ClusterIP", "selector": toAny(selectorLabels(as)),
			"ports": ports},
	}}
	return u
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// serviceMatches: ports, selector, type and labels as lib/appservice/service.ts compares them.
func serviceMatches(live *corev1.Service, want *unstructured.Unstructured) bool {
	wantLabels, _, _ := unstructured.NestedStringMap(want.Object, "metadata", "labels")
	for k, v := range wantLabels {
		if live.Labels[k] != v {
			return false
		}
	}
	typ := string(live.Spec.Type)
	if typ == "" {
		typ = "ClusterIP"
	}
	if typ != "ClusterIP" {
		return false
	}
	wantSel, _, _ := unstructured.NestedStringMap(want.Object, "spec", "selector")
	if len(wantSel) != len(live.Spec.Selector) {
		return false
	}
	for k, v := range wantSel {
		if live.Spec.Selector[k] != v {
			return false
		}
	}
	wantPorts, _, _ := unstructured.NestedSlice(want.Object, "spec", "ports")
	if len(wantPorts) != len(live.Spec.Ports) {
		return false
	}
	for i, wp := range wantPorts {
		w := wp.(map[string]any)
		l := live.Spec.Ports[i]
		name, _ := w["name"].(string)
		tp := l.TargetPort
		if tp.Type == intstr.Int && tp.IntVal == 0 {
			tp = intstr.FromInt32(l.Port)
		}
		if l.Name != name || int64(l.Port) != w["port"].(int64) ||
			tp.String() != strconv.FormatInt(w["targetPort"].(int64), 10) ||
			string(l.Protocol) != w["protocol"].(string) {
			return false
		}
	}
	return true
}

type condIn struct{ typ, status, reason, message string }

func mergeConditions(old []metav1.Condition, next []condIn, gen int64, now metav1.Time) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(next))
	for _, c := range next {
		ltt := now
		if prev := meta.FindStatusCondition(old, c.typ); prev != nil &&
			string(prev.Status) == c.status {
			ltt = prev.LastTransitionTime
		}
		out = append(out, metav1.Condition{Type: c.typ, Status: metav1.ConditionStatus(c.status),
			Reason: c.reason, Message: c.message, LastTransitionTime: ltt, ObservedGeneration: gen})
	}
	return out
}

func podStatuses(pods []*corev1.Pod) []PodStatusEntry {
	out := make([]PodStatusEntry, 0, len(pods))
	for _, p := range pods {
		phase := string(p.Status.Phase)
		if phase == "" {
			phase = "Pending"
		}
		if p.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		out = append(out, PodStatusEntry{Name: p.Name, Phase: phase, Ready: isPodReady(p),
			RestartCount: restartCount(p), PodIP: p.Status.PodIP})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func statusChanged(old *AppServiceStatus, next *AppServiceStatus) bool {
	if old == nil {
		return true
	}
	a, b := *old, *next
	a.LastReconciliation, b.LastReconciliation = "", ""
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return !bytes.Equal(ja, jb)
}

func (r *Reconciler) baseStatus(as *AppService, pods []*corev1.Pod, conds []condIn) *AppServiceStatus {
	replicas := replicasOf(as)
	hash := specHash(as)
	ready := 0
	for _, p := range pods {
		ord, ok := podOrdinal(as, p)
		if p.DeletionTimestamp == nil && isPodReady(p) && p.Annotations[specHashAnnotation] == hash &&
			ok && ord < replicas {
			ready++
		}
	}
	var old []metav1.Condition
	if as.Status != nil {
		old = as.Status.Conditions
	}
	return &AppServiceStatus{
		Ready:              ready >= replicas,
		Replicas:           int32(replicas),
		ReadyReplicas:      int32(ready),
		ReplicasSummary:    fmt.Sprintf("%d/%d", ready, replicas),
		ObservedGeneration: as.Generation,
		Conditions:         mergeConditions(old, conds, as.Generation, metav1.Now()),
		PodStatuses:        podStatuses(pods),
	}
}

func (r *Reconciler) writeStatus(ctx context.Context, as *AppService, next *AppServiceStatus) error {
	if !statusChanged(as.Status, next) {
		return nil
	}
	orig := as.DeepCopy()
	next.LastReconciliation = time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	as.Status = next
	return r.Status().Patch(ctx, as, client.MergeFrom(orig), client.FieldOwner(fieldOwner))
}

func (r *Reconciler) deleteIgnoringGone(ctx context.Context, obj client.Object) error {
	uid := obj.GetUID()
	err := r.Delete(ctx, obj, client.Preconditions{UID: &uid})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func isControlledBy(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == uid
}

func (r *Reconciler) finalize(ctx context.Context, as *AppService) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(as, Finalizer) {
		return ctrl.Result{}, nil
	}
	// Confirm through the API, not the cache.
	var listed corev1.PodList
	if err := r.APIReader.List(ctx, &listed, client.InNamespace(as.Namespace),
		client.MatchingLabels{"app.kubernetes.io/instance": as.Name}); err != nil {
		return ctrl.Result{}, err
	}
	pods := []*corev1.Pod{}
	for i := range listed.Items {
		if isControlledBy(&listed.Items[i], as.UID) {
			pods = append(pods, &listed.Items[i])
		}
	}
	var svc *corev1.Service
	var s corev1.Service
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: as.Namespace, Name: as.Name},
		&s); err == nil {
		if isControlledBy(&s, as.UID) {
			svc = &s
		}
	} else if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	failures := []string{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := r.deleteIgnoringGone(ctx, p); err != nil {
			failures = append(failures, fmt.Sprintf("Pod %s: %v", p.Name, err))
		} else {
			ctrl.LoggerFrom(ctx).Info("Deleted Pod for cleanup", "pod", p.Name)
		}
	}
	if svc != nil && svc.DeletionTimestamp == nil {
		if err := r.deleteIgnoringGone(ctx, svc); err != nil {
			failures = append(failures, fmt.Sprintf("Service %s: %v", svc.Name, err))
		}
	}
	remaining := len(pods)
	if svc != nil {
		remaining++
	}
	if len(failures) > 0 || remaining > 0 {
		msg := fmt.Sprintf("waiting for %d Pod(s) to be deleted", len(pods))
		degraded := condIn{"Degraded", "False", "AsExpected", ""}
		if len(failures) > 0 {
			msg = "cleanup failed: " + strings.Join(failures, "; ")
			degraded = condIn{"Degraded", "True", "CleanupFailed", msg}
		}
		conds := []condIn{{"Ready", "False", "Terminating", msg},
			{"Progressing", "True", "Terminating", msg}, degraded}
		if err := r.writeStatus(ctx, as, r.baseStatus(as, pods, conds)); err != nil &&
			!apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Info("status write failed", "error", err.Error())
		}
		if len(failures) > 0 {
			r.Recorder.Eventf(as, nil, corev1.EventTypeWarning, "CleanupFailed", "Delete", "%s", msg)
			return ctrl.Result{}, fmt.Errorf("%s", msg)
		}
		return ctrl.Result{RequeueAfter: cleanupPoll}, nil
	}
	orig := as.DeepCopy()
	controllerutil.RemoveFinalizer(as, Finalizer)
	err := r.Patch(ctx, as, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(fieldOwner))
	if err == nil {
		ctrl.LoggerFrom(ctx).Info("Cleanup complete; finalizer removed")
	}
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

type toDelete struct {
	pod *corev1.Pod
	why string
}

// Reconcile makes the cluster match one AppService.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	as := &AppService{}
	if err := r.Get(ctx, req.NamespacedName, as); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if as.DeletionTimestamp != nil {
		return r.finalize(ctx, as)
	}
	if !controllerutil.ContainsFinalizer(as, Finalizer) {
		orig := as.DeepCopy()
		controllerutil.AddFinalizer(as, Finalizer)
		if err := r.Patch(ctx, as,
			client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
			client.FieldOwner(fieldOwner)); err != nil {
			return ctrl.Result{}, err
		}
	}

	replicas := replicasOf(as)
	hash := specHash(as)
	var podList corev1.PodList
	if err := r.List(ctx, &podList, client.InNamespace(as.Namespace),
		client.MatchingFields{ownerUIDIndex: string(as.UID)}); err != nil {
		return ctrl.Result{}, err
	}
	owned := make([]*corev1.Pod, 0, len(podList.Items))
	for i := range podList.Items {
		owned = append(owned, &podList.Items[i])
	}
	failures := [][2]string{}
	byOrdinal := map[int]*corev1.Pod{}
	dels := []toDelete{}
	for _, p := range owned {
		ord, ok := podOrdinal(as, p)
		if p.DeletionTimestamp != nil {
			if ok {
				byOrdinal[ord] = p
			}
			continue
		}
		switch {
		case !ok || ord >= replicas:
			dels = append(dels, toDelete{p, "ScaledDown"})
		case p.Status.Phase == corev1.PodFailed ||
			(p.Status.Phase == corev1.PodSucceeded && restartPolicyOf(as) == corev1.RestartPolicyAlways):
			why := "PodExited"
			if p.Status.Phase == corev1.PodFailed {
				why = "PodFailed"
			}
			dels = append(dels, toDelete{p, why})
			byOrdinal[ord] = p
		default:
			byOrdinal[ord] = p
		}
	}

	// Rolling replacement of drifted Pods, one at a time.
	live := make([]*corev1.Pod, 0, len(byOrdinal))
	for _, p := range byOrdinal {
		live = append(live, p)
	}
	terminating, anyReady := 0, false
	outdated, current := []*corev1.Pod{}, []*corev1.Pod{}
	for _, p := range live {
		if p.DeletionTimestamp != nil {
			terminating++
			continue
		}
		if isPodReady(p) {
			anyReady = true
		}
		if p.Annotations[specHashAnnotation] != hash {
			outdated = append(outdated, p)
		} else {
			current = append(current, p)
		}
	}
	replacing := false
	for _, d := range dels {
		if d.why != "ScaledDown" {
			replacing = true
		}
	}
	if len(outdated) > 0 && terminating == 0 && !replacing {
		candidate := outdated[0]
		for _, p := range outdated {
			if !isPodReady(p) {
				candidate = p
				break
			}
		}
		othersReady := true
		for _, p := range live {
			if p != candidate && !isPodReady(p) {
				othersReady = false
			}
		}
		missing := replicas - len(live)
		if (othersReady && missing == 0) || !anyReady {
			dels = append(dels, toDelete{candidate, "SpecChanged"})
		}
	}

	for _, d := range dels {
		if err := r.deleteIgnoringGone(ctx, d.pod); err != nil {
			failures = append(failures, [2]string{"FailedDeletePod",
				fmt.Sprintf("Pod %s: %v", d.pod.Name, err)})
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleted Pod", "pod", d.pod.Name, "reason", d.why)
		reason := "PodDeleted"
		if d.why == "SpecChanged" {
			reason = "PodReplaced"
		}
		r.Recorder.Eventf(as, d.pod, corev1.EventTypeNormal, reason, "Delete", "Deleted Pod %s (%s)",
			d.pod.Name, d.why)
	}

	created := 0
	for i := 0; i < replicas; i++ {
		if _, ok := byOrdinal[i]; ok {
			continue
		}
		pod := desiredPod(as, i, hash)
		if err := r.Create(ctx, pod, client.FieldOwner(fieldOwner)); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			failures = append(failures, [2]string{"FailedCreatePod",
				fmt.Sprintf("Pod %s: %v", pod.Name, err)})
			continue
		}
		created++
		ctrl.LoggerFrom(ctx).Info("Created Pod", "pod", pod.Name, "specHash", hash)
		r.Recorder.Eventf(as, pod, corev1.EventTypeNormal, "PodCreated", "Create", "Created Pod %s",
			pod.Name)
	}

	// Service.
	want := desiredService(as)
	var liveSvc *corev1.Service
	var svc corev1.Service
	if err := r.Get(ctx, req.NamespacedName, &svc); err == nil && isControlledBy(&svc, as.UID) {
		liveSvc = &svc
	}
	if want != nil && (liveSvc == nil || !serviceMatches(liveSvc, want)) {
		//nolint:staticcheck // server-side apply of an unstructured object
		if err := r.Patch(ctx, want, client.Apply, client.ForceOwnership,
			client.FieldOwner(fieldOwner)); err != nil {
			failures = append(failures, [2]string{"FailedService", fmt.Sprintf("Service %s: %v",
				as.Name, err)})
		} else if liveSvc == nil {
			ctrl.LoggerFrom(ctx).Info("Created Service", "service", as.Name)
			r.Recorder.Eventf(as, nil, corev1.EventTypeNormal, "ServiceCreated", "Create",
				"Created Service %s", as.Name)
		} else {
			ctrl.LoggerFrom(ctx).Info("Updated Service", "service", as.Name)
			r.Recorder.Eventf(as, nil, corev1.EventTypeNormal, "ServiceUpdated", "Update",
				"Updated Service %s", as.Name)
		}
	} else if want == nil && liveSvc != nil && liveSvc.DeletionTimestamp == nil {
		if err := r.deleteIgnoringGone(ctx, liveSvc); err != nil {
			failures = append(failures, [2]string{"FailedService", fmt.Sprintf("Service %s: %v",
				as.Name, err)})
		} else {
			ctrl.LoggerFrom(ctx).Info("Deleted Service", "service", as.Name)
			r.Recorder.Eventf(as, nil, corev1.EventTypeNormal, "ServiceDeleted", "Delete",
				"Deleted Service %s (no ports declared)", as.Name)
		}
	}

	// Status.
	failedPods := []string{}
	for _, p := range owned {
		if p.Status.Phase == corev1.PodFailed {
			failedPods = append(failedPods, p.Name)
		}
	}
	st := r.baseStatus(as, owned, nil)
	converged := len(outdated) == 0 && terminating == 0 && len(dels) == 0 && created == 0 &&
		len(current) == replicas
	progressingReason := "Creating"
	if len(outdated) > 0 {
		progressingReason = "RollingUpdate"
	} else if len(current)+created < replicas || len(dels) > 0 || terminating > 0 {
		progressingReason = "Scaling"
	}
	readyMsg := fmt.Sprintf("%d/%d Pods ready", st.ReadyReplicas, replicas)
	conds := []condIn{}
	if st.Ready {
		conds = append(conds, condIn{"Ready", "True", "AllReplicasReady", readyMsg})
	} else {
		conds = append(conds, condIn{"Ready", "False", "ReplicasNotReady", readyMsg})
	}
	if converged && st.Ready {
		conds = append(conds, condIn{"Progressing", "False", "Complete",
			fmt.Sprintf("%d Pod(s) at spec hash %s", replicas, hash)})
	} else if converged {
		conds = append(conds, condIn{"Progressing", "True", "WaitingForReady",
			"waiting for Pods to become Ready"})
	} else {
		missing := replicas - len(live)
		if missing < 0 {
			missing = 0
		}
		conds = append(conds, condIn{"Progressing", "True", progressingReason,
			fmt.Sprintf("%d outdated, %d terminating, %d missing", len(outdated), terminating, missing)})
	}
	switch {
	case len(failures) > 0:
		msgs := []string{}
		for _, f := range failures {
			msgs = append(msgs, f[1])
		}
		conds = append(conds, condIn{"Degraded", "True", failures[0][0], strings.Join(msgs, "; ")})
	case len(failedPods) > 0:
		conds = append(conds, condIn{"Degraded", "True", "PodFailed",
			"Pod(s) failed: " + strings.Join(failedPods, ", ")})
	default:
		conds = append(conds, condIn{"Degraded", "False", "AsExpected", ""})
	}
	if err := r.writeStatus(ctx, as, r.baseStatus(as, owned, conds)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if len(failures) > 0 {
		msgs := []string{}
		for _, f := range failures {
			r.Recorder.Eventf(as, nil, corev1.EventTypeWarning, f[0], "Reconcile", "%s", f[1])
			msgs = append(msgs, f[1])
		}
		return ctrl.Result{}, fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return ctrl.Result{}, nil
}
