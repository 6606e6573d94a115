//! What `capstan dev up/down` does, runnable without the CLI:
//! `cargo run -p capstan-testenv --example dev -- up|down|status [dir]`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use capstan_testenv::{Plane, default_dev_dir};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_else(|| "status".into());
    let dir = args.next().map(PathBuf::from).unwrap_or_else(default_dev_dir);
    match cmd.as_str() {
        "up" => {
            let kubeconfig = Plane::start_detached(&dir).await?;
            println!("export KUBECONFIG={}", kubeconfig.display());
        }
        "down" => {
            let stopped = Plane::stop_detached(&dir)?;
            println!("{}", if stopped { "stopped" } else { "not running" });
        }
        "status" => match Plane::detached_state(&dir)? {
            Some(state) => println!("{}", serde_json::to_string_pretty(&state)?),
            None => println!("not running ({} has no plane.json)", dir.display()),
        },
        other => bail!("unknown command '{other}' (up|down|status)"),
    }
    Ok(())
}
