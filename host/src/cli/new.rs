//! `capstan new`: a plugin project, outside any checkout, that builds with `capstan
//! build` and passes its own tests (native unit tests and `capstan test`) as made.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::project::Language;

/// Arguments of `capstan new`.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// The plugin's name: a DNS label such as `greeter` (its kind is `Greeter`).
    name: String,
    /// The language to write it in.
    #[arg(long, value_enum)]
    lang: Language,
    /// Where to make it [default: ./NAME]; must not exist or be empty.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Use the SDK of this Capstan checkout instead of the published one (nothing is
    /// published yet): the one override of the SDK's source, for every language.
    #[arg(long, env = "CAPSTAN_SDK", value_name = "CHECKOUT")]
    sdk: Option<PathBuf>,
}

/// One file of a template: its path (with placeholders) and text.
type File = (&'static str, &'static str);

const RUST: &[File] = &[
    ("capstan.toml", include_str!("new/rust/capstan.toml")),
    ("Cargo.toml", include_str!("new/rust/Cargo.toml")),
    ("README.md", include_str!("new/rust/README.md")),
    (".gitignore", include_str!("new/rust/.gitignore")),
    ("src/lib.rs", include_str!("new/rust/src/lib.rs")),
    ("tests/reconcile.rs", include_str!("new/rust/tests/reconcile.rs")),
    ("tests/crd.rs", include_str!("new/rust/tests/crd.rs")),
    ("crd.yaml", include_str!("new/rust/crd.yaml")),
    (
        "fixtures/{{name}}.yaml",
        include_str!("new/rust/fixtures/{{name}}.yaml"),
    ),
    ("golden/new.yaml", include_str!("new/rust/golden/new.yaml")),
];

pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    crate::validate::dns1123_label(&args.name).map_err(|e| anyhow::anyhow!("plugin name {e}"))?;
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    let empty = std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_none());
    anyhow::ensure!(empty, "{} exists and is not empty", dir.display());
    let names = Names::of(&args.name, sdk_source(args.lang, args.sdk.as_deref())?);
    let files = match args.lang {
        Language::Rust => RUST,
        Language::Python | Language::Js => anyhow::bail!("--lang {:?} is not scaffolded yet", args.lang),
    };
    for (path, text) in files {
        let path = dir.join(names.fill(path));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, names.fill(text))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("made {} ({:?} plugin {})", dir.display(), args.lang, args.name);
    Ok(ExitCode::SUCCESS)
}

/// How a project depends on the SDK: by version, or on a checkout's copy.
fn sdk_source(lang: Language, checkout: Option<&Path>) -> anyhow::Result<(String, String)> {
    let version = env!("CARGO_PKG_VERSION");
    let Some(checkout) = checkout else {
        return Ok(match lang {
            Language::Rust => (
                format!("capstan-sdk = \"{version}\""),
                format!("capstan-sdk = {{ version = \"{version}\", features = [\"testing\"] }}"),
            ),
            Language::Python | Language::Js => (version.to_string(), version.to_string()),
        });
    };
    let checkout = std::path::absolute(checkout)?;
    anyhow::ensure!(
        checkout.join("sdk/Cargo.toml").is_file(),
        "{} is not a Capstan checkout (no sdk/Cargo.toml)",
        checkout.display()
    );
    let sdk = checkout.join("sdk");
    let sdk = sdk.to_str().context("the checkout's path is not UTF-8")?;
    Ok(match lang {
        Language::Rust => (
            format!("capstan-sdk = {{ version = \"{version}\", path = {sdk:?} }}"),
            format!("capstan-sdk = {{ version = \"{version}\", path = {sdk:?}, features = [\"testing\"] }}"),
        ),
        Language::Python | Language::Js => (sdk.to_string(), sdk.to_string()),
    })
}

/// The placeholders of a template and their values.
struct Names {
    pairs: Vec<(&'static str, String)>,
}

impl Names {
    fn of(name: &str, (sdk, sdk_testing): (String, String)) -> Names {
        let kind: String = name
            .split('-')
            .map(|word| {
                let mut chars = word.chars();
                chars.next().map_or_else(String::new, |c| {
                    c.to_ascii_uppercase().to_string() + chars.as_str()
                })
            })
            .collect();
        Names {
            pairs: vec![
                ("{{name}}", name.to_string()),
                ("{{crate}}", name.replace('-', "_")),
                ("{{plural}}", format!("{}s", kind.to_ascii_lowercase())),
                ("{{kind}}", kind.to_ascii_lowercase()),
                ("{{Kind}}", kind),
                ("{{sdk}}", sdk),
                ("{{sdk-testing}}", sdk_testing),
            ],
        }
    }

    fn fill(&self, text: &str) -> String {
        self.pairs
            .iter()
            .fold(text.to_string(), |text, (key, value)| text.replace(key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_make_a_kind_a_crate_and_a_plural() {
        let names = Names::of("ping-pong", ("s".into(), "t".into()));
        assert_eq!(
            names.fill("{{name}} {{crate}} {{Kind}} {{kind}} {{plural}} {{sdk}}"),
            "ping-pong ping_pong PingPong pingpong pingpongs s"
        );
    }
}
