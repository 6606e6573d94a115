//! Half-open ranges of the shard hash space `[0, 2^64)` and set operations on them: what a
//! replica owns, gains and gives up when the ring changes.

/// 2^64: the exclusive end of the hash space.
pub const SPACE_END: u128 = 1 << 64;

/// A non-empty half-open range `[start, end)` of hashes; `end` may be 2^64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Range {
    start: u64,
    end: u128,
}

impl Range {
    /// The whole hash space, `[0, 2^64)`.
    pub const FULL: Range = Range {
        start: 0,
        end: SPACE_END,
    };

    /// `[start, end)`, or `None` if it is empty or ends past 2^64.
    pub const fn new(start: u64, end: u128) -> Option<Range> {
        // `as` because `u128::from` is not const; widening never truncates.
        if (start as u128) < end && end <= SPACE_END {
            Some(Range { start, end })
        } else {
            None
        }
    }

    /// The first hash in the range.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// One past the last hash in the range (2^64 for a range reaching the top).
    pub fn end(&self) -> u128 {
        self.end
    }

    /// How many hashes the range holds.
    pub fn width(&self) -> u128 {
        self.end - u128::from(self.start)
    }

    /// Whether `hash` lies in the range.
    pub fn contains(&self, hash: u64) -> bool {
        self.start <= hash && u128::from(hash) < self.end
    }

    /// A range from bounds computed in u128 (as `end + 1` at the top needs); `None` if empty.
    pub(crate) fn wide(start: u128, end: u128) -> Option<Range> {
        Range::new(u64::try_from(start).ok()?, end)
    }
}

/// Sorted, with overlapping and touching ranges merged: the canonical form of a set.
pub fn normalize(ranges: &[Range]) -> Vec<Range> {
    let mut sorted = ranges.to_vec();
    sorted.sort();
    let mut out: Vec<Range> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match out.last_mut() {
            Some(last) if u128::from(r.start) <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// How many hashes a set of ranges holds (overlaps counted once).
pub fn width(ranges: &[Range]) -> u128 {
    normalize(ranges).iter().map(Range::width).sum()
}

/// The hashes in `a` but not in `b`, normalized.
pub fn subtract(a: &[Range], b: &[Range]) -> Vec<Range> {
    let b = normalize(b);
    let mut out = Vec::new();
    for r in normalize(a) {
        let mut cur = u128::from(r.start);
        for cut in &b {
            if u128::from(cut.start) < r.end && cut.end > cur {
                out.extend(Range::wide(cur, u128::from(cut.start)));
                cur = cut.end;
            }
        }
        out.extend(Range::wide(cur, r.end));
    }
    out
}

/// The hashes in both `a` and `b`, normalized.
pub fn intersect(a: &[Range], b: &[Range]) -> Vec<Range> {
    let (a, b) = (normalize(a), normalize(b));
    let mut out = Vec::new();
    for x in &a {
        for y in &b {
            let start = u128::from(x.start.max(y.start));
            out.extend(Range::wide(start, x.end.min(y.end)));
        }
    }
    normalize(&out)
}

/// Whether some hash is in both `a` and `b` (what the ring's tests check never happens).
#[cfg(test)]
pub fn overlaps(a: &[Range], b: &[Range]) -> bool {
    a.iter().any(|x| {
        b.iter()
            .any(|y| u128::from(x.start.max(y.start)) < x.end.min(y.end))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u128) -> Range {
        Range::new(start, end).expect("a valid range")
    }

    #[test]
    fn bounds_are_checked_and_half_open() {
        assert_eq!(Range::new(5, 5), None);
        assert_eq!(Range::new(6, 5), None);
        assert_eq!(Range::new(0, SPACE_END + 1), None);
        let top = r(u64::MAX, SPACE_END);
        assert!(top.contains(u64::MAX));
        assert!(!top.contains(u64::MAX - 1));
        assert_eq!(top.width(), 1);
        assert!(r(10, 20).contains(10));
        assert!(!r(10, 20).contains(20));
        assert!(Range::FULL.contains(0) && Range::FULL.contains(u64::MAX));
    }

    #[test]
    fn normalize_sorts_and_merges_touching_and_overlapping() {
        let set = [r(30, 40), r(0, 10), r(10, 15), r(12, 20), r(50, 60)];
        assert_eq!(normalize(&set), vec![r(0, 20), r(30, 40), r(50, 60)]);
        assert_eq!(width(&set), 40);
        assert!(normalize(&[]).is_empty());
    }

    #[test]
    fn subtract_cuts_holes_and_ends() {
        assert_eq!(subtract(&[Range::FULL], &[]), vec![Range::FULL]);
        assert!(subtract(&[], &[Range::FULL]).is_empty());
        assert!(subtract(&[r(10, 20)], &[Range::FULL]).is_empty());
        assert_eq!(
            subtract(&[Range::FULL], &[r(10, 20), r(30, 40)]),
            vec![r(0, 10), r(20, 30), r(40, SPACE_END)]
        );
        assert_eq!(subtract(&[r(10, 20)], &[r(0, 15)]), vec![r(15, 20)]);
        assert_eq!(subtract(&[r(10, 20)], &[r(15, 25)]), vec![r(10, 15)]);
        assert_eq!(subtract(&[r(10, 20)], &[r(20, 25)]), vec![r(10, 20)]);
        assert_eq!(
            subtract(&[r(0, 10), r(20, 30)], &[r(5, 25)]),
            vec![r(0, 5), r(25, 30)]
        );
    }

    #[test]
    fn intersect_and_overlaps_agree() {
        let a = [r(0, 10), r(20, 30), r(u64::MAX - 1, SPACE_END)];
        let b = [r(5, 25), r(u64::MAX, SPACE_END)];
        assert_eq!(
            intersect(&a, &b),
            vec![r(5, 10), r(20, 25), r(u64::MAX, SPACE_END)]
        );
        assert!(overlaps(&a, &b));
        // Touching is not overlapping: the ends are exclusive.
        assert!(intersect(&[r(0, 10)], &[r(10, 20)]).is_empty());
        assert!(!overlaps(&[r(0, 10)], &[r(10, 20)]));
        assert!(!overlaps(&[], &[Range::FULL]));
        assert_eq!(intersect(&[Range::FULL], &a), normalize(&a));
    }
}
