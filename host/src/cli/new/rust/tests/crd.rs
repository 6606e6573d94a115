//! crd.yaml is generated from the Rust type; this fails when it is stale.
//! Regenerate it with `CAPSTAN_BLESS=1 cargo test --test crd`.

use kube::CustomResourceExt;

#[test]
fn crd_yaml_matches_the_rust_type() {
    let generated = serde_saphyr::to_string(&{{crate}}::{{Kind}}::crd()).unwrap();
    capstan_sdk::testing::assert_generated(concat!(env!("CARGO_MANIFEST_DIR"), "/crd.yaml"), &generated);
}
