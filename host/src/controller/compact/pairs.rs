//! Labels and annotations as the caches keep them: every key and value in one string,
//! sorted by key. A `BTreeMap<String, String>` with even one entry holds a node with room
//! for eleven, plus two allocations per entry: about 1 KiB for a child's few labels and
//! its applied annotation, kept for as long as the child exists (heaptrack at 3 000
//! parents put the maps' nodes at 4.3 MiB, the largest single part of the caches).

use std::collections::BTreeMap;

use serde::ser::{Serialize, SerializeMap, Serializer};

/// A sorted string-to-string map in two allocations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs {
    /// Keys and values, one after the other: key 0, value 0, key 1, ...
    text: Box<str>,
    /// Where each key and value ends in `text`.
    ends: Box<[usize]>,
}

impl Pairs {
    /// `entries` in any order; of a key given twice the last value stands, as in a map.
    pub fn from_entries(mut entries: Vec<(impl AsRef<str>, impl AsRef<str>)>) -> Pairs {
        // Stable, so equal keys stay in input order and the last one is kept below.
        entries.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut text = String::with_capacity(
            entries
                .iter()
                .map(|(k, v)| k.as_ref().len() + v.as_ref().len())
                .sum(),
        );
        let mut ends: Vec<usize> = Vec::with_capacity(entries.len() * 2);
        for (i, (key, value)) in entries.iter().enumerate() {
            if entries
                .get(i + 1)
                .is_some_and(|next| next.0.as_ref() == key.as_ref())
            {
                continue;
            }
            for part in [key.as_ref(), value.as_ref()] {
                text.push_str(part);
                ends.push(text.len());
            }
        }
        Pairs {
            text: text.into(),
            ends: ends.into(),
        }
    }

    /// The entries as a map again.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Every entry, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.len()).map(|i| (self.part(2 * i), self.part(2 * i + 1)))
    }

    /// The number of entries.
    fn len(&self) -> usize {
        self.ends.len() / 2
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = (low + high) / 2;
            match self.part(2 * mid).cmp(key) {
                std::cmp::Ordering::Equal => return Some(self.part(2 * mid + 1)),
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
            }
        }
        None
    }

    fn part(&self, i: usize) -> &str {
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        &self.text[start..self.ends[i]]
    }
}

impl capstan_contract::Labels for Pairs {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

/// As the map it holds.
impl Serialize for Pairs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_back_in_order_and_are_found_by_key() {
        let map = BTreeMap::from(
            [
                ("b", "2"),
                ("a", ""),
                ("c.example/x", "ü \"q\""),
                ("", "empty key"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let pairs = Pairs::from_entries(map.clone().into_iter().collect());
        assert_eq!(pairs.to_map(), map);
        assert_eq!(pairs.len(), 4);
        for (key, value) in &map {
            assert_eq!(pairs.get(key), Some(value.as_str()), "{key}");
        }
        assert_eq!(pairs.get("d"), None);
        assert_eq!(pairs.get("aa"), None);
        assert_eq!(
            serde_json::to_string(&pairs).expect("serializes"),
            serde_json::to_string(&map).expect("serializes")
        );
        let none = Pairs::from_entries(Vec::<(String, String)>::new());
        assert!(none.len() == 0 && none.get("").is_none());
        assert_eq!(serde_json::to_string(&none).expect("serializes"), "{}");
        // Unsorted, a key twice: sorted, the last value stands.
        let twice = Pairs::from_entries(vec![("b", "1"), ("a", "x"), ("b", "2")]);
        assert_eq!(twice.iter().collect::<Vec<_>>(), [("a", "x"), ("b", "2")]);
    }
}
