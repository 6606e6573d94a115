//! Names checked as the API server checks them: a child's name and namespace become
//! parts of a URL path, so `x?dryRun=All` or `victim/status` must never reach a request.

use crate::Kind;

/// Check `name` as the API server checks names of `kind`: it becomes part of a URL path.
pub fn object_name(kind: &Kind, name: &str) -> Result<(), String> {
    match (kind.group.as_str(), kind.kind.as_str()) {
        ("", "Namespace") => dns1123_label(name),
        ("", "Service") => dns1035_label(name),
        // RBAC names may hold ':' (system:controller:…); the server checks only that they
        // are a path segment.
        ("rbac.authorization.k8s.io", _) => path_segment(name),
        _ => dns1123_subdomain(name),
    }
}

/// A name as it may be shown in a message: control characters escaped, long names cut.
pub fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(80).flat_map(char::escape_default).collect();
    if s.chars().count() > 80 {
        out.push('…');
    }
    out
}

fn invalid(name: &str, rule: &str) -> String {
    format!("{:?} is not a valid {rule}", printable(name))
}

fn label_ok(label: &str, first: fn(u8) -> bool) -> bool {
    let b = label.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && first(b[0])
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: at most 63 lower-case alphanumerics or '-', alphanumeric at both ends.
pub fn dns1123_label(s: &str) -> Result<(), String> {
    if label_ok(s, lower_alnum) {
        Ok(())
    } else {
        Err(invalid(
            s,
            "RFC 1123 label (at most 63 characters: a-z, 0-9, '-')",
        ))
    }
}

/// RFC 1035 label: an RFC 1123 label that starts with a letter.
fn dns1035_label(s: &str) -> Result<(), String> {
    if label_ok(s, |c| c.is_ascii_lowercase()) {
        Ok(())
    } else {
        Err(invalid(
            s,
            "RFC 1035 label (at most 63 characters: a-z, 0-9, '-', starting with a letter)",
        ))
    }
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated RFC 1123 labels.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if !s.is_empty() && s.len() <= 253 && s.split('.').all(|l| label_ok(l, lower_alnum)) {
        Ok(())
    } else {
        Err(invalid(
            s,
            "RFC 1123 subdomain (at most 253 characters: a-z, 0-9, '-', '.')",
        ))
    }
}

/// A path segment: no '/', '%', '?', '#', whitespace or control characters, not '.' or '..'.
fn path_segment(s: &str) -> Result<(), String> {
    let bad = |c: char| matches!(c, '/' | '%' | '?' | '#') || c.is_whitespace() || c.is_control();
    if !s.is_empty() && s.len() <= 253 && s != "." && s != ".." && !s.contains(bad) {
        Ok(())
    } else {
        Err(invalid(
            s,
            "path segment (no '/', '%', '?', '#', spaces; at most 253 characters)",
        ))
    }
}
