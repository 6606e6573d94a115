//! The Wasm OCI artifact of CNCF TAG Runtime: an OCI image manifest whose config is
//! `application/vnd.wasm.config.v0+json` and whose one layer is the component
//! (`application/wasm`), as `oci-wasm` writes it and wkg, wasmtime and Kubewarden read it.
//! The types are here rather than from `oci-wasm`: its 0.6 pins oci-client 0.17 and
//! wasm-tools 0.253, while sigstore needs oci-client 0.18 and wasmtime uses wasm-tools 0.254.

use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use serde::Serialize;

/// The manifest's media type.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config's media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The one layer's media type: the component itself.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// The artifact's config (TAG Runtime's `application/vnd.wasm.config.v0+json`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WasmConfig {
    created: String,
    architecture: &'static str,
    os: &'static str,
    layer_digests: Vec<String>,
    component: Component,
}

/// What the component imports and exports, by interface name.
#[derive(Serialize)]
struct Component {
    exports: Vec<String>,
    imports: Vec<String>,
}

impl Component {
    /// The top-level imports and exports of the component `wasm`.
    fn of(wasm: &[u8]) -> anyhow::Result<Component> {
        use wasmparser::{Parser, Payload};
        let mut component = Component {
            exports: Vec::new(),
            imports: Vec::new(),
        };
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::Version { encoding, .. } => {
                    anyhow::ensure!(
                        depth > 0 || encoding == wasmparser::Encoding::Component,
                        "a core module, not a component"
                    );
                    depth += 1;
                }
                Payload::End(_) => depth -= 1,
                Payload::ComponentImportSection(imports) if depth == 1 => {
                    for import in imports {
                        component.imports.push(import?.name.name.to_string());
                    }
                }
                Payload::ComponentExportSection(exports) if depth == 1 => {
                    for export in exports {
                        component.exports.push(export?.name.name.to_string());
                    }
                }
                _ => {}
            }
        }
        Ok(component)
    }
}

/// The config and the layer that carry the component `wasm`.
pub fn pack(wasm: Vec<u8>) -> anyhow::Result<(Config, ImageLayer)> {
    let component = Component::of(&wasm).map_err(|e| anyhow::anyhow!("not a WebAssembly component: {e}"))?;
    let config = WasmConfig {
        created: jiff::Timestamp::now().to_string(),
        architecture: "wasm",
        os: "wasip2",
        layer_digests: vec![super::sha256(&wasm)],
        component,
    };
    let config = Config::new(serde_json::to_vec(&config)?, CONFIG_MEDIA_TYPE.to_string(), None);
    let layer = ImageLayer::new(wasm, LAYER_MEDIA_TYPE.to_string(), None);
    Ok((config, layer))
}

/// The manifest of `layers` and `config`, typed as an OCI image manifest.
pub fn manifest(layers: &[ImageLayer], config: &Config) -> OciImageManifest {
    let mut manifest = OciImageManifest::build(layers, config, None);
    manifest.media_type = Some(MANIFEST_MEDIA_TYPE.to_string());
    manifest
}

/// Refuse a manifest that is not a Wasm artifact: its type, its config's, one layer.
pub fn check(manifest: &OciImageManifest) -> anyhow::Result<()> {
    anyhow::ensure!(
        manifest.config.media_type == CONFIG_MEDIA_TYPE,
        "not a Wasm artifact: its config is {}, not {CONFIG_MEDIA_TYPE}",
        manifest.config.media_type
    );
    anyhow::ensure!(
        manifest.layers.len() == 1,
        "not a Wasm artifact: {} layers, not one",
        manifest.layers.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_is_packed_with_its_interfaces_and_a_module_is_refused() {
        let component = wat::parse_str(
            r#"(component
                 (import "wasi:clocks/wall-clock@0.2.0" (instance))
                 (core module $m)
                 (export "capstan:reconciler/plugin@0.2.0" (core module $m)))"#,
        )
        .unwrap();
        let (config, layer) = pack(component.clone()).unwrap();
        assert_eq!(layer.media_type, LAYER_MEDIA_TYPE);
        let json: serde_json::Value = serde_json::from_slice(&config.data).unwrap();
        assert_eq!(json["component"]["imports"][0], "wasi:clocks/wall-clock@0.2.0");
        assert_eq!(json["component"]["exports"][0], "capstan:reconciler/plugin@0.2.0");
        assert_eq!(json["layerDigests"][0], crate::sha256(&component));
        let module = wat::parse_str("(module)").unwrap();
        let refused = pack(module).err().expect("a core module is refused");
        assert!(refused.to_string().contains("core module"), "{refused}");
    }
}
