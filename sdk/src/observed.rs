//! Partial views of observed children: what most reconcilers read of a child is its name
//! and its status, and parsing only that is cheaper in every way than the full type.

use serde::Deserialize;

/// An observed child's name and status, e.g. `Observed<JobStatus>` for a `Job`; read
/// with [`crate::Context::children_as`].
///
/// Everything else in the object is skipped unparsed. For workload kinds that matters:
/// the deserializer of a full `Job` carries the whole `PodSpec` and every volume source,
/// which makes a plugin a third larger and, optimised, several times costlier for the
/// host to compile.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Observed<S> {
    /// Identity of the child.
    #[serde(default)]
    pub metadata: ObservedMeta,
    /// The child's status, if the API server or its controller wrote one.
    pub status: Option<S>,
}

/// The identifying part of an observed child's `metadata`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ObservedMeta {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
}
