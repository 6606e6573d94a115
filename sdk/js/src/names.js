// Names checked as the host checks them (capstan-contract's names.rs), with the same
// messages, so a plugin can refuse a bad name in its spec before asking the host for it.

/** Rust's `{:?}` of a string: quoted, with `\`, `"` and control characters escaped. */
export function debugString(s) {
  let out = '"';
  for (const ch of String(s)) {
    const c = ch.codePointAt(0);
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (c === 0) out += '\\0';
    else if (c < 0x20 || (c >= 0x7f && c < 0xa0)) out += `\\u{${c.toString(16)}}`;
    else out += ch;
  }
  return `${out}"`;
}

/** A name as the host shows it in a message: escaped to ASCII, cut after 80 characters. */
export function printable(s) {
  const chars = [...String(s)];
  let out = '';
  for (const ch of chars.slice(0, 80)) {
    const c = ch.codePointAt(0);
    if (ch === '\t') out += '\\t';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\\' || ch === "'" || ch === '"') out += `\\${ch}`;
    else if (c >= 0x20 && c <= 0x7e) out += ch;
    else out += `\\u{${c.toString(16)}}`;
  }
  return chars.length > 80 ? `${out}…` : out;
}

function labelOk(label, first) {
  return (
    label.length > 0 &&
    label.length <= 63 &&
    first.test(label[0]) &&
    /[a-z0-9]/.test(label[label.length - 1]) &&
    /^[a-z0-9-]*$/.test(label)
  );
}

function invalid(name, rule) {
  return `${debugString(printable(name))} is not a valid ${rule}`;
}

/** RFC 1123 subdomain (most object names): undefined when valid, else why not. */
export function dns1123Subdomain(s) {
  const bytes = new TextEncoder().encode(s).length;
  if (s !== '' && bytes <= 253 && s.split('.').every((l) => labelOk(l, /[a-z0-9]/))) return undefined;
  return invalid(s, "RFC 1123 subdomain (at most 253 characters: a-z, 0-9, '-', '.')");
}

/** RFC 1123 label (namespaces): undefined when valid, else why not. */
export function dns1123Label(s) {
  if (labelOk(s, /[a-z0-9]/)) return undefined;
  return invalid(s, "RFC 1123 label (at most 63 characters: a-z, 0-9, '-')");
}
