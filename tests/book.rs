//! Reading the book's Markdown as its tests need it: the code blocks of a language and the
//! command lines of its shell blocks.

/// The bodies of the fenced blocks whose language is one of `langs`, in page order.
pub fn blocks(text: &str, langs: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (line.trim_start().strip_prefix("```"), current.take()) {
            (Some(_), Some(body)) => out.push(body),
            (Some(lang), None) if langs.contains(&lang.trim()) => current = Some(String::new()),
            (Some(_), None) => {}
            (None, Some(mut body)) => {
                body.push_str(line);
                body.push('\n');
                current = Some(body);
            }
            (None, None) => {}
        }
    }
    out
}

/// Whether a fenced block is a shell session (`sh`, `bash`, `console`, `shell`).
pub const SHELL: &[&str] = &["sh", "bash", "console", "shell"];

/// The command lines of a block of shell: continuation lines joined, a `$ ` prompt and a
/// trailing ` # comment` dropped.
pub fn command_lines(block: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        let code = line.split(" # ").next().unwrap_or_default().trim_end();
        match code.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(code);
                let line = std::mem::take(&mut pending);
                let line = line.trim().trim_start_matches("$ ");
                if !line.is_empty() && !line.starts_with('#') {
                    lines.push(line.to_string());
                }
            }
        }
    }
    lines
}

/// Every command line of a page's shell blocks.
pub fn shell_lines(text: &str) -> Vec<String> {
    blocks(text, SHELL)
        .iter()
        .flat_map(|b| command_lines(b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_their_lines() {
        let page = "text\n```sh\ncapstan run \\\n  --plugins p   # where\n# a comment\n$ kubectl get x\n```\n```rust\nfn f() {}\n```\n";
        assert_eq!(blocks(page, &["rust"]), ["fn f() {}\n"]);
        assert_eq!(shell_lines(page), ["capstan run   --plugins p", "kubectl get x"]);
    }
}
