//! Leaving the packet filter as the node found it. kubelet, kube-proxy and the node's own
//! rule add chains to several tables, IPv4 and IPv6; rather than know each one, the node
//! records which chains existed before it started and removes every chain added since,
//! with every rule that jumps to one, in one `iptables-restore` per table.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::node::network::output;
use crate::node::preflight::Tools;

/// The chains of every table of one family, before the node started.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    /// `iptables-save` and `iptables-restore` for this family.
    pub save: PathBuf,
    pub restore: PathBuf,
    /// Table name → chain names.
    pub chains: BTreeMap<String, BTreeSet<String>>,
}

/// Snapshots of IPv4 and, where its tools exist, IPv6.
pub(crate) fn snapshot(tools: &Tools) -> Result<Vec<Snapshot>> {
    let mut families = vec![(tools.iptables_save.clone(), tools.iptables_restore.clone())];
    if let (Some(save), Some(restore)) = (&tools.ip6tables_save, &tools.ip6tables_restore) {
        families.push((save.clone(), restore.clone()));
    }
    families
        .into_iter()
        .map(|(save, restore)| {
            let dump = output(&mut Command::new(&save))?;
            Ok(Snapshot {
                chains: chains(&dump),
                save,
                restore,
            })
        })
        .collect()
}

impl Snapshot {
    /// Removes the chains added since the snapshot, and the rules that jump to them.
    pub(crate) fn restore(&self) -> Result<()> {
        let dump = output(&mut Command::new(&self.save))?;
        for (table, text) in tables(&dump) {
            let before = self.chains.get(&table).cloned().unwrap_or_default();
            if let Some(cleaned) = without_new_chains(&text, &before) {
                restore_table(&self.restore, &cleaned).with_context(|| format!("restoring table {table}"))?;
            }
        }
        Ok(())
    }
}

/// Table name → chain names, from `iptables-save` output.
fn chains(dump: &str) -> BTreeMap<String, BTreeSet<String>> {
    tables(dump)
        .into_iter()
        .map(|(table, text)| {
            let names = text
                .lines()
                .filter_map(|l| l.strip_prefix(':')?.split_whitespace().next())
                .map(str::to_string)
                .collect();
            (table, names)
        })
        .collect()
}

/// `iptables-save` output split into `(table, "*table ... COMMIT")` blocks.
fn tables(dump: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in dump.lines() {
        if let Some(name) = line.strip_prefix('*') {
            current = Some((name.trim().to_string(), String::new()));
        }
        if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
        if line.trim() == "COMMIT"
            && let Some(block) = current.take()
        {
            out.push(block);
        }
    }
    out
}

/// The table without chains absent from `before`; `None` if there are none.
fn without_new_chains(table: &str, before: &BTreeSet<String>) -> Option<String> {
    let new: BTreeSet<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix(':')?.split_whitespace().next())
        .filter(|c| !before.contains(*c))
        .collect();
    if new.is_empty() {
        return None;
    }
    let kept = table.lines().filter(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let declares = line.starts_with(':') && words.first().is_some_and(|w| new.contains(&w[1..]));
        let in_new = words.first() == Some(&"-A") && words.get(1).is_some_and(|c| new.contains(c));
        let jumps = words
            .windows(2)
            .any(|w| (w[0] == "-j" || w[0] == "-g") && new.contains(w[1]));
        !(declares || in_new || jumps)
    });
    Some(kept.map(|l| format!("{l}\n")).collect())
}

fn restore_table(restore: &Path, text: &str) -> Result<()> {
    let mut child = Command::new(restore)
        .arg("-w")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", restore.display()))?;
    child.stdin.take().context("stdin")?.write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            restore.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 1.2.3.4/32 -j RETURN\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n";

    const AFTER: &str = "# Generated\n*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:CAPSTAN-NODE - [0:0]\n-A PREROUTING -j CAPSTAN-NODE\n-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n-A OUTPUT -d 1.2.3.4/32 -j RETURN\n-A CAPSTAN-NODE -d 10.0.0.1/32 -j DNAT --to-destination 127.0.0.1:6443\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n";

    #[test]
    fn removes_the_chains_added_since_and_the_jumps_to_them_only() {
        let before = chains(BEFORE);
        let after = tables(AFTER);
        assert_eq!(after.len(), 2);
        let nat = without_new_chains(&after[0].1, &before["nat"]).expect("nat changed");
        assert_eq!(
            nat,
            "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 1.2.3.4/32 -j RETURN\nCOMMIT\n"
        );
        assert_eq!(without_new_chains(&after[1].1, &before["filter"]), None);
    }
}
