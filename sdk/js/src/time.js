// RFC 3339 times as the host sends them (any number of fractional digits, any offset),
// and as Kubernetes writes `metav1.Time`: UTC, whole seconds.

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** The instant `text` names, or undefined when it is not RFC 3339. */
export function parseTime(text) {
  const m = typeof text === 'string' ? RFC3339.exec(text) : null;
  if (!m) return undefined;
  // Indexed, not destructured: in the component's interpreter an array pattern runs the
  // iterator protocol, a dozen calls per time.
  const d = Number(m[3]);
  const frac = m[7];
  const ms = frac === undefined ? 0 : Number((frac + '000').slice(0, 3));
  let t = Date.UTC(Number(m[1]), Number(m[2]) - 1, d, Number(m[4]), Number(m[5]), Number(m[6]), ms);
  const sign = m[9];
  if (sign) t -= (sign === '-' ? -1 : 1) * (Number(m[10]) * 60 + Number(m[11])) * 60000;
  const date = new Date(t);
  // Date.UTC rolls 2026-02-31 over into March; RFC 3339 does not.
  if (Number.isNaN(t) || (!sign && date.getUTCDate() !== d)) return undefined;
  return date;
}

/** `date` as `metav1.Time` serializes: `2026-11-24T09:30:00Z`. */
export function formatTime(date) {
  // toISOString always ends in `.sssZ`.
  const iso = date.toISOString();
  return `${iso.slice(0, iso.length - 5)}Z`;
}
