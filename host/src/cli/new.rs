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
    /// Use the SDK of this Capstan checkout instead of the one this binary carries
    /// (extracted into `$XDG_CACHE_HOME/capstan/sdk`): the one override of the SDK's
    /// source, for every language.
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

const PYTHON: &[File] = &[
    ("capstan.toml", include_str!("new/python/capstan.toml")),
    ("pyproject.toml", include_str!("new/python/pyproject.toml")),
    ("README.md", include_str!("new/python/README.md")),
    (".gitignore", include_str!("new/python/.gitignore")),
    ("build.sh", PYTHON_BUILD),
    ("app.py", include_str!("new/python/app.py")),
    ("{{crate}}.py", include_str!("new/python/{{crate}}.py")),
    ("conftest.py", include_str!("new/python/conftest.py")),
    (
        "tests/test_{{crate}}.py",
        include_str!("new/python/tests/test_{{crate}}.py"),
    ),
    ("crd.yaml", include_str!("new/python/crd.yaml")),
    (
        "fixtures/{{name}}.yaml",
        include_str!("new/python/fixtures/{{name}}.yaml"),
    ),
    ("golden/new.yaml", include_str!("new/python/golden/new.yaml")),
];

/// The Python template's build script (`{{name}}` and `{{sdk-path}}` to fill), which
/// `capstan import` writes too.
pub(super) const PYTHON_BUILD: &str = include_str!("new/python/build.sh");

const JS: &[File] = &[
    ("capstan.toml", include_str!("new/js/capstan.toml")),
    ("package.json", include_str!("new/js/package.json")),
    ("README.md", include_str!("new/js/README.md")),
    (".gitignore", include_str!("new/js/.gitignore")),
    ("build.sh", include_str!("new/js/build.sh")),
    ("rolldown.config.mjs", include_str!("new/js/rolldown.config.mjs")),
    ("src/component.js", include_str!("new/js/src/component.js")),
    ("src/{{name}}.js", include_str!("new/js/src/{{name}}.js")),
    (
        "test/{{name}}.test.js",
        include_str!("new/js/test/{{name}}.test.js"),
    ),
    ("crd.yaml", include_str!("new/js/crd.yaml")),
    (
        "fixtures/{{name}}.yaml",
        include_str!("new/js/fixtures/{{name}}.yaml"),
    ),
    ("golden/new.yaml", include_str!("new/js/golden/new.yaml")),
];

pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    crate::validate::dns1123_label(&args.name).map_err(|e| anyhow::anyhow!("plugin name {e}"))?;
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    let empty = std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_none());
    anyhow::ensure!(empty, "{} exists and is not empty", dir.display());
    let names = Names::of(&args.name, &sdk_source(args.sdk.as_deref())?);
    let files = match args.lang {
        Language::Rust => RUST,
        Language::Python => PYTHON,
        Language::Js => JS,
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

/// Where a project's SDK comes from: a checkout's `sdk` directory, or the bundled one's.
pub(super) struct Sdk {
    version: &'static str,
    /// The `sdk` directory, absolute.
    pub path: String,
}

/// The SDK of `checkout`, or else the one this binary carries, extracted into the cache.
pub(super) fn sdk_source(checkout: Option<&Path>) -> anyhow::Result<Sdk> {
    let root = match checkout {
        Some(checkout) => {
            let checkout = std::path::absolute(checkout)?;
            anyhow::ensure!(
                checkout.join("sdk/Cargo.toml").is_file(),
                "{} is not a Capstan checkout (no sdk/Cargo.toml)",
                checkout.display()
            );
            checkout
        }
        None => {
            let cache = super::user_cache("sdk").context(
                "no cache directory for the SDK: set XDG_CACHE_HOME or HOME, or pass --sdk CHECKOUT",
            )?;
            super::bundle::extracted(&cache)?
        }
    };
    let path = root.join("sdk");
    let path = path.to_str().context("the SDK's path is not UTF-8")?.to_string();
    Ok(Sdk {
        version: env!("CARGO_PKG_VERSION"),
        path,
    })
}

impl Sdk {
    /// The Rust dependency lines: (dependencies, dev-dependencies).
    fn rust(&self) -> (String, String) {
        let (version, path) = (self.version, &self.path);
        (
            format!("capstan-sdk = {{ version = \"{version}\", path = {path:?} }}"),
            format!("capstan-sdk = {{ version = \"{version}\", path = {path:?}, features = [\"testing\"] }}"),
        )
    }

    /// The Python requirement, `extra` (`[testing]`) or none: the package's directory.
    fn python(&self, extra: &str) -> String {
        format!("capstan-sdk{extra} @ file://{}/python", self.path)
    }
}

/// The placeholders of a template and their values.
struct Names {
    pairs: Vec<(&'static str, String)>,
}

impl Names {
    fn of(name: &str, sdk: &Sdk) -> Names {
        let (rust, rust_testing) = sdk.rust();
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
                ("{{sdk}}", rust),
                ("{{sdk-testing}}", rust_testing),
                ("{{sdk-path}}", sdk.path.clone()),
                ("{{py-sdk}}", sdk.python("")),
                ("{{py-sdk-testing}}", sdk.python("[testing]")),
                ("{{js-sdk}}", format!("file:{}/js", sdk.path)),
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
        let sdk = Sdk {
            version: "1.2.3",
            path: "/src/capstan/sdk".into(),
        };
        let names = Names::of("ping-pong", &sdk);
        assert_eq!(
            names.fill("{{name}} {{crate}} {{Kind}} {{kind}} {{plural}} {{js-sdk}} [{{sdk-path}}]"),
            "ping-pong ping_pong PingPong pingpong pingpongs file:/src/capstan/sdk/js [/src/capstan/sdk]"
        );
        assert_eq!(
            names.fill("{{sdk-testing}}"),
            r#"capstan-sdk = { version = "1.2.3", path = "/src/capstan/sdk", features = ["testing"] }"#
        );
        assert_eq!(
            names.fill("{{py-sdk}}; {{py-sdk-testing}}"),
            "capstan-sdk @ file:///src/capstan/sdk/python; capstan-sdk[testing] @ file:///src/capstan/sdk/python"
        );
    }
}
