//! `capstan bench`: latency and throughput of dispatching one fixture to a plugin, in a
//! fresh instance per call (what the controller does) and in one reused instance.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use super::input;
use crate::engine::{DispatchError, Plugin, Request};

/// Arguments of `capstan bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    plugin: super::PluginArgs,
    #[command(flatten)]
    fixtures: input::FixtureArgs,
    /// Calls per measurement.
    #[arg(short = 'n', long, default_value_t = 10_000)]
    iterations: usize,
    /// Threads for the concurrent measurement (default: available cores).
    #[arg(long, value_parser = at_least_one)]
    threads: Option<usize>,
    /// Instead of dispatch latency, load the plugin this many times under distinct names
    /// (comma-separated, e.g. `1,10,100,300`), reconcile the fixture once in each copy, and
    /// print the host's RSS and what each added plugin cost.
    #[arg(long, value_delimiter = ',', value_parser = at_least_one)]
    copies: Vec<usize>,
}

/// A count of 1 or more (clap refuses 0 with this message).
fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.iterations > 0, "-n must be at least 1");
    let (_, plugin) = args.plugin.load()?;
    let parent = args.fixtures.parents()?.swap_remove(0);
    let related = args.fixtures.related()?;
    let request = match input::request(
        &plugin,
        parent,
        args.fixtures.children()?,
        &related,
        args.fixtures.now,
        false,
        &capstan_contract::Allowances::default(),
    ) {
        Ok(request) => request,
        Err(input::Unrequestable::Dispatch(e)) => anyhow::bail!("the plugin's related queries failed: {e}"),
        Err(input::Unrequestable::Refused(m)) => {
            anyhow::bail!("the plugin's related queries were refused: {m}")
        }
    };
    match plugin.reconcile(&request) {
        Err(DispatchError::Fault(f)) => anyhow::bail!("plugin faulted on the fixture: {f}"),
        Err(e) => eprintln!("note: the fixture reconciles to an error ({e}); measuring that path"),
        Ok(_) => {}
    }
    if !args.copies.is_empty() {
        return copies(&plugin, &request, args.copies);
    }
    let n = args.iterations;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()));

    // Warm caches and the instance pool before measuring.
    for _ in 0..n.min(200) {
        let _ = plugin.reconcile(&request);
    }
    let fresh = measure(n, || drop(plugin.reconcile(&request)));
    let mut instance = plugin.instantiate("bench")?;
    let reused = measure(n, || drop(instance.reconcile(&request)));
    let (wall, per_thread) = concurrent(&plugin, &request, n, threads);
    // The host asks `related` once per parent version, not per reconcile: its own row.
    let related =
        (!plugin.metadata().related.is_empty()).then(|| measure(n, || drop(plugin.related(&request.parent))));

    let name = &plugin.metadata().name;
    println!(
        "plugin {name}: {n} calls per measurement; {} related object(s), settings {}",
        request.related.len(),
        plugin.settings()
    );
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>12}",
        "dispatch", "p50", "p99", "mean", "calls/s"
    );
    fresh.print("fresh instance");
    reused.print("reused instance");
    per_thread.print(&format!("fresh, {threads} threads (each)"));
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>12.0}",
        format!("fresh, {threads} threads (all)"),
        "",
        "",
        "",
        (n * threads) as f64 / wall.as_secs_f64()
    );
    if let Some(related) = related {
        related.print("related (fresh instance)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Load copies of `plugin` under distinct names up to each count in `counts`, one
/// reconcile each, and print RSS per count; a copy the memory budget refuses ends it with
/// the host's one-line reason.
fn copies(plugin: &Plugin, request: &Request, mut counts: Vec<usize>) -> anyhow::Result<ExitCode> {
    counts.sort_unstable();
    counts.dedup();
    let rss_mib = || crate::ops::heap::rss_bytes(std::process::id()) as f64 / f64::from(1 << 20);
    let name = &plugin.metadata().name;
    println!(
        "plugin {name}: copies under distinct names, one reconcile each; measured at load {:.1} MiB an instance",
        plugin.footprint() as f64 / f64::from(1 << 20)
    );
    println!(
        "{:>8} {:>12} {:>20} {:>16}",
        "copies", "host RSS", "per added copy", "reserved (all)"
    );
    let (mut loaded, mut reserved) = (Vec::new(), 0usize);
    let mut first: Option<f64> = None;
    for count in counts {
        while loaded.len() < count {
            let copy = match plugin.renamed(&format!("{name}-{}", loaded.len())) {
                Ok(copy) => copy,
                Err(e) => {
                    println!("copy {} refused: {e}", loaded.len() + 1);
                    return Ok(ExitCode::SUCCESS);
                }
            };
            if let Err(DispatchError::Fault(f)) = copy.reconcile(request) {
                anyhow::bail!("copy {} faulted on the fixture: {f}", loaded.len() + 1);
            }
            reserved += copy.reserved();
            loaded.push(copy);
        }
        let rss = rss_mib();
        let base = *first.get_or_insert(rss);
        let per = match count {
            1 => "".to_string(),
            n => format!("{:.0} KiB", (rss - base) * 1024.0 / (n - 1) as f64),
        };
        println!(
            "{count:>8} {:>12} {per:>20} {:>16}",
            format!("{rss:.1} MiB"),
            format!("{:.0} MiB", reserved as f64 / f64::from(1 << 20))
        );
    }
    Ok(ExitCode::SUCCESS)
}

struct Stats {
    sorted: Vec<Duration>,
    total: Duration,
}

impl Stats {
    fn quantile(&self, q: f64) -> Duration {
        self.sorted[((self.sorted.len() - 1) as f64 * q).round() as usize]
    }

    fn print(&self, label: &str) {
        let mean = self.total / self.sorted.len() as u32;
        let rate = self.sorted.len() as f64 / self.total.as_secs_f64();
        println!(
            "{label:<28} {:>10} {:>10} {:>10} {rate:>12.0}",
            micros(self.quantile(0.5)),
            micros(self.quantile(0.99)),
            micros(mean)
        );
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1}µs", d.as_secs_f64() * 1e6)
}

fn measure(n: usize, mut call: impl FnMut()) -> Stats {
    let mut sorted = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        call();
        sorted.push(t.elapsed());
    }
    let total = start.elapsed();
    sorted.sort_unstable();
    Stats { sorted, total }
}

/// Fresh-instance dispatch on `threads` threads at once: wall time, and one thread's stats.
fn concurrent(plugin: &Plugin, request: &Request, n: usize, threads: usize) -> (Duration, Stats) {
    let start = Instant::now();
    let stats: Vec<Stats> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| measure(n, || drop(plugin.reconcile(request)))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    (
        start.elapsed(),
        stats.into_iter().next().expect("at least one thread"),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut argv = vec!["capstan", "bench", "echo.wasm", "--parent", "echo.yaml"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
    }

    #[test]
    fn zero_threads_is_refused_when_parsing() {
        let error = parse(&["--threads", "0"]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ValueValidation);
        assert_eq!(error.exit_code(), 2);
        let message = error.to_string();
        assert!(
            message.starts_with("error: invalid value '0' for '--threads <THREADS>': must be at least 1"),
            "{message}"
        );
    }

    #[test]
    fn thread_counts_of_one_or_more_or_none_are_accepted() {
        let threads = |args: &[&str]| match parse(args).expect("valid arguments").command {
            Command::Bench(args) => args.threads,
            other => panic!("parsed as {other:?}"),
        };
        assert_eq!(threads(&["--threads", "1"]), Some(1));
        assert_eq!(threads(&["--threads", "8"]), Some(8));
        assert_eq!(threads(&[]), None);
        assert!(parse(&["--threads", "-1"]).is_err());
    }
}
