//! `capstan import metacontroller DIR --out PROJECT`: a Metacontroller controller, laid
//! out as Metacontroller's examples are, as a plugin project whose hooks' sources are
//! unchanged inside. What cannot be imported is refused with one line naming the field.

mod controller;
mod example;
mod hooks;
mod js;
mod jsonnet;
mod kinds;
mod project;
mod python;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

/// Arguments of `capstan import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    #[command(subcommand)]
    from: From,
}

/// Where a controller is imported from.
#[derive(Subcommand, Debug)]
enum From {
    /// A Metacontroller CompositeController or DecoratorController whose hooks are Python
    /// scripts, fission-style JavaScript (nodejs-server) or Jsonnet (jsonnetd) served by a
    /// Deployment of the directory, from a ConfigMap its kustomization generates.
    Metacontroller(MetacontrollerArgs),
}

/// Arguments of `capstan import metacontroller`.
#[derive(Args, Debug)]
struct MetacontrollerArgs {
    /// The directory: the controller's manifest, its kustomization and hook files, CRDs.
    dir: PathBuf,
    /// Where to make the project; must not exist or be empty.
    #[arg(long)]
    out: PathBuf,
    /// Import this controller alone; a directory of several is otherwise imported as a
    /// workspace of one project each.
    #[arg(long)]
    controller: Option<String>,
    /// A kind the customize hook may ask for, as `APIVERSION/RESOURCE` (`v1/configmaps`),
    /// beside those whose plural its source quotes.
    #[arg(long = "related", value_name = "APIVERSION/RESOURCE")]
    related: Vec<String>,
    /// Use the SDK of this Capstan checkout instead of the one this binary carries.
    #[arg(long, env = "CAPSTAN_SDK", value_name = "CHECKOUT")]
    sdk: Option<PathBuf>,
}

pub fn run(args: ImportArgs) -> anyhow::Result<ExitCode> {
    let From::Metacontroller(args) = args.from;
    let empty = std::fs::read_dir(&args.out).map_or(true, |mut d| d.next().is_none());
    anyhow::ensure!(empty, "{} exists and is not empty", args.out.display());
    let example = example::Example::read(&args.dir)?;
    let picked = controller::pick(&example, args.controller.as_deref())?;
    let imported: Vec<_> = (picked.iter())
        .map(|c| controller::import(&example, c, &args.related))
        .collect::<anyhow::Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    for i in &imported {
        crate::validate::dns1123_label(&i.name)
            .map_err(|e| anyhow::anyhow!("controller name {e}: it names the plugin"))?;
    }
    let crds = example.crds()?;
    let sdk = super::new::sdk_source(args.sdk.as_deref())?;
    // Decided for every controller before anything is written.
    let mut projects = Vec::new();
    for i in &imported {
        let files = hook_files(&example, i);
        let mut project = match i.sync.runtime {
            hooks::Runtime::Python => python::files(i, &sdk.path)?,
            hooks::Runtime::Fission => js::files(i, &sdk.path)?,
            hooks::Runtime::Jsonnet => jsonnet::files(i, &files, &sdk.path)?,
        };
        project.extend(project::common(&example, i, &files, &crds)?);
        projects.push((i, files, project));
    }
    let several = projects.len() > 1;
    if several {
        let all: Vec<&controller::Imported> = imported.iter().collect();
        project::write(&args.out, project::workspace(&all, &crds)?)?;
    }
    for (i, files, project) in projects {
        let out = if several {
            args.out.join(&i.name)
        } else {
            args.out.clone()
        };
        project::write(&out, project)?;
        println!(
            "imported {} {} into {} ({} hooks: {})",
            i.kind(),
            i.name,
            out.display(),
            i.sync.runtime.language(),
            files
                .iter()
                .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for difference in &i.differences {
            eprintln!("note: {}: {difference}", i.name);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The files of the ConfigMaps the kustomization generates that hold `imported`'s hooks.
fn hook_files(example: &example::Example, imported: &controller::Imported) -> Vec<PathBuf> {
    let hooks = [
        Some(&imported.sync),
        imported.finalize.as_ref(),
        imported.customize.as_ref(),
    ];
    let mut files: Vec<PathBuf> = Vec::new();
    for hook in hooks.into_iter().flatten() {
        let generated = example.generated.iter().find(|(_, fs)| fs.contains(&hook.script));
        for f in generated.map(|(_, fs)| fs.clone()).unwrap_or_default() {
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    files
}
