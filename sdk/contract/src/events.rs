//! Events a plugin asks the host to record: their reasons checked as the API server and
//! Kubernetes' API conventions have them.

use crate::names::printable;

/// Longest reason the API server accepts (`ReasonLengthLimit` in its events validation).
pub const MAX_REASON: usize = 128;

/// Check an event's reason: 1 to [`MAX_REASON`] ASCII letters and digits, starting with an
/// upper-case letter (`JobCreated`, `Spam7`).
///
/// The API server itself refuses an empty reason or one over 128 characters; the
/// CamelCase rule is Kubernetes' API convention for reasons, and the host holds plugins
/// to it because a reason is a key the host keeps per object (its event budget): a
/// reason built from changing text (`Failed-job-7`, a 4 MiB string) would grow that
/// state without end.
pub fn reason(reason: &str) -> Result<(), String> {
    let b = reason.as_bytes();
    let camel = b.first().is_some_and(u8::is_ascii_uppercase)
        && b.len() <= MAX_REASON
        && b.iter().all(u8::is_ascii_alphanumeric);
    if camel {
        Ok(())
    } else {
        Err(format!(
            "reason {:?} is not CamelCase: 1 to {MAX_REASON} ASCII letters and digits, starting with an upper-case letter (e.g. JobCreated)",
            printable(reason)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_short_camel_case_words() {
        for ok in ["JobCreated", "A", "Spam99", &format!("X{}", "y".repeat(127))] {
            assert!(reason(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "jobCreated",
            "9Lives",
            "Job Created",
            "Failed-job-7",
            "Über",
            "Line\nBreak",
            &format!("X{}", "y".repeat(128)),
        ] {
            let e = reason(bad).unwrap_err();
            assert!(e.contains("not CamelCase") && !e.contains('\n'), "{bad:?}: {e}");
        }
        let long = reason(&"Z".repeat(4 << 20)).unwrap_err();
        assert!(
            long.len() < 300,
            "a huge reason is cut in the message: {}",
            long.len()
        );
    }
}
