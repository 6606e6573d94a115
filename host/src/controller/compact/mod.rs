//! The form in which the host's caches keep parents and children: typed metadata (which
//! is all the host reads between reconciles) and the rest of the object as JSON text.
//!
//! A `serde_json::Value` tree holds an object in three to four times the bytes of its
//! text (an allocation per key and string, map nodes), and caches hold every parent and
//! child for as long as they exist. A reconcile turns its parent back into a
//! [`DynamicObject`] once, and a child into JSON for the plugin's request, which it needed
//! anyway. `metadata.managedFields` is dropped: no plugin is shown it and the host never
//! reads it (server-side apply tracks ownership on the server; a conflict comes back as
//! an error), and it is often the larger half of an object — all but the paths of what
//! Capstan's own plugins applied to a parent's status, which tell whether a status write
//! would remove anything (see [`crate::apply::status_unchanged`]), and the bare entry of
//! a plugin's create (see [`crate::apply::ownership`]). Watch events are read straight
//! into this form ([`decode`]).

use std::borrow::Cow;
use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use kube::core::DynamicResourceScope;
use kube::runtime::watcher::Event;

use crate::engine::Json;
pub use pairs::Pairs;
use shown::{Shown, push_field};

mod decode;
mod pairs;
mod shown;

/// An object as the caches keep it. Every part is shared, so the clone kube-runtime's
/// store makes of each object it takes in is three reference counts, not a deep copy of
/// the metadata per watch event.
#[derive(Clone, Debug)]
pub struct Compact {
    /// `apiVersion` and `kind`.
    pub types: Option<Arc<TypeMeta>>,
    /// Its metadata, with only the `managedFields` entries [`decode`] keeps, and without
    /// labels and annotations: read labels with [`Compact::labels`] (`ResourceExt`'s
    /// would find none); both are back in [`Compact::object`] and [`Compact::json`].
    pub metadata: Arc<ObjectMeta>,
    /// `metadata.labels` and `metadata.annotations`, compact.
    marks: Arc<Marks>,
    /// Every other field (`spec`, `status`, `data`, ...) as one JSON object.
    rest: Arc<str>,
}

/// An object's labels and annotations; `None` where its metadata had no such field.
#[derive(Debug, Default)]
struct Marks {
    labels: Option<Pairs>,
    annotations: Option<Pairs>,
}

/// What an object without labels (or annotations) has.
static NONE: std::sync::LazyLock<Pairs> = std::sync::LazyLock::new(Pairs::default);

impl Compact {
    /// The compact form of `object`, read as a watch reads it (tests build theirs so).
    #[cfg(test)]
    pub fn of(object: DynamicObject) -> Compact {
        // An object always serializes, and reads back as it was written.
        serde_json::to_value(&object)
            .and_then(serde_json::from_value)
            .expect("an object reads back")
    }

    /// The compact form of an object's type, metadata (its `managedFields` already
    /// filtered, see [`decode`]) and other fields (`rest`, one JSON object as text).
    fn from_parts(types: Option<TypeMeta>, mut metadata: ObjectMeta, marks: Marks, rest: String) -> Compact {
        // A list as deserialized keeps room for four items, and a cache keeps it for good.
        if let Some(owners) = metadata.owner_references.as_mut() {
            owners.shrink_to_fit();
        }
        if let Some(finalizers) = metadata.finalizers.as_mut() {
            finalizers.shrink_to_fit();
        }
        Compact {
            types: types.map(Arc::new),
            metadata: Arc::new(metadata),
            marks: Arc::new(marks),
            rest: rest.into(),
        }
    }

    /// Its labels.
    pub fn labels(&self) -> &Pairs {
        self.marks.labels.as_ref().unwrap_or(&NONE)
    }

    /// Its metadata, whole (labels and annotations in it).
    fn whole_metadata(&self) -> ObjectMeta {
        let mut metadata = (*self.metadata).clone();
        if let Some(labels) = &self.marks.labels {
            metadata.labels = Some(labels.to_map());
        }
        if let Some(annotations) = &self.marks.annotations {
            metadata.annotations = Some(annotations.to_map());
        }
        metadata
    }

    /// The whole object again. An error if the kept text no longer parses: never an
    /// object with its data left out, which a plugin could answer with "no children".
    pub fn object(&self) -> Result<DynamicObject, serde_json::Error> {
        Ok(DynamicObject {
            types: self.types.as_deref().cloned(),
            metadata: self.whole_metadata(),
            data: serde_json::from_str(&self.rest)?,
        })
    }

    /// The whole object as JSON, as a plugin is shown it: the kept text with the type
    /// and metadata put in front (what serializing [`Compact::object`] would give, but
    /// `managedFields`), without a tree of the object on the way.
    pub fn json(&self) -> Result<Json, serde_json::Error> {
        let mut text = self.head(self.rest.len());
        // The rest is one object, `{}` when the object has nothing else.
        match self.rest.strip_prefix('{').map(str::trim_start) {
            Some(rest) if !rest.starts_with('}') => {
                text.push(b',');
                text.extend_from_slice(rest.as_bytes());
            }
            _ => text.push(b'}'),
        }
        // Made of serialized parts, so it is UTF-8 and parses; if it ever did not, the
        // reconcile fails rather than show the plugin less than the object (`{}` would
        // read as "nothing here" and prune).
        let text = String::from_utf8(text).map_err(<serde_json::Error as serde::de::Error>::custom)?;
        Json::from_text(text)
    }

    /// `{"apiVersion":…,"kind":…,"metadata":{…}` (not closed), with room for `more` bytes.
    fn head(&self, more: usize) -> Vec<u8> {
        let mut text = Vec::with_capacity(more + 512);
        text.push(b'{');
        if let Some(types) = &self.types {
            push_field(&mut text, "apiVersion", &types.api_version);
            push_field(&mut text, "kind", &types.kind);
        }
        let shown = Shown::of(
            &self.metadata,
            self.marks.labels.as_ref(),
            self.marks.annotations.as_ref(),
        );
        push_field(&mut text, "metadata", &shown);
        text
    }

    /// The whole object as a tree, as [`Compact::json`] shows it.
    pub fn value(&self) -> Result<serde_json::Value, serde_json::Error> {
        Ok(self.json()?.value())
    }
}

/// The type of every object a cache of `resource` keeps, one copy shared by all of them.
/// Objects of a list come without `apiVersion` and `kind` (list items carry no type);
/// the contract promises both to plugins, and the unchanged-check compares them, so they
/// are filled in.
pub fn cached(resource: &ApiResource) -> impl FnMut(&mut Compact) + Send + use<> {
    let types = Arc::new(TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    });
    move |o| {
        if o.types.as_deref().is_none_or(|t| t == &*types) {
            o.types = Some(types.clone());
        }
    }
}

/// A watcher event with its object in one shared allocation.
pub fn event(event: Event<Compact>) -> Event<Arc<Compact>> {
    match event {
        Event::Apply(o) => Event::Apply(Arc::new(o)),
        Event::Delete(o) => Event::Delete(Arc::new(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(Arc::new(o)),
        Event::InitDone => Event::InitDone,
    }
}

impl crate::apply::Labelled for Compact {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels().get(key)
    }
}

/// The fields kept typed, in front of the text of the rest.
const HEAD: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Checked where each part is kept: type and metadata as the small text a plugin is shown
/// of them, the rest in its text as it came, with no tree of the object built.
impl crate::apply::Existing for Compact {
    fn applied(&self) -> Option<&str> {
        self.marks
            .annotations
            .as_ref()?
            .get(crate::apply::APPLIED_ANNOTATION)
    }

    fn holds(&self, desired: &serde_json::Value) -> bool {
        let Some(fields) = desired.as_object() else {
            return false;
        };
        let mut head = self.head(0);
        head.push(b'}');
        let not_head: Vec<&str> = fields
            .keys()
            .map(String::as_str)
            .filter(|k| !HEAD.contains(k))
            .collect();
        // Made of serialized parts, so it is UTF-8.
        let head = std::str::from_utf8(&head).unwrap_or_default();
        crate::apply::is_subset_of_text(desired, head, &not_head)
            && crate::apply::is_subset_of_text(desired, &self.rest, &HEAD)
    }
}

/// A cached object's type as kube-runtime carries it in every reference to the object
/// (a store's keys, the scheduler's queue, each watch event's trigger): one shared
/// [`ApiResource`] per watched type, so a reference's clone is a count, not five strings
/// (about 250 bytes and five allocations per reference; 10 000 parents and their
/// children are 20 000 keys in the stores alone).
#[derive(Clone, Debug)]
pub struct Type(Arc<ApiResource>);

impl From<ApiResource> for Type {
    fn from(resource: ApiResource) -> Type {
        Type(Arc::new(resource))
    }
}

impl std::ops::Deref for Type {
    type Target = ApiResource;

    fn deref(&self) -> &ApiResource {
        &self.0
    }
}

/// Equal when they name the same resource, shared or not.
impl PartialEq for Type {
    fn eq(&self, other: &Type) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for Type {}

/// Group and kind only: equal kinds hash alike, and a reference's name and namespace,
/// hashed beside it, spread the objects of one type.
impl std::hash::Hash for Type {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.group.hash(state);
        self.0.kind.hash(state);
    }
}

/// The same as `DynamicObject`'s: the kind comes from the [`ApiResource`].
impl kube::Resource for Compact {
    type DynamicType = Type;
    type Scope = DynamicResourceScope;

    fn kind(dt: &Type) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &Type) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &Type) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &Type) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &Type) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        Arc::make_mut(&mut self.metadata)
    }
}

#[cfg(test)]
mod tests;
