//! The sandbox against hostile plugins: every fault becomes a typed error, nothing leaks
//! out of the sandbox, and the same engine keeps serving well-behaved plugins afterwards.
//! The engine crate alone, called from plain threads: no Kubernetes client, no async runtime.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use capstan_engine::{DispatchError, Engine, EngineConfig, Fault, Limits, LoadError, Plugin, Request};
use capstan_tests::{echo_fixture, plugin};
use serde_json::{Value, json};

struct Plugins {
    echo: Plugin,
    hostile: Plugin,
}

/// Both plugins, compiled once per test process into one shared engine, so every test
/// also proves the engine survived the others' faults.
fn load(limits: Limits) -> Plugins {
    static SHARED: OnceLock<Plugins> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let engine = Engine::new(EngineConfig::default()).unwrap();
        Plugins {
            echo: engine.load_file(&plugin("echo"), Limits::default()).unwrap(),
            hostile: engine.load_file(&plugin("hostile"), Limits::default()).unwrap(),
        }
    });
    Plugins {
        echo: shared.echo.clone(),
        hostile: shared.hostile.with_limits(limits).unwrap(),
    }
}

fn hostile(mode: &str, arg: &str) -> Request {
    capstan_tests::hostile_request("sandbox", mode, arg)
}

fn echo_request() -> Request {
    let text = std::fs::read_to_string(echo_fixture("echo.yaml")).unwrap();
    Request {
        parent: serde_saphyr::from_str::<serde_json::Value>(&text).unwrap().into(),
        ..Request::default()
    }
}

/// After any misbehaviour, both a well-behaved plugin and the hostile one in a benign
/// mode still work in the same engine.
fn assert_still_serving(p: &Plugins) {
    let echo = p.echo.reconcile(&echo_request()).expect("echo still reconciles");
    assert_eq!(echo.children.len(), 1);
    let ok = p
        .hostile
        .reconcile(&hostile("ok", ""))
        .expect("a fresh hostile instance works");
    assert_eq!(ok.children[0]["kind"], "ConfigMap");
}

fn fault(p: &Plugins, mode: &str) -> Fault {
    match p.hostile.reconcile(&hostile(mode, "")) {
        Err(DispatchError::Fault(f)) => f,
        other => panic!("{mode}: expected a fault, got {other:?}"),
    }
}

fn status(p: &Plugins, mode: &str, arg: &str) -> Value {
    let response = p
        .hostile
        .reconcile(&hostile(mode, arg))
        .unwrap_or_else(|e| panic!("{mode}: {e}"));
    response.status.expect("probe modes report a status")
}

#[test]
fn infinite_loop_is_stopped_at_the_deadline() {
    let deadline = Duration::from_millis(300);
    let p = load(Limits {
        deadline,
        ..Limits::default()
    });
    // The deadline is CPU time (a loaded machine must not fault honest calls), so the
    // call is judged by the CPU this thread spent on it, not by the wall clock.
    let start = thread_cpu_time();
    let f = fault(&p, "loop");
    let took = thread_cpu_time() - start;
    assert_eq!(f, Fault::Deadline(deadline));
    assert!(
        took < deadline + Duration::from_millis(100),
        "stopped after {took:?} of CPU"
    );
    assert_still_serving(&p);
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) },
        0
    );
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[test]
fn memory_bomb_hits_the_memory_cap() {
    let p = load(Limits {
        memory: 32 << 20,
        ..Limits::default()
    });
    assert_eq!(fault(&p, "memory"), Fault::OutOfMemory(32 << 20));
    assert_still_serving(&p);
}

#[test]
fn panic_is_reported_with_its_message() {
    let p = load(Limits::default());
    match fault(&p, "panic") {
        Fault::Panic(message) => assert!(message.contains("panics on purpose"), "{message}"),
        other => panic!("expected a panic fault, got {other:?}"),
    }
    assert_still_serving(&p);
}

#[test]
fn stack_overflow_is_caught() {
    let p = load(Limits::default());
    assert_eq!(fault(&p, "stack"), Fault::StackOverflow);
    assert_still_serving(&p);
}

#[test]
fn no_filesystem_no_environment_no_network() {
    let p = load(Limits::default());
    let file = status(&p, "file", "/etc/hostname");
    assert_eq!(file["result"], "denied", "{file}");

    let env = status(&p, "env", "");
    assert_eq!(
        env["result"], "",
        "the plugin sees no environment variables: {env}"
    );
    assert_eq!(env["args"], 0, "the plugin sees no arguments: {env}");

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let socket = status(&p, "socket", &listener.local_addr().unwrap().to_string());
    assert_eq!(socket["result"], "denied", "{socket}");
    assert!(listener.accept().is_err(), "nothing connected to the listener");
    assert_still_serving(&p);
}

#[test]
fn flood_of_stdout_is_capped_and_the_call_still_succeeds() {
    // 100 000 writes take a while in an unoptimised test build; the deadline is not the point.
    let p = load(Limits {
        deadline: Duration::from_secs(60),
        ..Limits::default()
    });
    let response = p
        .hostile
        .reconcile(&hostile("stdout", ""))
        .expect("writing 100 MB to stdout is not fatal");
    assert_eq!(response.children.len(), 1);
    assert_still_serving(&p);
}

#[test]
fn ten_thousand_children_exceed_the_cap() {
    let p = load(Limits::default());
    assert_eq!(
        fault(&p, "children"),
        Fault::TooManyChildren {
            count: 10_000,
            cap: Limits::default().max_children
        }
    );
    assert_still_serving(&p);
}

#[test]
fn oversized_response_is_refused() {
    // A 6 MiB status is over the lift allowance (4 MiB and the children's and events'
    // host size): refused before the host copies it.
    let p = load(Limits::default());
    let f = fault(&p, "big-status");
    assert!(matches!(f, Fault::TooMuchData(_)), "{f:?}");
    assert_eq!(f.cause(), "response_too_large");
    // Within an allowance raised by many children, it is copied, measured and refused.
    let limits = Limits {
        max_children: 100_000,
        ..Limits::default()
    };
    let p = load(limits.clone());
    let f = fault(&p, "big-status");
    assert!(
        matches!(f, Fault::ResponseTooLarge { cap, .. } if cap == limits.response_bytes),
        "{f:?}"
    );
    assert_still_serving(&p);
}

#[test]
fn non_json_output_is_malformed() {
    let p = load(Limits::default());
    for mode in ["not-json", "not-object"] {
        assert!(matches!(fault(&p, mode), Fault::MalformedResponse(_)), "{mode}");
    }
    assert_still_serving(&p);
}

#[test]
fn each_call_gets_a_fresh_instance_even_after_a_trap() {
    let p = load(Limits::default());
    for _ in 0..3 {
        assert!(matches!(fault(&p, "panic"), Fault::Panic(_)));
        assert_still_serving(&p);
    }
}

/// A call never sees what an earlier one left in memory, whichever pool slot it gets and
/// however the engine resets slots on this kernel: the probe looks through all of its
/// linear memory for what every earlier call wrote on 256 pages, here on one thread and two.
#[test]
fn no_call_finds_what_an_earlier_call_left_in_memory() {
    let p = load(Limits::default());
    let marker = format!("left by an earlier call {}", std::process::id());
    let found = |p: &Plugins| status(p, "leftovers", &marker)["found"].as_u64();
    // The probe does find leftovers where they are: a second call in one instance sees
    // the 256 copies the first left.
    let mut reused = p.hostile.instantiate("sandbox/leftovers").unwrap();
    let mut call = || {
        reused
            .reconcile(&hostile("leftovers", &marker))
            .unwrap()
            .status
            .unwrap()["found"]
            .clone()
    };
    assert_eq!((call(), call()), (json!(0), json!(256)));
    for _ in 0..10 {
        assert_eq!(found(&p), Some(0));
    }
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| s.spawn(|| (0..10).map(|_| found(&p)).collect::<Vec<_>>()))
            .collect();
        for t in threads {
            assert!(t.join().unwrap().iter().all(|f| *f == Some(0)));
        }
    });
}

/// A component written as text, in the binary form the host reads.
fn text(wat: &str) -> Vec<u8> {
    wat::parse_str(wat).expect("valid WAT")
}

fn load_error(bytes: &[u8]) -> LoadError {
    let engine = Engine::new(EngineConfig::default()).unwrap();
    match engine.load(bytes, Limits::default()) {
        Err(e) => e,
        Ok(_) => panic!(
            "loading {:?} should fail",
            String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
        ),
    }
}

#[test]
fn load_errors_name_the_problem() {
    assert_eq!(load_error(b"MZ\x90\x00 not wasm at all"), LoadError::NotWasm);
    assert_eq!(load_error(b"\0asm\x01\0\0\0"), LoadError::CoreModule);
    assert_eq!(
        load_error(&text(
            r#"(component (instance $i) (export "capstan:reconciler/plugin@0.9.0" (instance $i)))"#
        )),
        LoadError::WitVersion {
            found: "capstan:reconciler@0.9.0".into()
        }
    );
    let future = load_error(&text(
        r#"(component (instance $i) (export "capstan:reconciler/plugin@0.9.0" (instance $i)))"#,
    ));
    assert_eq!(
        future.to_string(),
        "plugin implements capstan:reconciler@0.9.0, but this host serves capstan:reconciler@0.3.0, 0.2.0 and 0.1.0"
    );
    // A version the host serves, but not its shape: named as what it is.
    assert!(matches!(
        load_error(&text(
            r#"(component (instance $i) (export "capstan:reconciler/plugin@0.1.0" (instance $i)))"#
        )),
        LoadError::Exports(_)
    ));
    assert!(matches!(load_error(&text("(component)")), LoadError::Exports(_)));
    assert!(matches!(
        load_error(b"\0asm\x0d\0\x01\0garbage"),
        LoadError::Invalid(_)
    ));
    for e in [
        LoadError::NotWasm,
        LoadError::CoreModule,
        load_error(&text("(component)")),
    ] {
        assert!(!e.to_string().contains('\n'), "one line: {e}");
    }
}

#[test]
fn memory_limit_above_the_engine_maximum_is_refused() {
    let engine = Engine::new(EngineConfig {
        max_memory: 64 << 20,
        ..EngineConfig::default()
    })
    .unwrap();
    let bytes = std::fs::read(plugin("echo")).unwrap();
    let err = engine
        .load(
            &bytes,
            Limits {
                memory: 128 << 20,
                ..Limits::default()
            },
        )
        .err()
        .unwrap();
    assert!(matches!(err, LoadError::Limits(_)), "{err}");
}

#[test]
fn a_sleeping_plugin_spends_no_time_and_time_is_deterministic() {
    let p = load(Limits {
        deadline: Duration::from_millis(500),
        ..Limits::default()
    });
    // Thirty seconds of sleep (a monotonic-clock wait) against a 500 ms deadline: the wait
    // is over at once and only the plugin's own clock moves. A call that really waited
    // would be stopped at ten deadlines of wall time (5 s) and fault instead of answering,
    // so the bound is that, not a guess at how fast this machine runs the call.
    let start = Instant::now();
    let slept = status(&p, "sleep", "1");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(slept["sleptMs"], 30_000);
    // Sleeping forever is a loop like any other: stopped at the deadline, 500 ms of CPU
    // or ten deadlines of wall time on a machine too loaded to give it that CPU.
    let start = Instant::now();
    match p.hostile.reconcile(&hostile("sleep", "4000000000")) {
        Err(DispatchError::Fault(Fault::Deadline(_))) => {}
        other => panic!("expected the deadline, got {other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "took {:?}",
        start.elapsed()
    );

    // The wall clock stands at the epoch; seeds are fixed, so two calls agree.
    let first = status(&p, "time", "");
    assert_eq!(first["wallNanos"], 0);
    assert_eq!(status(&p, "time", ""), first);
}

#[test]
fn the_deadline_counts_cpu_time_so_contention_does_not_fault_honest_calls() {
    // Four looping calls at once on this machine's cores: each is stopped once it has had
    // its deadline of CPU (so later than its deadline of wall time when cores are shared),
    // and never later than ten deadlines of wall time.
    let deadline = Duration::from_millis(200);
    let p = std::sync::Arc::new(load(Limits {
        deadline,
        ..Limits::default()
    }));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let p = p.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let f = fault(&p, "loop");
                (f, start.elapsed())
            })
        })
        .collect();
    for t in threads {
        let (f, took) = t.join().unwrap();
        assert_eq!(f, Fault::Deadline(deadline));
        assert!(
            took >= deadline && took < deadline * 10 + Duration::from_millis(200),
            "{took:?}"
        );
    }
    assert_still_serving(&p);
}

/// A response's parsed trees are host memory the text's cap does not bound (4 MiB of
/// `{"a":0}` would be ~350 MiB of maps): they are counted before any is built and held
/// from the plugin's memory total for as long as the response lives.
#[test]
fn parsed_responses_are_held_from_the_plugins_memory_total() {
    let p = load(Limits::default());
    assert_eq!(fault(&p, "fanout"), Fault::PluginMemory(128 << 20));
    // 1.3 M empty arrays: ~70 MiB of values, within the total: answered, and held.
    let response = p
        .hostile
        .reconcile(&hostile("fanout-arrays", ""))
        .expect("within the total");
    let held = response.held.bytes();
    assert!((32 * 1_300_000..128 << 20).contains(&held), "{held}");
    // Held while the response lives: a second such answer does not fit beside it.
    match p.hostile.reconcile(&hostile("fanout-arrays", "")) {
        Err(DispatchError::Fault(Fault::PluginMemory(_))) => {}
        other => panic!("two responses of ~70 MiB in a 128 MiB total: {other:?}"),
    }
    drop(response);
    let again = p.hostile.reconcile(&hostile("fanout-arrays", ""));
    assert!(again.is_ok(), "given back with the response: {again:?}");
    drop(again);
    assert_still_serving(&p);
}
