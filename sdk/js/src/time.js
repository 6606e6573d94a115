// RFC 3339 times as the host sends them (any number of fractional digits, any offset),
// and as Kubernetes writes `metav1.Time`: UTC, whole seconds.

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** The instant `text` names, or undefined when it is not RFC 3339. */
export function parseTime(text) {
  const m = typeof text === 'string' ? RFC3339.exec(text) : null;
  if (!m) return undefined;
  const [, y, mo, d, h, mi, s, frac = '', , sign, oh, om] = m;
  const ms = Number((frac + '000').slice(0, 3));
  let t = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), ms);
  if (sign) t -= (sign === '-' ? -1 : 1) * (Number(oh) * 60 + Number(om)) * 60000;
  const date = new Date(t);
  // Date.UTC rolls 2026-02-31 over into March; RFC 3339 does not.
  if (Number.isNaN(t) || (!sign && date.getUTCDate() !== Number(d))) return undefined;
  return date;
}

/** `date` as `metav1.Time` serializes: `2026-11-24T09:30:00Z`. */
export function formatTime(date) {
  return date.toISOString().replace(/\.\d+Z$/, 'Z');
}
