//! `reuseInstances`: a plugin's calls run in instances earlier calls ended in, which is
//! what makes an imported Python or JavaScript hook cheap; what the plugin keeps carries
//! over, a faulted instance never runs again, and a kept instance gives its pool slot or
//! memory back to a call waiting for one (never a deadlock, whatever the timing).

use std::sync::mpsc;
use std::time::Duration;

use capstan_engine::{DispatchError, Engine, EngineConfig, Fault, Limits, Plugin, Request};
use capstan_tests::plugin;

/// Longer than any of these calls takes on a loaded machine; past it the test says which
/// call never came back instead of hanging.
const NO_DEADLOCK: Duration = Duration::from_secs(120);

fn request(mode: &str, arg: &str) -> Request {
    capstan_tests::hostile_request("reuse", mode, arg)
}

/// Hostile in an engine of `slots` pool slots, once as loaded and once (renamed
/// `hostile-kept`) reusing its instances.
fn plugins(slots: u32) -> (Plugin, Plugin) {
    let engine = Engine::new(EngineConfig {
        max_instances: slots,
        ..EngineConfig::default()
    })
    .unwrap();
    let fresh = engine.load_file(&plugin("hostile"), Limits::default()).unwrap();
    let kept = (fresh.renamed("hostile-kept").unwrap())
        .with_limits(Limits {
            reuse_instances: true,
            ..Limits::default()
        })
        .unwrap();
    (fresh, kept)
}

/// Copies of `marker` the probe found in its memory: what earlier calls in the same
/// instance left there (each call leaves 256).
fn leftovers(p: &Plugin, marker: &str) -> u64 {
    let response = p.reconcile(&request("leftovers", marker)).unwrap();
    response.status.unwrap()["found"].as_u64().unwrap()
}

/// Calls the instance that ran this one has run (hostile's `calls` probe): 1 when fresh.
fn calls(p: &Plugin) -> u64 {
    let response = p.reconcile(&request("calls", "")).unwrap();
    response.status.unwrap()["calls"].as_u64().unwrap()
}

/// The first calls raise the plugin's floor to what a call holds (an instance holding
/// more than its floor is not kept); from then on each call runs where the last ended.
fn until_kept(p: &Plugin) -> u64 {
    (0..4)
        .map(|_| calls(p))
        .find(|n| *n > 1)
        .expect("within four calls one runs in an instance an earlier call ended in")
}

/// `f` on its own thread, failing the test if it does not return within [`NO_DEADLOCK`].
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(NO_DEADLOCK).unwrap_or_else(|_| {
        panic!("{what}: no answer in {NO_DEADLOCK:?}: a kept instance held what it waited for")
    })
}

#[test]
fn a_kept_instance_carries_what_the_plugin_left_until_it_faults() {
    let (fresh, kept) = plugins(16);
    let n = until_kept(&kept);
    assert_eq!(calls(&kept), n + 1, "and the next call runs there too");
    // The plugin's own error leaves the instance sound.
    assert!(matches!(
        kept.reconcile(&request("no-such-mode", "")),
        Err(DispatchError::Fatal(_))
    ));
    assert_eq!(
        calls(&kept),
        n + 2,
        "the same instance: the error counted no call"
    );
    // Memory the plugin left is there for the next call (what the sandbox otherwise
    // wipes between calls). The probe grows by 2 MiB a call, so an instance now and then
    // ends past the floor and is not kept; within four calls one finds what the call
    // before it wrote.
    let marker = format!("kept {}", std::process::id());
    let found: Vec<u64> = (0..4).map(|_| leftovers(&kept, &marker)).collect();
    assert!(found.iter().any(|f| *f > 0), "{found:?}");
    // A fault ends it: wasmtime would refuse to enter it again, failing the call.
    assert!(matches!(
        kept.reconcile(&request("panic", "")),
        Err(DispatchError::Fault(Fault::Panic(_)))
    ));
    assert_eq!(calls(&kept), 1, "a faulted instance never runs again");
    // The same plugin without the limit, in the same engine: every call fresh.
    for _ in 0..3 {
        assert_eq!(calls(&fresh), 1);
        assert_eq!(leftovers(&fresh, &marker), 0);
    }
}

#[test]
fn a_call_waiting_for_a_slot_gets_the_one_a_kept_instance_held() {
    let (fresh, kept) = plugins(1);
    let n = until_kept(&kept);
    assert_eq!(calls(&kept), n + 1, "kept, holding the only slot");
    // The other plugin's call needs that slot.
    let other = fresh.clone();
    let answer = within("the other plugin's call", move || {
        other.reconcile(&request("ok", "")).map(|r| r.children.len())
    });
    assert_eq!(answer, Ok(1));
    assert_eq!(calls(&kept), 1, "the kept instance gave its slot back");
}

/// Calls of one plugin, four at once, under a total with room for one instance: each
/// waits in line while another runs or is kept, and every one of them is answered.
#[test]
fn calls_in_line_for_memory_are_admitted_past_kept_instances() {
    let (fresh, _) = plugins(8);
    let one = fresh.footprint() + (1 << 20);
    let kept = (fresh.renamed("hostile-one").unwrap())
        .with_limits(Limits {
            reuse_instances: true,
            memory_total: one,
            memory: one,
            ..Limits::default()
        })
        .unwrap();
    let answered = within("four callers in line", move || {
        std::thread::scope(|s| {
            let callers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..25)
                            .filter(|_| kept.reconcile(&request("ok", "")).is_ok())
                            .count()
                    })
                })
                .collect();
            callers.into_iter().map(|c| c.join().unwrap()).sum::<usize>()
        })
    });
    assert_eq!(answered, 100);
}
