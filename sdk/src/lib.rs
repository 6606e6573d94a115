//! Write Capstan reconcile plugins in Rust.
//!
//! A plugin is a pure function from a parent object and the children it controls to the
//! children that should exist, plus status, events and a requeue hint. The Capstan host
//! does all API I/O. Build with `cargo build --target wasm32-wasip2`; the result is a
//! WebAssembly component implementing [`WIT_PACKAGE`] (`capstan:reconciler@0.3.0`).
//!
//! Besides the parent and its children, a reconcile gets the operator's [`Settings`]
//! (validated once when the host loads the plugin), the [`Related`] objects the plugin
//! asked to read for this parent, and the host's clock ([`Context::now`]).
//!
//! ```
//! use capstan_sdk::{Context, Metadata, ReconcileError, Reconciler, Response};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::CustomResource;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Greeting", namespaced)]
//! pub struct GreetingSpec {
//!     pub name: String,
//! }
//!
//! pub struct Greeter;
//!
//! impl Reconciler for Greeter {
//!     type Parent = Greeting;
//!
//!     fn metadata() -> Metadata {
//!         Metadata::new("greeter", "0.1.0").child::<ConfigMap>()
//!     }
//!
//!     fn reconcile(greeting: Greeting, _ctx: &Context) -> Result<Response, ReconcileError> {
//!         let name = greeting.metadata.name.clone().unwrap_or_default();
//!         let mut cm = ConfigMap::default();
//!         cm.metadata.name = Some(format!("{name}-greeting"));
//!         cm.metadata.namespace = greeting.metadata.namespace.clone();
//!         cm.data = Some([("text".into(), format!("hello, {}", greeting.spec.name))].into());
//!         Response::new().child(&cm)
//!     }
//! }
//!
//! capstan_sdk::export!(Greeter);
//! # fn main() {}
//! ```
//!
//! # Settings, related objects, time and conditions
//!
//! The same plugin, configurable by the operator, greeting in the words of a ConfigMap
//! its parent names (so editing that ConfigMap reconciles the Greeting again), and
//! reporting a `Ready` condition stamped with the host's clock:
//!
//! ```
//! use capstan_sdk::conditions::{Condition, Conditions};
//! use capstan_sdk::{Context, Metadata, ReconcileError, Reconciler, Related, Response, Settings};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::CustomResource;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Greeting", namespaced, status = "GreetingStatus")]
//! #[serde(rename_all = "camelCase")]
//! pub struct GreetingSpec {
//!     pub name: String,
//!     /// A ConfigMap whose `salutation` key replaces the operator's.
//!     pub words_from: Option<String>,
//! }
//!
//! #[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
//! pub struct GreetingStatus {
//!     #[schemars(schema_with = "capstan_sdk::conditions::schema")]
//!     pub conditions: Vec<Condition>,
//! }
//!
//! /// What the operator configures for the plugin.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! pub struct GreeterSettings {
//!     #[serde(default = "hello")]
//!     pub salutation: String,
//! }
//!
//! fn hello() -> String {
//!     "hello".into()
//! }
//!
//! impl Settings for GreeterSettings {
//!     fn validate(&self) -> Result<(), String> {
//!         if self.salutation.trim().is_empty() {
//!             return Err("salutation must not be empty".into());
//!         }
//!         Ok(())
//!     }
//! }
//!
//! pub struct Greeter;
//!
//! impl Reconciler for Greeter {
//!     type Parent = Greeting;
//!
//!     fn metadata() -> Metadata {
//!         Metadata::new("greeter", "0.2.0")
//!             .child::<ConfigMap>()
//!             .related::<ConfigMap>()
//!             .settings::<GreeterSettings>()
//!     }
//!
//!     fn related(greeting: &Greeting, _ctx: &Context) -> Vec<Related> {
//!         greeting.spec.words_from.iter().map(|n| Related::named::<ConfigMap>([n.clone()])).collect()
//!     }
//!
//!     fn reconcile(greeting: Greeting, ctx: &Context) -> Result<Response, ReconcileError> {
//!         let settings: GreeterSettings = ctx.settings()?;
//!         let words = ctx.related::<ConfigMap>()?.into_iter().find_map(|cm| cm.data?.remove("salutation"));
//!         let name = greeting.metadata.name.clone().unwrap_or_default();
//!         let mut cm = ConfigMap::default();
//!         cm.metadata.name = Some(format!("{name}-greeting"));
//!         let text = format!("{}, {}", words.unwrap_or(settings.salutation), greeting.spec.name);
//!         cm.data = Some([("text".into(), text)].into());
//!
//!         let previous = greeting.status.map(|s| s.conditions).unwrap_or_default();
//!         let mut conditions = Conditions::new(previous, greeting.metadata.generation, ctx.now());
//!         let created = !ctx.children::<ConfigMap>()?.is_empty();
//!         conditions.ready(created, if created { "Greeted" } else { "Creating" }, "");
//!         Response::new().child(&cm)?.status(&GreetingStatus { conditions: conditions.into_vec() })
//!     }
//! }
//!
//! capstan_sdk::export!(Greeter);
//! # fn main() {}
//! ```
//!
//! `testing::Fixture` (feature `testing`) runs such a plugin natively with settings,
//! related objects and a fixed clock.

pub mod conditions;
mod context;
mod error;
#[doc(hidden)]
pub mod guest;
pub mod log;
pub mod metacontroller;
mod metadata;
mod observed;
mod related;
mod response;
mod settings;
#[cfg(feature = "testing")]
pub mod testing;

pub use context::Context;
pub use error::ReconcileError;
pub use metadata::{KindRef, Metadata, Scope};
pub use observed::{Observed, ObservedMeta};
pub use related::Related;
pub use response::{Event, EventType, ParentMetadata, Response};
pub use settings::Settings;

/// Re-exported so plugins name the same versions the SDK was built with.
pub use k8s_openapi;
pub use kube_core;
pub use schemars;

/// Bindings generated from `wit/` by wit-bindgen; used by [`export!`].
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        // `sdk/wit` links to the repository's `wit/`, so the package carries the contract.
        path: "wit",
        world: "reconciler",
        pub_export_macro: true,
        default_bindings_module: "capstan_sdk::bindings",
    });
}

/// The WIT package this SDK implements.
pub use capstan_contract::WIT_PACKAGE;

/// A reconcile plugin: one parent kind in, desired children and status out.
pub trait Reconciler {
    /// The kind this plugin reconciles: a kube `CustomResource` type or a k8s-openapi type.
    type Parent: kube_core::Resource<DynamicType = (), Scope: Scope> + serde::de::DeserializeOwned;

    /// Name, version, child and related kinds, settings and finalizer; the parent kind
    /// comes from [`Self::Parent`].
    fn metadata() -> Metadata;

    /// The related objects this parent needs (of kinds declared with
    /// [`Metadata::related`]), which `reconcile` then reads with [`Context::related`]. The
    /// host asks whenever the parent changes; `ctx` holds the settings only (no children,
    /// related objects or clock). None by default.
    fn related(parent: &Self::Parent, ctx: &Context) -> Vec<Related> {
        let _ = (parent, ctx);
        Vec::new()
    }

    /// Compute the desired state of one parent. Must be deterministic in its inputs.
    fn reconcile(parent: Self::Parent, ctx: &Context) -> Result<Response, ReconcileError>;
}

/// Export a [`Reconciler`] as the plugin's `capstan:reconciler/plugin` implementation.
#[macro_export]
macro_rules! export {
    ($reconciler:ty) => {
        $crate::__export_guest!(
            $crate::guest::metadata::<$reconciler>(),
            |settings| $crate::guest::validate_settings::<$reconciler>(settings),
            |parent, settings| $crate::guest::related::<$reconciler>(parent, settings),
            |request| $crate::guest::reconcile::<$reconciler>(request)
        );
    };
}

/// The plugin export, each function the expression or closure given; for [`export!`] and
/// [`export_metacontroller!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __export_guest {
    ($metadata:expr, $validate:expr, $related:expr, $reconcile:expr) => {
        const _: () = {
            struct CapstanGuest;
            impl $crate::bindings::exports::capstan::reconciler::plugin::Guest for CapstanGuest {
                fn metadata() -> $crate::bindings::capstan::reconciler::types::PluginMetadata {
                    $metadata
                }
                fn validate_settings(
                    settings: ::std::string::String,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    ($validate)(settings)
                }
                fn related(
                    parent: ::std::string::String,
                    settings: ::std::string::String,
                ) -> ::std::vec::Vec<$crate::bindings::capstan::reconciler::types::RelatedQuery> {
                    ($related)(parent, settings)
                }
                fn reconcile(
                    request: $crate::bindings::capstan::reconciler::types::Request,
                ) -> ::core::result::Result<
                    $crate::bindings::capstan::reconciler::types::Response,
                    $crate::bindings::capstan::reconciler::types::ReconcileError,
                > {
                    ($reconcile)(request)
                }
            }
            // Native builds (unit tests, `testing`) keep the type-checked glue but export
            // nothing: component export names are not valid native symbol names.
            #[cfg(target_family = "wasm")]
    $crate::bindings::export!(CapstanGuest with_types_in $crate::bindings);
        };
    };
}

/// The README's plugin example compiles as a doc test, so it cannot rot.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// So do the book's Rust examples: every page with one is here (`tests/offline/reference.rs`
/// fails on a page that is not).
#[doc = include_str!("../../docs/tutorial/first-plugin.md")]
#[cfg(doctest)]
pub struct TutorialDoctests;

/// The settings guide's examples.
#[doc = include_str!("../../docs/guides/settings.md")]
#[cfg(doctest)]
pub struct SettingsDoctests;

/// The finalizers guide's plugin.
#[doc = include_str!("../../docs/guides/finalizers.md")]
#[cfg(doctest)]
pub struct FinalizersDoctests;
