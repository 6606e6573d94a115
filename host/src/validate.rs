//! The host never trusts a plugin: every response is checked against what the plugin
//! declared before a single write. The rules live in `capstan-contract`, shared by
//! `capstan run`, `capstan test` and the SDK's `testing::Fixture`, so offline and online
//! checks cannot disagree.

pub use capstan_contract::{
    ANY_NAMESPACE, Allowances, Child, Refusal, Rest, dns1123_label, namespace_grant, parent_namespace,
    response,
};
