//! Validation of cron schedules as Kubernetes accepts them in a CronJob's `spec.schedule`.
//!
//! Checked in the plugin so a bad schedule fails fast with a message that names the bad
//! part, instead of as an opaque apply error from the API server. The grammar follows the
//! parser Kubernetes uses (robfig/cron's standard parser): five fields or a macro, and no
//! `7` for Sunday. It is deliberately a little stricter than that parser where it accepts
//! oddities (`?`, `@every`, `a/n`), so anything this accepts, Kubernetes accepts too.

use std::fmt;

/// Why a schedule is invalid: the bad part and what was expected, e.g.
/// `minute 61 is out of range 0-59`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError(String);

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScheduleError {}

/// Shorthands accepted in place of the five fields.
pub const MACROS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

const FIELD_NAMES: &str = "minute hour day-of-month month day-of-week";

/// One of the five fields: its name in messages, its bounds and, for month and weekday,
/// the names that stand for `min`, `min + 1`, ...
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ],
    },
    Field {
        name: "day-of-week",
        min: 0,
        max: 6,
        names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    },
];

/// Check that `schedule` is five valid cron fields or one of [`MACROS`].
pub fn validate(schedule: &str) -> Result<(), ScheduleError> {
    let trimmed = schedule.trim_start();
    // Kubernetes refuses any time zone inside spec.schedule and wants spec.timeZone instead.
    for prefix in ["CRON_TZ=", "TZ="] {
        if trimmed.starts_with(prefix) {
            return Err(ScheduleError(format!(
                "time zone prefix {prefix} is not allowed: Kubernetes rejects time zones in a CronJob schedule"
            )));
        }
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    match fields.as_slice() {
        [] => Err(ScheduleError(format!(
            "is empty: expected five fields ({FIELD_NAMES}) or a macro such as @daily"
        ))),
        [first, ..] if first.starts_with('@') => {
            if !MACROS.contains(first) {
                Err(ScheduleError(format!(
                    "unknown macro {first}: expected one of {}",
                    MACROS.join(", ")
                )))
            } else if fields.len() > 1 {
                Err(ScheduleError(format!("macro {first} must stand alone")))
            } else {
                Ok(())
            }
        }
        _ if fields.len() != FIELDS.len() => Err(ScheduleError(format!(
            "has {} fields: expected 5 ({FIELD_NAMES})",
            fields.len()
        ))),
        _ => fields
            .iter()
            .zip(&FIELDS)
            .try_for_each(|(text, field)| field.validate(text)),
    }
}

impl Field {
    /// A field is a comma-separated list of `*`, `a` or `a-b`, the ranges optionally with `/step`.
    fn validate(&self, text: &str) -> Result<(), ScheduleError> {
        let name = self.name;
        for item in text.split(',') {
            if item.is_empty() {
                return Err(ScheduleError(format!("{name} list {text:?} has an empty item")));
            }
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (item, None),
            };
            match range.split_once('-') {
                _ if range == "*" => {}
                Some((low, high)) => {
                    let (low, high) = (self.value(low, item)?, self.value(high, item)?);
                    if low > high {
                        return Err(ScheduleError(format!(
                            "{name} range {range} is reversed: the start must not exceed the end"
                        )));
                    }
                }
                None => {
                    self.value(range, item)?;
                    if let Some(step) = step {
                        // robfig/cron reads `a/n` as `a-max/n` but standard cron does not; make it explicit.
                        return Err(ScheduleError(format!(
                            "{name} step {item} needs a range: write {range}-{}/{step} or */{step}",
                            self.max
                        )));
                    }
                }
            }
            if let Some(step) = step {
                self.step(step, item)?;
            }
        }
        Ok(())
    }

    /// One bound: a number within the field's range, or a month or weekday name.
    fn value(&self, token: &str, item: &str) -> Result<u32, ScheduleError> {
        let name = self.name;
        if token.is_empty() {
            return Err(ScheduleError(format!("{name} {item:?} is missing a number")));
        }
        if token.bytes().all(|b| b.is_ascii_digit()) {
            let (min, max) = (self.min, self.max);
            return match token.parse::<u32>() {
                Ok(v) if (min..=max).contains(&v) => Ok(v),
                Ok(7) if name == "day-of-week" => Err(ScheduleError(format!(
                    "{name} 7 is out of range 0-6: Kubernetes has no 7 for Sunday, use 0 or SUN"
                ))),
                _ => Err(ScheduleError(format!(
                    "{name} {token} is out of range {min}-{max}"
                ))),
            };
        }
        if let Some(i) = self.names.iter().position(|n| n.eq_ignore_ascii_case(token)) {
            return Ok(self.min + i as u32);
        }
        Err(ScheduleError(match self.names {
            [first, .., last] => format!("{name} {token:?} is not a number or a name {first}-{last}"),
            _ => format!("{name} {token:?} is not a number"),
        }))
    }

    /// The `n` of `/n`: a positive number no larger than the field's maximum.
    fn step(&self, step: &str, item: &str) -> Result<(), ScheduleError> {
        let (name, max) = (self.name, self.max);
        if step.is_empty() || !step.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ScheduleError(format!("{name} step in {item:?} is not a number")));
        }
        match step.parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => Ok(()),
            _ => Err(ScheduleError(format!(
                "{name} step {step} is out of range 1-{max}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(schedule: &str) -> String {
        validate(schedule)
            .expect_err(&format!("{schedule:?} should be invalid"))
            .to_string()
    }

    #[test]
    fn accepts_standard_schedules() {
        for s in [
            "* * * * *",
            "0 0 1 1 0",
            "59 23 31 12 6",
            "*/5 * * * *",
            "0-30/10 9-17 * * 1-5",
            "0,15,30,45 * * * *",
            "5 4 * * sun",
            "0 12 1 JAN-MAR/1 MON-FRI",
            "0 0 * jan,Jul Sat",
            "  0   0 * * *  ",
            "0\t0\t*\t*\t*",
            "00 05 * * *",
            "*/59 */23 */31 */12 */6",
        ] {
            assert_eq!(validate(s), Ok(()), "{s:?}");
        }
    }

    #[test]
    fn accepts_every_macro() {
        for m in MACROS {
            assert_eq!(validate(m), Ok(()), "{m}");
        }
    }

    #[test]
    fn out_of_range_values_name_the_field_and_range() {
        assert_eq!(message("61 * * * *"), "minute 61 is out of range 0-59");
        assert_eq!(message("0 24 * * *"), "hour 24 is out of range 0-23");
        assert_eq!(message("0 0 0 * *"), "day-of-month 0 is out of range 1-31");
        assert_eq!(message("0 0 32 * *"), "day-of-month 32 is out of range 1-31");
        assert_eq!(message("0 0 * 13 *"), "month 13 is out of range 1-12");
        assert_eq!(message("0 0 * * 8"), "day-of-week 8 is out of range 0-6");
        assert_eq!(
            message("99999999999 * * * *"),
            "minute 99999999999 is out of range 0-59"
        );
        assert!(message("0 0 * * 7").contains("use 0 or SUN"));
    }

    #[test]
    fn wrong_field_counts_and_empty_schedules_are_rejected() {
        assert!(message("").starts_with("is empty"));
        assert!(message("   ").starts_with("is empty"));
        assert_eq!(
            message("* * * *"),
            "has 4 fields: expected 5 (minute hour day-of-month month day-of-week)"
        );
        assert!(message("0 * * * * *").starts_with("has 6 fields"));
    }

    #[test]
    fn malformed_lists_ranges_and_steps_are_rejected() {
        assert_eq!(message("1,,2 * * * *"), "minute list \"1,,2\" has an empty item");
        assert_eq!(message("1, * * * *"), "minute list \"1,\" has an empty item");
        assert!(message("30-10 * * * *").starts_with("minute range 30-10 is reversed"));
        assert_eq!(message("-5 * * * *"), "minute \"-5\" is missing a number");
        assert_eq!(message("*/0 * * * *"), "minute step 0 is out of range 1-59");
        assert_eq!(message("* */24 * * *"), "hour step 24 is out of range 1-23");
        assert_eq!(message("*/ * * * *"), "minute step in \"*/\" is not a number");
        assert_eq!(message("*/x * * * *"), "minute step in \"*/x\" is not a number");
        assert_eq!(
            message("5/15 * * * *"),
            "minute step 5/15 needs a range: write 5-59/15 or */15"
        );
        assert_eq!(message("1-2-3 * * * *"), "minute \"2-3\" is not a number");
        assert_eq!(message("? * * * *"), "minute \"?\" is not a number");
        assert_eq!(message("+5 * * * *"), "minute \"+5\" is not a number");
    }

    #[test]
    fn names_only_work_in_their_own_field() {
        assert_eq!(
            message("0 0 * * FOO"),
            "day-of-week \"FOO\" is not a number or a name SUN-SAT"
        );
        assert_eq!(
            message("0 0 * SUN *"),
            "month \"SUN\" is not a number or a name JAN-DEC"
        );
        assert_eq!(message("0 0 JAN * *"), "day-of-month \"JAN\" is not a number");
        assert_eq!(
            message("0 0 * * MONDAY"),
            "day-of-week \"MONDAY\" is not a number or a name SUN-SAT"
        );
        assert!(message("0 0 * DEC-JAN *").starts_with("month range DEC-JAN is reversed"));
    }

    #[test]
    fn time_zone_prefixes_are_rejected() {
        for s in [
            "CRON_TZ=UTC 0 0 * * *",
            "TZ=Europe/Berlin 0 0 * * *",
            " TZ=UTC @daily",
        ] {
            assert!(message(s).starts_with("time zone prefix"), "{s}");
        }
    }

    #[test]
    fn unknown_or_decorated_macros_are_rejected() {
        assert!(message("@every 5m").starts_with("unknown macro @every: expected one of @yearly"));
        assert!(message("@Daily").starts_with("unknown macro @Daily"));
        assert!(message("@reboot").starts_with("unknown macro @reboot"));
        assert_eq!(message("@daily 0"), "macro @daily must stand alone");
    }
}
