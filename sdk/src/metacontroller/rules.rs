//! A `customize` hook's related-resource rules: as Capstan's related queries, and which of
//! the objects the host read for them the sync hook is shown.
//!
//! A rule with a `namespaceSelector` becomes two queries — the Namespaces it selects, and
//! its kind in every namespace the parent may read — and the hook is shown the rule's
//! objects in a selected namespace alone. The host thus applies the operator's grants
//! first, and a Namespace relabelled into or out of the selection reconciles the parent
//! (it is an object the parent reads).

use capstan_contract::{ANY_NAMESPACE, RelatedQuery, Selector};
use serde_json::{Value, json};

use super::{Controller, Version, label_selector, selects};
use crate::{KindRef, ReconcileError};

impl Controller {
    /// The related objects `parent` needs: the customize hook's rules as queries.
    pub fn related(&self, parent: &Value) -> Result<Vec<RelatedQuery>, ReconcileError> {
        if self.customize.is_none() || !self.selected(parent)? {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for rule in self.rules(parent)? {
            out.extend(self.queries(&rule, parent)?);
        }
        Ok(out)
    }

    /// The customize hook's `relatedResources` for `parent` (none without the hook).
    fn rules(&self, parent: &Value) -> Result<Vec<Value>, ReconcileError> {
        let Some(customize) = &self.customize else {
            return Ok(Vec::new());
        };
        let answer = customize(json!({"controller": self.controller, self.parent_field(): parent}))?;
        Ok(answer["relatedResources"].as_array().cloned().unwrap_or_default())
    }

    /// The declared related kind a rule names.
    fn kind_of(&self, rule: &Value) -> Result<&KindRef, ReconcileError> {
        let (api_version, resource) = (
            rule["apiVersion"].as_str().unwrap_or_default(),
            rule["resource"].as_str().unwrap_or_default(),
        );
        (self.metadata.related_kinds().iter())
            .find(|k| k.api_version() == api_version && k.plural == resource)
            .ok_or_else(|| {
                ReconcileError::fatal(format!(
                    "customize: {resource} ({api_version}) is not declared related"
                ))
            })
    }

    /// A rule's queries: one, or two for a `namespaceSelector`.
    fn queries(&self, rule: &Value, parent: &Value) -> Result<Vec<RelatedQuery>, ReconcileError> {
        let kind = self.kind_of(rule)?;
        let query = |kind: &KindRef, namespace: Option<String>, selector| RelatedQuery {
            group: kind.group.clone(),
            kind: kind.kind.clone(),
            namespace,
            selector,
        };
        if rule["namespaceSelector"].is_null() {
            let names: Vec<String> = (rule["names"].as_array().into_iter().flatten())
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect();
            let selector = match names.is_empty() {
                true => Selector::Labels(label_selector(&rule["labelSelector"])?),
                false => Selector::Names(names),
            };
            let namespace = rule["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_string);
            return Ok(vec![query(
                kind,
                namespace.or(self.every_namespace(parent)),
                selector,
            )]);
        }
        let namespaces = self.namespace_selector_kinds(rule, kind, parent)?;
        Ok(vec![
            query(
                namespaces,
                None,
                Selector::Labels(label_selector(&rule["namespaceSelector"])?),
            ),
            query(
                kind,
                Some(ANY_NAMESPACE.to_string()),
                Selector::Labels(label_selector(&rule["labelSelector"])?),
            ),
        ])
    }

    /// Metacontroller's rules for a `namespaceSelector`, with its reasons; the declared
    /// Namespace kind the selection is read through.
    fn namespace_selector_kinds(
        &self,
        rule: &Value,
        kind: &KindRef,
        parent: &Value,
    ) -> Result<&KindRef, ReconcileError> {
        let refuse = |why: &str| {
            ReconcileError::fatal(format!(
                "customize: {} ({}): {why}",
                rule["resource"].as_str().unwrap_or_default(),
                rule["apiVersion"].as_str().unwrap_or_default()
            ))
        };
        if rule["names"].as_array().is_some_and(|n| !n.is_empty()) {
            return Err(refuse("a rule cannot have both names and a namespaceSelector"));
        }
        if rule["namespace"].as_str().is_some_and(|n| !n.is_empty()) {
            return Err(refuse(
                "a rule cannot have both a namespace and a namespaceSelector",
            ));
        }
        if self.every_namespace(parent).is_none() {
            return Err(refuse(
                "a namespaceSelector cannot be used by a namespaced parent in a v1 hook",
            ));
        }
        if !kind.namespaced {
            return Err(refuse("a namespaceSelector is only for namespaced resources"));
        }
        (self.metadata.related_kinds().iter())
            .find(|k| is_namespace_kind(k))
            .ok_or_else(|| {
                refuse("a namespaceSelector reads the Namespaces it selects; declare v1 namespaces related")
            })
    }

    /// Where a rule naming no namespace reads: a v1 hook's namespaced parent its own
    /// (none: the default); otherwise, as Metacontroller, every namespace (`*`: every one
    /// the operator lets the parent read).
    fn every_namespace(&self, parent: &Value) -> Option<String> {
        let own = self.version == Version::V1 && parent["metadata"]["namespace"].as_str().is_some();
        (!own).then(|| ANY_NAMESPACE.to_string())
    }

    /// The related objects the hook is shown. Under a `namespaceSelector` rule the host
    /// read the rule's kind in every namespace and the Namespaces the selector picks: the
    /// hook sees the rule's objects in a picked namespace, and a Namespace only where a
    /// rule asks for it (the rules are asked again, only when a Namespace was read).
    pub(super) fn shown(&self, parent: &Value, related: Vec<Value>) -> Result<Vec<Value>, ReconcileError> {
        if !related.iter().any(is_namespace) {
            return Ok(related);
        }
        let rules = self.rules(parent)?;
        if rules.iter().all(|r| r["namespaceSelector"].is_null()) {
            return Ok(related);
        }
        let namespaces: Vec<Value> = related.iter().filter(|o| is_namespace(o)).cloned().collect();
        let mut shown = Vec::with_capacity(related.len());
        for object in related {
            let mut selected = false;
            for rule in &rules {
                selected = selected || self.selects_related(rule, &object, &namespaces, parent)?;
            }
            if selected {
                shown.push(object);
            }
        }
        Ok(shown)
    }

    /// Whether `rule` selects related `object`, as Metacontroller matches one.
    fn selects_related(
        &self,
        rule: &Value,
        object: &Value,
        namespaces: &[Value],
        parent: &Value,
    ) -> Result<bool, ReconcileError> {
        let kind = self.kind_of(rule)?;
        if !kind.matches(object) {
            return Ok(false);
        }
        let meta = &object["metadata"];
        if !rule["namespaceSelector"].is_null() {
            let ns = namespaces
                .iter()
                .find(|n| n["metadata"]["name"] == meta["namespace"]);
            return Ok(match ns {
                Some(ns) => {
                    selects(&rule["namespaceSelector"], &ns["metadata"]["labels"])?
                        && selects(&rule["labelSelector"], &meta["labels"])?
                }
                None => false,
            });
        }
        let names = rule["names"].as_array().filter(|n| !n.is_empty());
        let picked = match names {
            Some(names) => names.contains(&meta["name"]),
            None => selects(&rule["labelSelector"], &meta["labels"])?,
        };
        let rule_namespace = rule["namespace"].as_str().filter(|n| !n.is_empty());
        let read = rule_namespace
            .map(str::to_string)
            .or(self.every_namespace(parent));
        let placed = match read.as_deref() {
            _ if !kind.namespaced => true,
            Some(ANY_NAMESPACE) => true,
            Some(ns) => meta["namespace"] == ns,
            None => meta["namespace"] == parent["metadata"]["namespace"],
        };
        Ok(picked && placed)
    }
}

fn is_namespace_kind(kind: &KindRef) -> bool {
    kind.group.is_empty() && kind.kind == "Namespace"
}

fn is_namespace(object: &Value) -> bool {
    object["apiVersion"] == "v1" && object["kind"] == "Namespace"
}
