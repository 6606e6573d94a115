//! What a hostile plugin costs: a `capstan run` process serving Echo beside hostile
//! plugins on the real plane, measured from the outside (the process's CPU time and RSS
//! from `/proc`, API writes from its metrics, events from the API server, log bytes from
//! its log file), for the hostile suite (`tests/offline/hostile.rs`) and the combined benchmark
//! (`benches/hostile.rs`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use capstan::dev::Plane;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use crate::host::{
    Host, echo, echo_resource, eventually, hostile_crd, hostile_resource, install_plugin_crd, mount, sample,
};

/// The grace period a pod gets by default; the host must exit on SIGTERM within it.
pub const GRACE: Duration = Duration::from_secs(30);

/// CPU time and memory of a process, from `/proc`.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// User + system CPU seconds so far.
    pub cpu_seconds: f64,
    /// Resident set now, MiB.
    pub rss_mib: f64,
    /// Highest resident set so far (VmHWM), MiB.
    pub peak_rss_mib: f64,
}

/// Read `pid`'s CPU time and memory.
pub fn usage(pid: u32) -> Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("/proc/pid/stat")?
        .1
        .split_whitespace()
        .collect();
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu_seconds = (fields[11].parse::<f64>()? + fields[12].parse::<f64>()?) / ticks;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> Result<f64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(key))
            .with_context(|| format!("{key} in /proc/{pid}/status"))?;
        Ok(line.split_whitespace().nth(1).unwrap_or("0").parse::<f64>()?)
    };
    Ok(Usage {
        cpu_seconds,
        rss_mib: kib("VmRSS:")? / 1024.0,
        peak_rss_mib: kib("VmHWM:")? / 1024.0,
    })
}

/// What a case may cost the host.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Peak RSS of the host, MiB.
    pub rss_mib: f64,
    /// The host's own CPU over the window, in cores: all of it but the plugin's calls as
    /// charged to its share (Echo, watches, writes, and the plugin's logs, events and
    /// faults as the host handles them).
    pub host_cores: f64,
    /// The plugin's CPU share (`limits.cpuMillicores` / 1000): its calls over the window
    /// may use that and [`CREDIT`] more.
    pub share_cores: f64,
    /// API writes per second made on the hostile plugin's behalf over the window.
    pub writes_per_s: f64,
}

/// Seconds of its share a plugin busy since before the window may use beyond the window's
/// length: one second's credit left at its start, and calls in flight as it opens (they
/// may start only while they fit one second's credit, and are charged when they end).
pub const CREDIT: f64 = 2.0;

impl Default for Budget {
    fn default() -> Self {
        Budget {
            rss_mib: 256.0,
            host_cores: 0.25,
            share_cores: 1.0,
            writes_per_s: 2.0,
        }
    }
}

/// What a case cost, measured over a window once Echo had converged.
#[derive(Clone, Debug)]
pub struct Report {
    /// The case.
    pub case: String,
    /// Average CPU of the host over the window, in cores.
    pub cpu_cores: f64,
    /// Of it, the plugin's calls as charged to its CPU share (`capstan_wasm_cpu_seconds_total`).
    pub plugin_cpu_cores: f64,
    /// Seconds the window lasted.
    pub window_s: f64,
    /// Peak RSS of the host over its life, MiB.
    pub peak_rss_mib: f64,
    /// RSS at the end of the window, MiB.
    pub rss_mib: f64,
    /// API writes per second made for the plugin over the window.
    pub writes_per_s: f64,
    /// Events the plugin's controller recorded in the namespace (series counted in full).
    pub events: u64,
    /// Bytes of host log so far.
    pub log_bytes: u64,
    /// How long SIGTERM took to end the host.
    pub sigterm: Option<Duration>,
}

impl Report {
    /// Print the report beside `budget` and fail if any of it is over.
    pub fn check(&self, budget: &Budget) -> Result<()> {
        let own = self.cpu_cores - self.plugin_cpu_cores;
        let share = budget.share_cores * (1.0 + CREDIT / self.window_s);
        println!(
            "hostile {}: host peak RSS {:.0} MiB (budget {:.0}), CPU {:.2} cores: the plugin's calls {:.2} \
             (share {:.2}), the host's own {:.2} (budget {:.2}); {:.2} API writes/s for the plugin \
             (budget {:.1}), {} events, {} KiB of log, SIGTERM {:?}",
            self.case,
            self.peak_rss_mib,
            budget.rss_mib,
            self.cpu_cores,
            self.plugin_cpu_cores,
            share,
            own,
            budget.host_cores,
            self.writes_per_s,
            budget.writes_per_s,
            self.events,
            self.log_bytes / 1024,
            self.sigterm.unwrap_or_default(),
        );
        let case = &self.case;
        ensure!(
            self.peak_rss_mib <= budget.rss_mib,
            "{case}: peak RSS {:.0} MiB over {:.0}",
            self.peak_rss_mib,
            budget.rss_mib
        );
        ensure!(
            self.plugin_cpu_cores <= share,
            "{case}: the plugin's calls used {:.2} cores, over its share ({share:.2})",
            self.plugin_cpu_cores
        );
        ensure!(
            own <= budget.host_cores,
            "{case}: the host's own CPU {own:.2} cores over {:.2}",
            budget.host_cores
        );
        ensure!(
            self.writes_per_s <= budget.writes_per_s,
            "{case}: {:.2} writes/s over {:.1}",
            self.writes_per_s,
            budget.writes_per_s
        );
        Ok(())
    }
}

/// One host serving Echo and the plugins under test in a namespace of its own.
pub struct Case {
    /// The case's name.
    pub name: String,
    /// The shared plane.
    pub plane: &'static Plane,
    /// The case's namespace.
    pub ns: String,
    /// Where its plugins, config and log live.
    pub dir: PathBuf,
    /// The host under measurement.
    pub host: Host,
    /// Hosts started before it (killed when the case ends).
    pub others: Vec<Host>,
    /// A client of the plane.
    pub client: kube::Client,
    /// The Echos Echo must keep converged.
    pub echo_names: Vec<String>,
}

impl Case {
    /// Start a host with Echo plus `plugins`, configured by `entries` (YAML list items of
    /// `--config`, after Echo's own) and `extra` arguments, and create `echoes` Echos.
    pub async fn start(
        name: &str,
        plugins: &[&str],
        entries: &str,
        extra: &[&str],
        echoes: usize,
    ) -> Result<Case> {
        let plane = Plane::shared().await?;
        install_plugin_crd(plane, "echo").await?;
        plane.install_crds(&[hostile_crd()?]).await?;
        let ns = plane.namespace(name).await?;
        let dir = std::env::temp_dir().join(format!("capstan-hostile-{ns}"));
        let mut all = vec!["echo"];
        all.extend_from_slice(plugins);
        mount(&all, &dir)?;
        let config = dir.join("capstan.yaml");
        std::fs::write(&config, format!("plugins:\n- path: echo.wasm\n{entries}"))?;
        let mut args = vec![
            "--config",
            config.to_str().context("utf-8 path")?,
            "--namespace",
            &ns,
        ];
        args.extend_from_slice(extra);
        let host = Host::start(plane, &args, &dir.join("host.log"), &[])?;
        let client = plane.client().await?;
        let case = Case {
            name: name.to_string(),
            plane,
            ns,
            dir,
            host,
            others: Vec::new(),
            client,
            echo_names: (0..echoes).map(|i| format!("e{i}")).collect(),
        };
        for name in &case.echo_names {
            case.echoes()
                .create(
                    &PostParams::default(),
                    &echo(name, &format!("hello from {name}"))?,
                )
                .await?;
        }
        Ok(case)
    }

    /// Start a second host in the namespace with `plugins` configured by `entries` (the
    /// `--config` list), and measure that one from now on.
    pub fn add_host(&mut self, plugins: &[&str], entries: &str) -> Result<()> {
        mount(plugins, &self.dir)?;
        let config = self.dir.join("second.yaml");
        std::fs::write(&config, format!("plugins:\n{entries}"))?;
        let args = [
            "--config",
            config.to_str().context("utf-8 path")?,
            "--namespace",
            &self.ns,
        ];
        let host = Host::start(self.plane, &args, &self.dir.join("second.log"), &[])?;
        self.others.push(std::mem::replace(&mut self.host, host));
        Ok(())
    }

    /// The Echo API of the case's namespace.
    pub fn echoes(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &echo_resource())
    }

    /// The Hostile API of the case's namespace.
    pub fn hostiles(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &hostile_resource())
    }

    /// Create Hostile objects `name-0..n` in `mode` with extra spec fields.
    pub async fn hostile(&self, name: &str, n: usize, mode: &str, spec: Value) -> Result<()> {
        for i in 0..n {
            let mut spec = spec.clone();
            spec["mode"] = mode.into();
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
                "metadata": {"name": format!("{name}-{i}")}, "spec": spec,
            }))?;
            self.hostiles().create(&PostParams::default(), &object).await?;
        }
        Ok(())
    }

    /// The statuses of the case's Echos once every one has a Job and is Succeeded.
    pub async fn converged(&self, timeout: Duration) -> Result<Vec<Value>> {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.ns);
        eventually("every Echo Succeeded with its Job", timeout, async || {
            let statuses = self.echo_statuses().await?;
            let done = statuses.iter().all(|s| s["phase"] == "Succeeded");
            let job_count = jobs.list(&ListParams::default()).await?.items.len();
            Ok((done && job_count >= self.echo_names.len()).then_some(statuses))
        })
        .await
    }

    async fn echo_statuses(&self) -> Result<Vec<Value>> {
        let mut statuses = Vec::new();
        for name in &self.echo_names {
            statuses.push(self.echoes().get(name).await?.data["status"].clone());
        }
        Ok(statuses)
    }

    /// A metrics sample of the host (0 when absent), once its metrics are served.
    pub async fn metric(&self, series: &str) -> Result<f64> {
        Ok(sample(&self.host.metrics().await?, series))
    }

    /// Measure the host over `window` while Echo stays converged: its statuses are
    /// Succeeded at the start and unchanged at the end.
    pub async fn measure(&self, plugin: &str, window: Duration) -> Result<Report> {
        let before = self.converged(Duration::from_secs(180)).await?;
        let writes = format!("capstan_api_writes_total{{plugin=\"{plugin}\"}}");
        let charged = format!("capstan_wasm_cpu_seconds_total{{plugin=\"{plugin}\"}}");
        let (written, spent, used, start) = (
            self.metric(&writes).await?,
            self.metric(&charged).await?,
            usage(self.host.pid())?,
            Instant::now(),
        );
        tokio::time::sleep(window).await;
        let (written_after, spent_after, used_after) = (
            self.metric(&writes).await?,
            self.metric(&charged).await?,
            usage(self.host.pid())?,
        );
        let elapsed = start.elapsed().as_secs_f64();
        let after = self.echo_statuses().await?;
        ensure!(
            before == after,
            "{}: Echo statuses changed while measured:\n{before:?}\n{after:?}",
            self.name
        );
        Ok(Report {
            case: self.name.clone(),
            cpu_cores: (used_after.cpu_seconds - used.cpu_seconds) / elapsed,
            plugin_cpu_cores: (spent_after - spent) / elapsed,
            window_s: elapsed,
            peak_rss_mib: used_after.peak_rss_mib,
            rss_mib: used_after.rss_mib,
            writes_per_s: (written_after - written) / elapsed,
            events: self.events(plugin).await?,
            log_bytes: self.host.log_bytes(),
            sigterm: None,
        })
    }

    /// Events recorded by `plugin`'s controller in the namespace, series counted in full.
    pub async fn events(&self, plugin: &str) -> Result<u64> {
        let controller = format!("capstan-{plugin}");
        self.count_events(|e| e.reporting_controller.as_deref() == Some(controller.as_str()))
            .await
    }

    /// Events in the namespace that `keep`, series counted in full.
    pub async fn count_events(&self, keep: impl Fn(&Event) -> bool) -> Result<u64> {
        Ok(self
            .events_where(keep)
            .await?
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u64))
            .sum())
    }

    /// Events of `reason` on the object `name`.
    pub async fn events_of(&self, name: &str, reason: &str) -> Result<Vec<Event>> {
        self.events_where(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .await
    }

    /// The events in the namespace that `keep`.
    pub async fn events_where(&self, keep: impl Fn(&Event) -> bool) -> Result<Vec<Event>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let mut list = events.list(&ListParams::default()).await?.items;
        list.retain(|e| keep(e));
        Ok(list)
    }

    /// SIGTERM the host: it must exit 0 within [`GRACE`]. Then check `report` against
    /// `budget` and clean up.
    pub fn stop(mut self, mut report: Report, budget: &Budget) -> Result<Report> {
        let start = Instant::now();
        self.host.signal(libc::SIGTERM);
        let status = self.host.wait(GRACE)?;
        report.sigterm = Some(start.elapsed());
        if status.code() != Some(0) {
            bail!("{}: SIGTERM ended the host with {status}", self.name);
        }
        report.check(budget)?;
        std::fs::remove_dir_all(&self.dir).ok();
        Ok(report)
    }
}
