//! `CAPSTAN_BENCH_SERVER=null`: the host's own ceiling. The wasm host runs against the
//! null API server (answers at once, from memory, in this process) with N Echos there
//! before it starts, and the bench prints the time until every Job exists and every status
//! is written, the host's CPU from its start to the last status (per parent, and as
//! parents per second per core of host CPU), its writes per parent and peak RSS. No API
//! server or etcd shares the cores, so the figures are the host's alone, on any machine.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan_tests::host::{mount, sample};

use super::null_server::{NullServer, write_latency};
use super::{Kinds, concurrency, cores, cpu_seconds, host_command, peak_rss_mib, plugin_dir, stop};

/// Every size in turn, one host each.
pub async fn run(sizes: &[usize]) -> Result<()> {
    println!(
        "Echos there before the host starts; the null API server on loopback (no API server, no etcd), writes answered after {} ms; host concurrency {}; {} cores",
        write_latency().as_millis(),
        concurrency(),
        cores()
    );
    println!(
        "{:>6} {:>9} {:>9} {:>10} {:>10} {:>13} {:>13} {:>9} {:>9}",
        "N",
        "jobs (s)",
        "status(s)",
        "CPU (s)",
        "ms/parent",
        "parents/s/core",
        "parents/s",
        "writes/E",
        "RSS (MiB)"
    );
    for &n in sizes {
        one(n).await?;
    }
    Ok(())
}

async fn one(n: usize) -> Result<()> {
    let ns = format!("null-{n}");
    let server = NullServer::start(&ns, n).await?;
    mount(&["echo"], &plugin_dir(&ns))?;
    let config_dir = tempfile::tempdir()?;
    let kubeconfig = server.kubeconfig(config_dir.path())?;
    let start = Instant::now();
    let mut child = host_command("wasm", &ns, n, &kubeconfig)?.spawn()?;
    let pid = child.id().context("child pid")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    // The host's log shares its stdout: passed on whole, so a full pipe never stalls it.
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut ready_tx = Some(ready_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(addr) = line.strip_prefix("METRICS ") {
                ready_tx.take().map(|tx| tx.send(addr.to_string()));
            } else {
                eprintln!("{line}");
            }
        }
    });
    let metrics = ready.await.context("the host exited before serving")?;
    let started_cpu = cpu_seconds(pid);
    let deadline = start + Duration::from_secs(60 + n as u64 / 20);
    let mut jobs_at = None;
    let statuses_at = loop {
        let (statused, created, _) = server.progress();
        if jobs_at.is_none() && created >= n {
            jobs_at = Some(start.elapsed());
        }
        if statused >= n {
            break start.elapsed();
        }
        if let Some(status) = child.try_wait()? {
            bail!("the host exited ({status}) with {statused} of {n} statuses written");
        }
        if Instant::now() > deadline {
            bail!(
                "{statused} of {n} statuses and {created} Jobs after {:?}; the server was asked for {:?}",
                start.elapsed(),
                server.unknown()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (cpu, rss) = (cpu_seconds(pid), peak_rss_mib(pid));
    let (_, _, writes) = server.progress();
    let page = capstan_tests::host::http_get(&metrics, "/metrics")?.1;
    stop(&mut child).await;
    let jobs_at = jobs_at.unwrap_or(statuses_at);
    println!(
        "{n:>6} {:>9.2} {:>9.2} {cpu:>10.2} {:>10.3} {:>13.0} {:>13.0} {:>9.2} {rss:>9.1}",
        jobs_at.as_secs_f64(),
        statuses_at.as_secs_f64(),
        cpu * 1000.0 / n as f64,
        n as f64 / cpu,
        n as f64 / statuses_at.as_secs_f64(),
        writes as f64 / n as f64,
    );
    let dropped = sample(
        &page,
        r#"capstan_events_dropped_total{plugin="echo",cause="queue"}"#,
    );
    println!(
        "        of the CPU, {started_cpu:.2} s before the host served (its start: the plugin from the compile cache, the servers); Events written per parent {:.3}, dropped from a full queue {dropped:.0}",
        server.events() as f64 / n as f64
    );
    Kinds::of(&[page], n).print();
    if !server.unknown().is_empty() {
        println!("        asked for and not served: {:?}", server.unknown());
    }
    Ok(())
}
