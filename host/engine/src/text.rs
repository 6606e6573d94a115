//! Plugin text as the host repeats it in its own lines (a fault, a retry or fatal
//! message, a settings refusal, a log line): control characters escaped so it can
//! neither forge a log line nor drive a terminal, and a message capped so a plugin
//! cannot make every host line about it as long as it likes.

use std::borrow::Cow;

/// Longest plugin message the host repeats (in a log line, `/readyz`, an error).
pub const MESSAGE_CHARS: usize = 512;

/// Plugin text with control characters escaped (`\n` → `\\n`, ESC → `\\u{1b}`), so
/// it can neither forge a host log line nor drive a terminal.
pub(crate) fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.contains(char::is_control) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .flat_map(|c| {
                let escaped = c.is_control().then(|| c.escape_default());
                escaped
                    .into_iter()
                    .flatten()
                    .chain((!c.is_control()).then_some(c))
            })
            .collect(),
    )
}

/// Plugin text as one line: whitespace collapsed, control characters escaped, at most
/// [`MESSAGE_CHARS`] (then `…`). Only the kept part is ever copied, so a message of
/// megabytes costs what its first line does.
pub(crate) fn one_line(message: &str) -> String {
    let mut words = message.split_whitespace();
    let mut line = String::new();
    let mut chars = 0;
    for word in words.by_ref() {
        let room = MESSAGE_CHARS.saturating_sub(chars + usize::from(chars > 0));
        // Escaping never shortens a character, so one past the room is all that can be
        // kept of this word, or tell it was cut: the rest is never escaped nor copied.
        let kept = word
            .char_indices()
            .nth(room + 1)
            .map_or(word, |(end, _)| &word[..end]);
        let word = escape_controls(kept);
        if room == 0 {
            line.push('…');
            return line;
        }
        if chars > 0 {
            line.push(' ');
            chars += 1;
        }
        let count = word.chars().count();
        if count > room {
            line.extend(word.chars().take(room));
            line.push('…');
            return line;
        }
        line.push_str(&word);
        chars += count;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_plugin_text_are_escaped() {
        assert_eq!(escape_controls("plain ünïcode"), "plain ünïcode");
        let forged = "ok\n2026-01-01T00:00:00Z  INFO capstan: forged\u{1b}[2J\r";
        let escaped = escape_controls(forged);
        assert!(!escaped.contains(char::is_control), "{escaped}");
        assert_eq!(
            escaped,
            "ok\\n2026-01-01T00:00:00Z  INFO capstan: forged\\u{1b}[2J\\r"
        );
    }

    #[test]
    fn a_long_word_of_control_characters_is_escaped_only_as_far_as_it_is_kept() {
        let bells = "\u{7}".repeat(4 << 20);
        let line = one_line(&bells);
        assert_eq!(line.chars().count(), MESSAGE_CHARS + 1, "{line}");
        assert!(line.starts_with("\\u{7}\\u{7}") && line.ends_with('…'));
        // Escaping all of it first would have been some 24 MB of text for 513 characters.
        assert!(line.len() < 4 * MESSAGE_CHARS);
    }

    #[test]
    fn a_message_is_one_line_of_at_most_the_cap() {
        assert_eq!(one_line("  a\n\tb  c "), "a b c");
        assert_eq!(one_line("bell\u{7}here"), "bell\\u{7}here");
        let long = one_line(&"ü".repeat(64 << 10));
        assert_eq!(long.chars().count(), MESSAGE_CHARS + 1, "the cap and an ellipsis");
        assert!(long.ends_with('…'));
        let words = one_line(&"word ".repeat(10_000));
        assert_eq!(words.chars().count(), MESSAGE_CHARS + 1);
        assert_eq!(
            one_line(&"x".repeat(MESSAGE_CHARS)).chars().count(),
            MESSAGE_CHARS
        );
    }
}
