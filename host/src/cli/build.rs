//! `capstan build`: build the plugin project here (or each member of the workspace here),
//! whatever its language, as its capstan.toml says.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// Arguments of `capstan build`.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The project's directory (or any under it) [default: the working directory].
    #[arg(default_value = ".")]
    dir: PathBuf,
}

pub fn run(args: BuildArgs) -> anyhow::Result<ExitCode> {
    for project in crate::project::Project::find_all(&args.dir)? {
        let output = project.build()?;
        let size = std::fs::metadata(&output)?.len();
        println!("built {} ({} KB)", output.display(), size / 1000);
    }
    Ok(ExitCode::SUCCESS)
}
