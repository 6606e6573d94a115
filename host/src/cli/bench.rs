//! `capstan bench`: latency and throughput of dispatching one fixture to a plugin, in a
//! fresh instance per call (what the controller does) and in one reused instance.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use super::input;
use crate::engine::{DispatchError, Plugin, RelatedParent, Request};

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
    #[arg(long, value_delimiter = ',', value_parser = at_least_one, conflicts_with = "with")]
    copies: Vec<usize>,
    /// More plugins to measure on the same fixture and settings, loaded into the same
    /// engine, in this run (repeat, or comma-separated): one row each — size, fresh p50 and
    /// p99, reused p50, each thread's p50 with all threads at once — to compare builds or
    /// languages of one plugin.
    #[arg(long, value_name = "PLUGIN", value_delimiter = ',')]
    with: Vec<PathBuf>,
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
    if !args.with.is_empty() {
        return compare(&args);
    }
    let (_, plugin) = args.plugin.load()?;
    let request = fixture_request(&plugin, &Fixture::read(&args.fixtures)?)?;
    if !args.copies.is_empty() {
        return copies(&plugin, &request, args.copies);
    }
    let (n, threads) = (args.iterations, args.threads());
    let m = Measured::of(&plugin, &request, n, threads)?;
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
    m.fresh.print("fresh instance");
    m.reused.print("reused instance");
    m.per_thread.print(&format!("fresh, {threads} threads (each)"));
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>12.0}",
        format!("fresh, {threads} threads (all)"),
        "",
        "",
        "",
        (n * threads) as f64 / m.wall.as_secs_f64()
    );
    if let Some(related) = m.related {
        related.print("related (fresh instance)");
    }
    Ok(ExitCode::SUCCESS)
}

impl BenchArgs {
    fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()))
    }
}

/// The plugin and every `--with` plugin measured one after another in one engine, a row each.
fn compare(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let plugins = args.plugin.load_with(&args.with)?;
    let fixture = Fixture::read(&args.fixtures)?;
    let (n, threads) = (args.iterations, args.threads());
    println!(
        "{n} calls per measurement, every plugin in one engine; fresh: a new instance per call, as the controller runs them"
    );
    // Paths as given: two builds of one plugin often share a file name.
    let width = plugins
        .iter()
        .map(|(p, _)| p.display().to_string().len())
        .max()
        .unwrap_or(0)
        .max(6);
    println!(
        "{:<width$} {:>9} {:>11} {:>11} {:>11} {:>16} {:>9}",
        "plugin",
        "size",
        "fresh p50",
        "fresh p99",
        "reused p50",
        format!("{threads} threads p50"),
        "vs one"
    );
    for (path, plugin) in &plugins {
        let request =
            fixture_request(plugin, &fixture).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let m = Measured::of(plugin, &request, n, threads)?;
        let (fresh, each) = (m.fresh.quantile(0.5), m.per_thread.quantile(0.5));
        println!(
            "{:<width$} {:>9} {:>11} {:>11} {:>11} {:>16} {:>8.2}×",
            path.display(),
            size(path),
            micros(fresh),
            micros(m.fresh.quantile(0.99)),
            micros(m.reused.quantile(0.5)),
            micros(each),
            each.as_secs_f64() / fresh.as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A file's size as people say it (KB under a megabyte).
fn size(path: &Path) -> String {
    match std::fs::metadata(path).map(|m| m.len() as f64) {
        Ok(bytes) if bytes >= 1e6 => format!("{:.1} MB", bytes / 1e6),
        Ok(bytes) => format!("{:.0} KB", bytes / 1e3),
        Err(_) => "?".into(),
    }
}

/// The fixture files, read once however many plugins are measured on them.
struct Fixture {
    parent: serde_json::Value,
    children: Vec<serde_json::Value>,
    related: Vec<serde_json::Value>,
    now: k8s_openapi::jiff::Timestamp,
}

impl Fixture {
    fn read(fixtures: &input::FixtureArgs) -> anyhow::Result<Fixture> {
        Ok(Fixture {
            parent: fixtures.parents()?.swap_remove(0),
            children: fixtures.children()?,
            related: fixtures.related()?,
            now: fixtures.now,
        })
    }
}

/// The request the fixture makes for `plugin`, tried once: a fault on it ends the bench.
fn fixture_request(plugin: &Plugin, fixture: &Fixture) -> anyhow::Result<Request> {
    let request = match input::request(
        plugin,
        fixture.parent.clone(),
        fixture.children.clone(),
        &fixture.related,
        fixture.now,
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
    Ok(request)
}

/// Every dispatch measurement of one plugin on one request.
struct Measured {
    fresh: Stats,
    reused: Stats,
    /// One thread's calls while `threads` threads called at once.
    per_thread: Stats,
    /// The wall time of all threads' calls.
    wall: Duration,
    /// `related`, which the host asks once per change of the parent it can see, not per
    /// reconcile.
    related: Option<Stats>,
}

impl Measured {
    fn of(plugin: &Plugin, request: &Request, n: usize, threads: usize) -> anyhow::Result<Measured> {
        // Warm caches and the instance pool before measuring.
        for _ in 0..n.min(200) {
            let _ = plugin.reconcile(request);
        }
        let fresh = measure(n, || drop(plugin.reconcile(request)));
        let mut instance = plugin.instantiate("bench")?;
        let reused = measure(n, || drop(instance.reconcile(request)));
        let (wall, per_thread) = concurrent(plugin, request, n, threads);
        let related = (!plugin.metadata().related.is_empty()).then(|| {
            let parent = RelatedParent::of(&request.parent);
            measure(n, || drop(plugin.related(&parent)))
        });
        Ok(Measured {
            fresh,
            reused,
            per_thread,
            wall,
            related,
        })
    }
}

/// Load copies of `plugin` under distinct names up to each count in `counts`, one
/// reconcile each, and print RSS per count; a copy the memory budget refuses ends it with
/// the host's one-line reason.
fn copies(plugin: &Plugin, request: &Request, mut counts: Vec<usize>) -> anyhow::Result<ExitCode> {
    counts.sort_unstable();
    counts.dedup();
    let rss_mib = || capstan_engine::rss_bytes(std::process::id()) as f64 / f64::from(1 << 20);
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

    #[test]
    fn more_plugins_come_repeated_or_comma_separated_and_not_with_copies() {
        let with = |args: &[&str]| match parse(args).expect("valid arguments").command {
            Command::Bench(args) => args.with,
            other => panic!("parsed as {other:?}"),
        };
        let expected: Vec<std::path::PathBuf> = vec!["py.wasm".into(), "js.wasm".into()];
        assert_eq!(with(&["--with", "py.wasm,js.wasm"]), expected);
        assert_eq!(with(&["--with", "py.wasm", "--with", "js.wasm"]), expected);
        let error = parse(&["--with", "py.wasm", "--copies", "1,10"]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ArgumentConflict);
    }
}
