// Command policy_cost evaluates a ValidatingAdmissionPolicy with kube-apiserver's own admission
// code (k8s.io/apiserver, the version the local control plane runs) and reports how long each
// evaluation takes. bench/policy_cost.ts drives it: it writes the case on stdin as JSON
// (the policy, the Leases that are its parameters, the requests) and reads the result on stdout.
//
// Each request is a CREATE of a Pod in its namespace by the operator's ServiceAccount, bound to the
// Pod named in the request (the user's extra `authentication.kubernetes.io/pod-name`, as a bound
// ServiceAccount token gives it). The policy is evaluated once per Lease, as the apiserver does
// for a binding whose paramRef selects several objects; the request is admitted when every
// evaluation admits it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// leaseIn is one Lease given as a parameter.
type leaseIn struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Holder      string            `json:"holder"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// requestIn is one Pod create: its namespace, the user, and the Pod its token is bound to.
type requestIn struct {
	Namespace string `json:"namespace"`
	User      string `json:"user"`
	Pod       string `json:"pod"`
}

// input is what the driver writes on stdin.
type input struct {
	Policy   admissionv1.ValidatingAdmissionPolicy `json:"policy"`
	Leases   []leaseIn                             `json:"leases"`
	Requests []requestIn                           `json:"requests"`
	Runs     int                                   `json:"runs"`
}

// evaluation is one Lease's verdict on one request, in the last run.
type evaluation struct {
	Admitted bool   `json:"admitted"`
	Error    string `json:"error,omitempty"`
}

// output is what the program writes on stdout: per run, the nanoseconds of every evaluation (in
// request-major, Lease-minor order); the verdicts of the last run in the same order.
type output struct {
	Nanos   [][]int64    `json:"nanos"`
	Verdict []evaluation `json:"verdict"`
}

// compile builds the policy's validator as the apiserver's validating admission plugin does.
func compile(p *admissionv1.ValidatingAdmissionPolicy) (validating.Validator, error) {
	withParams := plugincel.OptionalVariableDeclarations{HasParams: true, HasAuthorizer: true}
	messages := plugincel.OptionalVariableDeclarations{HasParams: true, HasAuthorizer: false}
	c, err := plugincel.NewCompositedCompiler(
		environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, err
	}
	vars := []plugincel.NamedExpressionAccessor{}
	for _, v := range p.Spec.Variables {
		vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	c.CompileAndStoreVariables(vars, withParams, environment.StoredExpressions)
	conds := []plugincel.ExpressionAccessor{}
	msgs := []plugincel.ExpressionAccessor{}
	for _, v := range p.Spec.Validations {
		conds = append(conds, &validating.ValidationCondition{
			Expression: v.Expression, Message: v.Message, Reason: v.Reason,
		})
		msgs = append(msgs, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
	}
	v := validating.NewValidator(
		c.CompileCondition(conds, withParams, environment.StoredExpressions),
		nil,
		c.CompileCondition(nil, withParams, environment.StoredExpressions),
		c.CompileCondition(msgs, messages, environment.StoredExpressions),
		p.Spec.FailurePolicy,
		nil,
	)
	return v, v.CompileError()
}

func lease(l leaseIn) runtime.Object {
	out := &coordv1.Lease{
		TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{
			Name: l.Name, Namespace: l.Namespace, Labels: l.Labels, Annotations: l.Annotations,
		},
	}
	if l.Holder != "" {
		h := l.Holder
		out.Spec.HolderIdentity = &h
	}
	return out
}

func podCreate(r requestIn) *admission.VersionedAttributes {
	u := &user.DefaultInfo{Name: r.User}
	if r.Pod != "" {
		u.Extra = map[string][]string{"authentication.kubernetes.io/pod-name": {r.Pod}}
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]interface{}{"name": "probe", "namespace": r.Namespace},
	}}
	a := admission.NewAttributesRecord(obj, nil, gvk, r.Namespace, "probe", gvr, "",
		admission.Create, &metav1.CreateOptions{}, false, u)
	return &admission.VersionedAttributes{Attributes: a, VersionedKind: gvk, VersionedObject: obj}
}

func run() error {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return fmt.Errorf("reading the case from stdin: %w", err)
	}
	v, err := compile(&in.Policy)
	if err != nil {
		return fmt.Errorf("compiling the policy: %w", err)
	}
	params := make([]runtime.Object, len(in.Leases))
	for i, l := range in.Leases {
		params[i] = lease(l)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	out := output{}
	for run := 0; run < max(1, in.Runs); run++ {
		nanos := make([]int64, 0, len(in.Requests)*len(params))
		verdict := make([]evaluation, 0, cap(nanos))
		for _, r := range in.Requests {
			attrs := podCreate(r)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Namespace}}
			for _, p := range params {
				start := time.Now()
				res := v.Validate(context.Background(), gvr, attrs, p, ns,
					celconfig.RuntimeCELCostBudget, nil)
				nanos = append(nanos, time.Since(start).Nanoseconds())
				e := evaluation{Admitted: true}
				for _, d := range res.Decisions {
					if d.Evaluation == validating.EvalError {
						e.Error = d.Message
					}
					if d.Action != validating.ActionAdmit {
						e.Admitted = false
					}
				}
				verdict = append(verdict, e)
			}
		}
		out.Nanos = append(out.Nanos, nanos)
		out.Verdict = verdict
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "policy_cost:", err)
		os.Exit(1)
	}
}
