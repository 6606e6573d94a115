//! The same writes as [`super::update`] and [`super::create`] (and [`super::StatusApply`]'s), sent with
//! `dryRun=All`: the API server runs admission, defaulting and the apply merge and answers
//! with what it would store, and stores nothing.

use kube::Client;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::Value;

use super::{api, field_manager};
use crate::validate::Child;

/// What the API server answered to a dry run.
#[derive(Debug)]
pub enum Dry {
    /// It would store this object.
    Stored(Value),
    /// An object someone else made holds the name (a create only).
    Held(Box<DynamicObject>),
    /// Another Capstan plugin manages a field the status sets (the server's message).
    Conflict(String),
    /// The credentials may not make this write (dry runs are authorized as writes).
    Forbidden,
}

/// The child as an apply by `plugin` would store it: over the object observed with
/// `uid`, or created where `uid` is `None`.
pub async fn child(
    client: &Client,
    ar: &ApiResource,
    child: &Child,
    uid: Option<&str>,
    plugin: &str,
) -> kube::Result<Dry> {
    let api = api(client, ar, child.namespace.as_deref());
    let stored = match uid {
        Some(uid) => {
            let mut body = child.object.clone();
            body["metadata"]["uid"] = uid.into();
            let mut params = PatchParams::apply(&field_manager(plugin)).force();
            params.dry_run = true;
            let stored = api.patch(&child.name, &params, &Patch::Apply(&body)).await;
            stored.map(|stored| {
                let stored = serde_json::to_value(stored).unwrap_or_default();
                super::ownership::as_after_hand_over(stored, &field_manager(plugin))
            })
        }
        None => {
            let object: DynamicObject =
                serde_json::from_value(child.object.clone()).map_err(kube::Error::SerdeError)?;
            let params = PostParams {
                dry_run: true,
                field_manager: Some(field_manager(plugin)),
            };
            let stored = api.create(&params, &object).await;
            stored.map(|stored| serde_json::to_value(stored).unwrap_or_default())
        }
    };
    match stored {
        Ok(stored) => Ok(Dry::Stored(stored)),
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(Dry::Forbidden),
        Err(kube::Error::Api(e)) if e.code == 409 && uid.is_none() => match api.get_opt(&child.name).await? {
            Some(held) => Ok(Dry::Held(Box::new(held))),
            None => Err(kube::Error::Api(e)),
        },
        Err(e) => Err(e),
    }
}
