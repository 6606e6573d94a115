//! The kinds every Kubernetes API server serves, with their plural and scope as
//! k8s-openapi (the API's own generated types) has them: what `capstan test` and the SDK's
//! fixtures check a plugin's declared built-in kinds against, where `capstan run` asks the
//! API server's discovery.

use k8s_openapi::{
    ClusterResourceScope, NamespaceResourceScope, Resource, api, apiextensions_apiserver, kube_aggregator,
};

use crate::Kind;

/// Whether a k8s-openapi scope marker is namespaced.
trait Scope {
    const NAMESPACED: bool;
}

impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// One built-in kind as the API server serves it.
struct Served {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
}

const fn served<K: Resource>() -> Served
where
    K::Scope: Scope,
{
    Served {
        group: K::GROUP,
        version: K::VERSION,
        kind: K::KIND,
        plural: K::URL_PATH_SEGMENT,
        namespaced: <K::Scope as Scope>::NAMESPACED,
    }
}

macro_rules! builtin {
    ($($ty:path),* $(,)?) => {
        /// Every top-level kind k8s-openapi generates (subresources and discovery types
        /// left out), listed by type so plural and scope are the API's, not ours: the list
        /// is `grep -rl "impl crate::Resource for"` over k8s-openapi's `src/v1_37`.
        const BUILTIN: &[Served] = &[$(served::<$ty>()),*];
    };
}

builtin! {
    api::admissionregistration::v1::MutatingAdmissionPolicy,
    api::admissionregistration::v1::MutatingAdmissionPolicyBinding,
    api::admissionregistration::v1::MutatingWebhookConfiguration,
    api::admissionregistration::v1::ValidatingAdmissionPolicy,
    api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    api::admissionregistration::v1::ValidatingWebhookConfiguration,
    api::admissionregistration::v1alpha1::MutatingAdmissionPolicy,
    api::admissionregistration::v1alpha1::MutatingAdmissionPolicyBinding,
    api::admissionregistration::v1beta1::MutatingAdmissionPolicy,
    api::admissionregistration::v1beta1::MutatingAdmissionPolicyBinding,
    api::apiserverinternal::v1alpha1::StorageVersion,
    api::apps::v1::ControllerRevision,
    api::apps::v1::DaemonSet,
    api::apps::v1::Deployment,
    api::apps::v1::ReplicaSet,
    api::apps::v1::StatefulSet,
    api::authentication::v1::SelfSubjectReview,
    api::authentication::v1::TokenReview,
    api::authorization::v1::LocalSubjectAccessReview,
    api::authorization::v1::SelfSubjectAccessReview,
    api::authorization::v1::SelfSubjectRulesReview,
    api::authorization::v1::SubjectAccessReview,
    api::autoscaling::v1::HorizontalPodAutoscaler,
    api::autoscaling::v2::HorizontalPodAutoscaler,
    api::batch::v1::CronJob,
    api::batch::v1::Job,
    api::certificates::v1::CertificateSigningRequest,
    api::certificates::v1::ClusterTrustBundle,
    api::certificates::v1::PodCertificateRequest,
    api::certificates::v1beta1::ClusterTrustBundle,
    api::certificates::v1beta1::PodCertificateRequest,
    api::coordination::v1::Lease,
    api::coordination::v1alpha2::LeaseCandidate,
    api::coordination::v1beta1::LeaseCandidate,
    api::core::v1::Binding,
    api::core::v1::ComponentStatus,
    api::core::v1::ConfigMap,
    api::core::v1::Endpoints,
    api::core::v1::Event,
    api::core::v1::LimitRange,
    api::core::v1::Namespace,
    api::core::v1::Node,
    api::core::v1::PersistentVolume,
    api::core::v1::PersistentVolumeClaim,
    api::core::v1::Pod,
    api::core::v1::PodTemplate,
    api::core::v1::ReplicationController,
    api::core::v1::ResourceQuota,
    api::core::v1::Secret,
    api::core::v1::Service,
    api::core::v1::ServiceAccount,
    api::discovery::v1::EndpointSlice,
    api::events::v1::Event,
    api::flowcontrol::v1::FlowSchema,
    api::flowcontrol::v1::PriorityLevelConfiguration,
    api::lifecycle::v1alpha1::Eviction,
    api::lifecycle::v1alpha1::EvictionRequest,
    api::networking::v1::IPAddress,
    api::networking::v1::Ingress,
    api::networking::v1::IngressClass,
    api::networking::v1::NetworkPolicy,
    api::networking::v1::ServiceCIDR,
    api::node::v1::RuntimeClass,
    api::policy::v1::PodDisruptionBudget,
    api::rbac::v1::ClusterRole,
    api::rbac::v1::ClusterRoleBinding,
    api::rbac::v1::Role,
    api::rbac::v1::RoleBinding,
    api::resource::v1::DeviceClass,
    api::resource::v1::DeviceTaintRule,
    api::resource::v1::ResourceClaim,
    api::resource::v1::ResourceClaimTemplate,
    api::resource::v1::ResourceSlice,
    api::resource::v1alpha3::DeviceTaintRule,
    api::resource::v1alpha3::ResourcePoolStatusRequest,
    api::resource::v1beta1::DeviceClass,
    api::resource::v1beta1::ResourceClaim,
    api::resource::v1beta1::ResourceClaimTemplate,
    api::resource::v1beta1::ResourceSlice,
    api::resource::v1beta2::DeviceClass,
    api::resource::v1beta2::DeviceTaintRule,
    api::resource::v1beta2::ResourceClaim,
    api::resource::v1beta2::ResourceClaimTemplate,
    api::resource::v1beta2::ResourceSlice,
    api::scheduling::v1::PriorityClass,
    api::scheduling::v1alpha3::CompositePodGroup,
    api::scheduling::v1alpha3::PodGroup,
    api::scheduling::v1alpha3::Workload,
    api::scheduling::v1beta1::PodGroup,
    api::scheduling::v1beta1::Workload,
    api::storage::v1::CSIDriver,
    api::storage::v1::CSINode,
    api::storage::v1::CSIStorageCapacity,
    api::storage::v1::StorageClass,
    api::storage::v1::VolumeAttachment,
    api::storage::v1::VolumeAttributesClass,
    api::storagemigration::v1::StorageVersionMigration,
    api::storagemigration::v1beta1::StorageVersionMigration,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    kube_aggregator::pkg::apis::apiregistration::v1::APIService,
}

/// The plural and scope the API server serves a built-in kind with; `None` for any other
/// kind (a custom resource, or a version this Kubernetes does not have).
pub fn served_as(kind: &Kind) -> Option<(&'static str, bool)> {
    BUILTIN
        .iter()
        .find(|s| s.group == kind.group && s.version == kind.version && s.kind == kind.kind)
        .map(|s| (s.plural, s.namespaced))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(group: &str, version: &str, kind: &str) -> Kind {
        Kind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: String::new(),
            namespaced: true,
        }
    }

    #[test]
    fn built_in_kinds_are_served_with_the_apis_plural_and_scope() {
        let binding = kind("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding");
        assert_eq!(served_as(&binding), Some(("clusterrolebindings", false)));
        assert_eq!(
            served_as(&kind("", "v1", "ConfigMap")),
            Some(("configmaps", true))
        );
        assert_eq!(
            served_as(&kind("", "v1", "Namespace")),
            Some(("namespaces", false))
        );
        assert_eq!(served_as(&kind("capstan.dev", "v1alpha1", "Echo")), None);
        assert_eq!(served_as(&kind("", "v2", "ConfigMap")), None, "no such version");
    }
}
