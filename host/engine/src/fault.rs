//! Everything that can go wrong inside a plugin, as typed causes the host can count,
//! and why a reconcile produced no response.

use std::time::Duration;

use super::text::one_line;

/// A plugin misbehaved; the engine keeps serving and the object is retried with backoff.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// Ran past its wall-clock deadline (epoch interruption).
    #[error("exceeded its deadline of {0:?}")]
    Deadline(Duration),
    /// Tried to grow linear memory past its cap.
    #[error("exceeded its memory limit of {0} bytes")]
    OutOfMemory(usize),
    /// Its live instances together reached the plugin's memory total.
    #[error("reached, with its other calls, the plugin's memory total of {0} bytes")]
    PluginMemory(usize),
    /// Needed more than its floor in the host budget (what one instance was measured to
    /// hold, in bytes) while the rest of the budget was in use.
    #[error("needed more than its reserved {} MiB while the host's memory budget had nothing unreserved left", .0 >> 20)]
    HostMemory(usize),
    /// Overflowed the Wasm stack.
    #[error("overflowed its stack")]
    StackOverflow,
    /// Panicked; the message is the guest's panic output.
    #[error("panicked: {0}")]
    Panic(String),
    /// Any other trap.
    #[error("trapped: {0}")]
    Trap(String),
    /// Answered with something that is not the contract's JSON (not an object, invalid JSON).
    #[error("returned a malformed response: {0}")]
    MalformedResponse(String),
    /// Answered with more bytes than the response cap.
    #[error("returned {size} bytes, over the response cap of {cap}")]
    ResponseTooLarge {
        /// Size of the response.
        size: usize,
        /// The configured cap.
        cap: usize,
    },
    /// Answered with more children than allowed.
    #[error("returned {count} children, over the cap of {cap}")]
    TooManyChildren {
        /// Children returned.
        count: usize,
        /// The configured cap.
        cap: usize,
    },
    /// Handed the host more than its lift allowance in one go (a response, or a host
    /// call's arguments): refused before the host copied it.
    #[error("handed the host more than its allowance of {0} bytes in one go")]
    TooMuchData(usize),
    /// Could not be instantiated (e.g. the instance pool is exhausted).
    #[error("could not be instantiated: {0}")]
    Instantiate(String),
}

impl Fault {
    /// Every [`Fault::cause`], so a plugin's fault series can start at zero.
    pub const CAUSES: &[&str] = &[
        "deadline",
        "out_of_memory",
        "stack_overflow",
        "panic",
        "trap",
        "malformed_response",
        "response_too_large",
        "too_many_children",
        "instantiate",
    ];

    /// A short stable label for metrics (`cause`).
    pub fn cause(&self) -> &'static str {
        match self {
            Fault::Deadline(_) => "deadline",
            Fault::OutOfMemory(_) | Fault::PluginMemory(_) | Fault::HostMemory(_) => "out_of_memory",
            Fault::StackOverflow => "stack_overflow",
            Fault::Panic(_) => "panic",
            Fault::Trap(_) => "trap",
            Fault::MalformedResponse(_) => "malformed_response",
            // Almost always a response, and refused for the same reason.
            Fault::ResponseTooLarge { .. } | Fault::TooMuchData(_) => "response_too_large",
            Fault::TooManyChildren { .. } => "too_many_children",
            Fault::Instantiate(_) => "instantiate",
        }
    }
}

/// Why a reconcile produced no response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// The plugin asked to be retried: after its delay (capped), or with backoff.
    #[error("plugin asked to retry: {message}")]
    Retry {
        /// Why.
        message: String,
        /// How long to wait, if the plugin said.
        after: Option<Duration>,
    },
    /// The plugin reported a permanent problem with this object.
    #[error("plugin reported a fatal error: {0}")]
    Fatal(String),
    /// The plugin faulted.
    #[error("plugin {0}")]
    Fault(#[from] Fault),
}

/// What the guest left behind when a call failed, to tell the causes apart.
pub(crate) struct Evidence<'a> {
    pub deadline: Duration,
    pub memory_denied: Option<Fault>,
    pub stderr: &'a str,
    /// The call's lift allowance (its hostcall fuel).
    pub lift: usize,
}

/// How wasmtime says a lift ran out of hostcall fuel; its error type is private, so the
/// text is matched (the hostile `empty-strings` test notices if it changes).
const FUEL_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";

/// Classify a failed call. What the host itself stopped (the deadline, the stack) is taken
/// from the trap, never from anything the guest can arrange. Rust guests abort on panic
/// and on allocation failure, both as an `unreachable` trap, so there the limiter's record
/// decides first — a plugin can print a panic's text but cannot make the limiter deny it
/// memory it did not ask for — and only then the panic text on stderr. A denial the guest
/// survived (`memory.grow` answers -1; a guest may go on) does not explain a later deadline.
pub(crate) fn classify(err: &wasmtime::Error, evidence: Evidence<'_>) -> Fault {
    use wasmtime::Trap;
    let trap = err.downcast_ref::<Trap>();
    match trap {
        Some(Trap::Interrupt) => return Fault::Deadline(evidence.deadline),
        Some(Trap::StackOverflow) => return Fault::StackOverflow,
        _ => {}
    }
    if let Some(fault) = evidence.memory_denied {
        return fault;
    }
    match trap {
        Some(Trap::UnreachableCodeReached) => match panic_message(evidence.stderr) {
            Some(message) => Fault::Panic(message),
            None => Fault::Trap("unreachable code reached".into()),
        },
        Some(trap) => Fault::Trap(trap.to_string()),
        None => {
            let text = format!("{err:#}");
            if text.contains(FUEL_EXHAUSTED) {
                return Fault::TooMuchData(evidence.lift);
            }
            Fault::Trap(one_line(&text))
        }
    }
}

/// The panic message from Rust's default panic hook output, on one line.
fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.find("panicked at ")?;
    let text = stderr[start + "panicked at ".len()..].trim();
    let mut lines = text.lines();
    let location = lines.next()?.trim_end_matches(':');
    let message: Vec<&str> = lines.take_while(|l| !l.starts_with("note:")).collect();
    Some(one_line(&format!("{} (at {location})", message.join(" "))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_is_extracted_from_the_default_hook_output() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:12:9:\nboom: bad input\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("boom: bad input (at src/lib.rs:12:9)")
        );
        assert_eq!(panic_message("nothing here"), None);
    }

    fn evidence(memory_denied: Option<Fault>, stderr: &str) -> Evidence<'_> {
        Evidence {
            deadline: Duration::from_secs(1),
            memory_denied,
            stderr,
            lift: 1,
        }
    }

    #[test]
    fn the_host_stops_are_taken_from_the_trap_and_a_denial_only_explains_an_abort() {
        use wasmtime::Trap;
        let denied = || Some(Fault::OutOfMemory(64));
        let panic_text = "thread '<unnamed>' panicked at src/lib.rs:1:1:\nforged\n";
        // A plugin that was refused memory, carried on, and then spun or recursed is
        // stopped by the host: that is the cause, whatever it printed.
        let classify = |trap: Trap, denial: Option<Fault>, stderr: &str| {
            classify(&wasmtime::Error::from(trap), evidence(denial, stderr))
        };
        assert_eq!(
            classify(Trap::Interrupt, denied(), panic_text),
            Fault::Deadline(Duration::from_secs(1))
        );
        assert_eq!(
            classify(Trap::StackOverflow, denied(), panic_text),
            Fault::StackOverflow
        );
        // An abort after a denial is the allocation failure, not the panic text beside it.
        assert_eq!(
            classify(Trap::UnreachableCodeReached, denied(), panic_text),
            Fault::OutOfMemory(64)
        );
        assert_eq!(
            classify(Trap::UnreachableCodeReached, None, panic_text),
            Fault::Panic("forged (at src/lib.rs:1:1)".into())
        );
    }

    #[test]
    fn every_cause_is_listed_and_every_listed_cause_occurs() {
        let faults = [
            Fault::Deadline(Duration::from_secs(1)),
            Fault::OutOfMemory(1),
            Fault::PluginMemory(1),
            Fault::HostMemory(1),
            Fault::StackOverflow,
            Fault::Panic(String::new()),
            Fault::Trap(String::new()),
            Fault::MalformedResponse(String::new()),
            Fault::ResponseTooLarge { size: 2, cap: 1 },
            Fault::TooManyChildren { count: 2, cap: 1 },
            Fault::TooMuchData(1),
            Fault::Instantiate(String::new()),
        ];
        let causes: std::collections::BTreeSet<_> = faults.iter().map(Fault::cause).collect();
        let listed: std::collections::BTreeSet<_> = Fault::CAUSES.iter().copied().collect();
        assert_eq!(causes, listed);
    }
}
