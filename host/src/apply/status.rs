//! A parent's status: written through the status subresource under the plugin's own
//! field manager, never over another plugin's fields, and only when it would change
//! something — the children's rule, read from `managedFields`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::Request;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{api, field_manager, is_subset};

/// True when applying `status` as `plugin`'s status would change nothing: the children's
/// rule, for a status. Every value it sets is observed, and every field `plugin` applied
/// before is one it still sets — read from the parent's `managedFields`, as a status
/// cannot carry the digest annotation a child does — so the apply would neither set nor
/// remove anything. Fields other writers own (another plugin on the same kind, a user)
/// are not this plugin's to compare: a status shared by two plugins is written by each
/// only when its own fields change.
pub fn status_unchanged(status: &Value, parent: &DynamicObject, plugin: &str) -> bool {
    let observed = parent.data.get("status").unwrap_or(&Value::Null);
    if !is_subset(status, observed) {
        return false;
    }
    let manager = field_manager(plugin);
    parent
        .managed_fields()
        .iter()
        .filter(|e| {
            e.manager.as_deref() == Some(manager.as_str()) && e.subresource.as_deref() == Some("status")
        })
        .filter_map(|e| e.fields_v1.as_ref())
        .all(|fields| match &fields.0 {
            // The caches keep a field set's paths as JSON text (`controller::compact`); one
            // that does not parse counts as not covered, so the status is written.
            Value::String(text) => {
                serde_json::from_str::<Value>(text).is_ok_and(|fields| covers(status, &fields["f:status"]))
            }
            fields => covers(status, &fields["f:status"]),
        })
}

/// Whether `entry` is a Capstan plugin's status apply: the `managedFields` entry whose
/// fields [`status_unchanged`] reads, which the caches keep (as its paths).
pub(crate) fn is_status_apply(entry: &ManagedFieldsEntry) -> bool {
    entry.subresource.as_deref() == Some("status")
        && entry.operation.as_deref() == Some("Apply")
        && entry
            .manager
            .as_deref()
            .is_some_and(|m| m.starts_with(super::MANAGER_PREFIX))
}

/// Whether `desired` sets every field of a `managedFields` field set. A list's own
/// entries (`k:`, `v:`, `i:`) are not followed: a list is compared whole by the subset
/// check.
fn covers(desired: &Value, fields: &Value) -> bool {
    let Value::Object(fields) = fields else {
        return true;
    };
    fields.iter().all(|(key, sub)| match key.strip_prefix("f:") {
        Some(name) => match desired {
            Value::Object(d) => d.get(name).is_some_and(|v| covers(v, sub)),
            _ => false,
        },
        None => true,
    })
}

/// What became of a status write.
#[derive(Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// The status was applied, at this resourceVersion of the parent.
    Written(String),
    /// Another Capstan plugin manages a field this one tried to set; the server's
    /// message names it. Nothing was written.
    HeldBy(String),
}

/// `plugin`'s apply of `status` to `parent`'s status subresource. A field another Capstan
/// plugin manages (its field manager `capstan/<name>`) is never taken: a parent kind's
/// status fields belong to the plugin that set them first, and two plugins on one kind
/// each write only their own. A field anyone else set (a user, an earlier controller)
/// is taken over, as it always was.
pub struct StatusApply<'a> {
    /// The client it is sent with.
    pub client: &'a Client,
    /// The parent's kind.
    pub kind: &'a ApiResource,
    /// The parent.
    pub parent: &'a DynamicObject,
    /// The status to apply.
    pub status: &'a Value,
    /// The plugin whose field manager applies it.
    pub plugin: &'a str,
}

impl StatusApply<'_> {
    /// Apply the status.
    pub async fn write(&self) -> kube::Result<StatusWrite> {
        let send = |request| super::written(self.client, request);
        Ok(match self.send(false, send).await? {
            Ok(version) => StatusWrite::Written(version),
            Err(message) => StatusWrite::HeldBy(message),
        })
    }

    /// What applying the status would store, asked with `dryRun=All`: refused over another
    /// Capstan plugin's field, forced over anyone else's, as the write is.
    pub async fn dry_run(&self) -> kube::Result<super::dry::Dry> {
        use super::dry::Dry;
        let send = |request: Result<http::Request<Vec<u8>>, _>| async move {
            let request = request.map_err(kube::Error::BuildRequest)?;
            self.client.request::<Value>(request).await
        };
        match self.send(true, send).await {
            Ok(Ok(stored)) => Ok(Dry::Stored(stored)),
            Ok(Err(message)) => Ok(Dry::Conflict(message)),
            Err(kube::Error::Api(e)) if e.code == 403 => Ok(Dry::Forbidden),
            Err(e) => Err(e),
        }
    }

    /// Send the apply under the ownership rule: unforced; a conflict over another Capstan
    /// plugin's field is that plugin's, answered as `Err(the server's message)`; a
    /// conflict with anyone else is taken over by forcing.
    async fn send<T, Fut>(
        &self,
        dry_run: bool,
        send: impl Fn(Result<http::Request<Vec<u8>>, kube::core::request::Error>) -> Fut,
    ) -> kube::Result<Result<T, String>>
    where
        Fut: std::future::Future<Output = kube::Result<T>>,
    {
        let (ar, parent) = (self.kind, self.parent);
        let body = json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": { "name": parent.name_any() },
            "status": self.status,
        });
        let url = api(self.client, ar, parent.namespace().as_deref())
            .resource_url()
            .to_string();
        let name = parent.name_any();
        let request = |params: &PatchParams| {
            Request::new(&url).patch_subresource("status", &name, params, &Patch::Apply(&body))
        };
        let mut params = PatchParams::apply(&field_manager(self.plugin));
        params.dry_run = dry_run;
        let capstan = format!("conflict with \"{}", super::MANAGER_PREFIX);
        match send(request(&params)).await {
            Err(kube::Error::Api(e)) if e.code == 409 && e.message.contains(&capstan) => Ok(Err(e.message)),
            Err(kube::Error::Api(e)) if e.code == 409 => send(request(&params.force())).await.map(Ok),
            other => other.map(Ok),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent_with_status(status: Value, managed: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Mirror",
            "metadata": {"name": "m", "namespace": "ns", "managedFields": managed},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_status_write_is_skipped_only_when_it_would_change_nothing() {
        let owned = |plugin: &str, fields: Value| {
            json!({"manager": format!("capstan/{plugin}"), "operation": "Apply",
                "subresource": "status", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": fields}})
        };
        // Two plugins on one kind, each with its own field.
        let parent = parent_with_status(
            json!({"a": "1", "b": {"x": 2}, "conditions": [{"type": "Ready", "status": "True"}]}),
            json!([
                owned(
                    "pa",
                    json!({"f:a": {}, "f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {"f:status": {}}}})
                ),
                owned("pb", json!({"f:b": {"f:x": {}}})),
            ]),
        );
        let a = json!({"a": "1", "conditions": [{"type": "Ready", "status": "True"}]});
        assert!(status_unchanged(&a, &parent, "pa"), "b's field is b's");
        assert!(status_unchanged(&json!({"b": {"x": 2}}), &parent, "pb"));
        assert!(!status_unchanged(
            &json!({"a": "2", "conditions": a["conditions"]}),
            &parent,
            "pa"
        ));
        // A field the plugin set before and no longer sets would be removed by the apply.
        assert!(!status_unchanged(&json!({"a": "1"}), &parent, "pa"));
        assert!(!status_unchanged(&json!({}), &parent, "pb"));
        // A plugin that never wrote the status: only its values count.
        assert!(status_unchanged(&json!({"a": "1"}), &parent, "pc"));
        assert!(!status_unchanged(&json!({"c": true}), &parent, "pc"));
    }
}
