// AppService (apps.our-org.com/v1) as hand-written Go types with hand-written deep copies, the
// same shape as crd/appservice.yaml. No code generation: DeepCopyInto is what controller-gen would
// write for these fields.
package main

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion of AppService.
var GroupVersion = schema.GroupVersion{Group: "apps.our-org.com", Version: "v1"}

// Finalizer every managed AppService carries.
const Finalizer = "apps.our-org.com/finalizer"

// AppServiceSpec is the desired state.
type AppServiceSpec struct {
	Image         string                       `json:"image"`
	Replicas      *int32                       `json:"replicas,omitempty"`
	Resources     *corev1.ResourceRequirements `json:"resources,omitempty"`
	Env           []corev1.EnvVar              `json:"env,omitempty"`
	Ports         []corev1.ContainerPort       `json:"ports,omitempty"`
	RestartPolicy corev1.RestartPolicy         `json:"restartPolicy,omitempty"`
}

// PodStatusEntry is one owned Pod in the status.
type PodStatusEntry struct {
	Name         string `json:"name"`
	Phase        string `json:"phase"`
	Ready        bool   `json:"ready"`
	RestartCount int32  `json:"restartCount"`
	PodIP        string `json:"podIP,omitempty"`
}

// AppServiceStatus is the observed state (status subresource).
type AppServiceStatus struct {
	Ready              bool               `json:"ready"`
	Replicas           int32              `json:"replicas"`
	ReadyReplicas      int32              `json:"readyReplicas"`
	ReplicasSummary    string             `json:"replicasSummary,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration"`
	LastReconciliation string             `json:"lastReconciliation,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	PodStatuses        []PodStatusEntry   `json:"podStatuses,omitempty"`
}

// AppService is the custom resource.
type AppService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              AppServiceSpec    `json:"spec"`
	Status            *AppServiceStatus `json:"status,omitempty"`
}

// AppServiceList is a list of AppServices.
type AppServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AppService `json:"items"`
}

// DeepCopyInto copies the spec.
func (in *AppServiceSpec) DeepCopyInto(out *AppServiceSpec) {
	*out = *in
	if in.Replicas != nil {
		r := *in.Replicas
		out.Replicas = &r
	}
	if in.Resources != nil {
		out.Resources = in.Resources.DeepCopy()
	}
	if in.Env != nil {
		out.Env = make([]corev1.EnvVar, len(in.Env))
		for i := range in.Env {
			in.Env[i].DeepCopyInto(&out.Env[i])
		}
	}
	if in.Ports != nil {
		out.Ports = make([]corev1.ContainerPort, len(in.Ports))
		copy(out.Ports, in.Ports)
	}
}

// DeepCopyInto copies the status.
func (in *AppServiceStatus) DeepCopyInto(out *AppServiceStatus) {
	*out = *in
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	if in.PodStatuses != nil {
		out.PodStatuses = make([]PodStatusEntry, len(in.PodStatuses))
		copy(out.PodStatuses, in.PodStatuses)
	}
}

// DeepCopyInto copies the object.
func (in *AppService) DeepCopyInto(out *AppService) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	if in.Status != nil {
		out.Status = new(AppServiceStatus)
		in.Status.DeepCopyInto(out.Status)
	}
}

// DeepCopy returns a copy.
func (in *AppService) DeepCopy() *AppService {
	if in == nil {
		return nil
	}
	out := new(AppService)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *AppService) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *AppServiceList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(AppServiceList)
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]AppService, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// addToScheme registers the types.
func addToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &AppService{}, &AppServiceList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
