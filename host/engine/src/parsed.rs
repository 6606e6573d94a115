//! What a response's JSON costs the host once parsed, told before it is parsed, and held
//! against the plugin's memory total for as long as the parsed response lives.
//!
//! The text of a response is bounded (`responseBytes`), but the trees the host parses it
//! into are not the text's size: a `serde_json::Value` is 32 bytes, and every object is a
//! B-tree whose smallest node is ~630 bytes, so 4 MiB of `[{"a":0},…]` becomes ~350 MiB
//! of host memory. A first pass over the text adds up what the trees will take (no tree is
//! built); the sum is taken from the plugin's memory total (and, above its floor, from the
//! host's budget) like the linear memory of its instances, and given back when the
//! response is dropped. A response whose trees do not fit is a fault of the call, before
//! any tree is built.

use std::fmt;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::Fault;
use super::memory::{Denied, PluginMemory};

/// Bytes of one `serde_json::Value`, held in its parent's slot (or alone, for a root).
const VALUE: usize = 32;
/// What the allocator adds to each heap block, at least.
const BLOCK: usize = 16;
/// One B-tree node of a `Map<String, Value>`: 11 keys, 11 values, parent link and lengths
/// (leaves; internal nodes add 12 edges, counted in [`NODE_FILL`]).
const NODE: usize = 632 + BLOCK;
/// Entries per node the size is counted at: a B-tree node holds at least 5 of its 11
/// outside the root, so this bounds the nodes from above.
const NODE_FILL: usize = 5;

/// Host bytes the parsed tree of `text` (a JSON document) takes beyond the text itself,
/// counted from above; an error for text that is not JSON (parsing it would fail too).
pub(crate) fn tree_bytes(text: &str) -> Result<usize, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let size = Size.deserialize(&mut de)?;
    de.end()?;
    Ok(VALUE + size)
}

fn string(len: usize) -> usize {
    if len == 0 { 0 } else { len + BLOCK }
}

/// A container's heap: `Vec` grows by doubling (serde_json is told no length), a map by
/// nodes.
fn array(len: usize) -> usize {
    match len {
        0 => 0,
        n => VALUE * n.next_power_of_two().max(4) + BLOCK,
    }
}

fn object(len: usize) -> usize {
    match len {
        0 => 0,
        n => NODE * n.div_ceil(NODE_FILL),
    }
}

/// The heap below one JSON value.
struct Size;

impl<'de> DeserializeSeed<'de> for Size {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(Size)
    }
}

impl<'de> Visitor<'de> for Size {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<usize, E> {
        Ok(0)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<usize, E> {
        Ok(0)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<usize, E> {
        Ok(0)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<usize, E> {
        Ok(0)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<usize, E> {
        Ok(string(s.len()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<usize, E> {
        Ok(0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let (mut len, mut below) = (0usize, 0usize);
        while let Some(size) = seq.next_element_seed(Size)? {
            len += 1;
            below += size;
        }
        Ok(array(len) + below)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let (mut len, mut below) = (0usize, 0usize);
        while let Some(key) = map.next_key_seed(Size)? {
            len += 1;
            below += key + map.next_value_seed(Size)?;
        }
        Ok(object(len) + below)
    }
}

/// Host memory a parsed response holds, taken from its plugin's memory total; given back
/// when the last copy of the response is dropped.
#[derive(Clone, Default)]
pub struct Held(Option<Arc<Charge>>);

struct Charge {
    memory: Arc<PluginMemory>,
    bytes: usize,
}

impl Held {
    /// Take `bytes` from `memory` for the parsed response, or the fault of a call that
    /// needed more than its plugin had left.
    pub(crate) fn take(memory: &Arc<PluginMemory>, bytes: usize) -> Result<Held, Fault> {
        memory.try_grow(bytes).map_err(|denied| match denied {
            Denied::Total => Fault::PluginMemory(memory.limit()),
            Denied::Budget => Fault::HostMemory(memory.floor()),
        })?;
        let memory = memory.clone();
        Ok(Held(Some(Arc::new(Charge { memory, bytes }))))
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |c| c.bytes)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        // Not a measure of what an instance needs: the plugin's floor stays where it is.
        self.memory.release(self.bytes, true);
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Held({} bytes)", self.bytes())
    }
}

/// Responses are equal by what they say, not by what they hold.
impl PartialEq for Held {
    fn eq(&self, _: &Held) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the parsed tree really takes, by the same model, for comparison.
    fn parsed(text: &str) -> serde_json::Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn tiny_values_cost_far_more_than_their_text() {
        let objects = format!("[{}]", vec![r#"{"a":0}"#; 100_000].join(","));
        let arrays = format!("[{}]", vec!["[]"; 100_000].join(","));
        let (o, a) = (tree_bytes(&objects).unwrap(), tree_bytes(&arrays).unwrap());
        // A one-key object: a node of ~650 bytes and its key, per 8 bytes of text.
        assert!(o > 80 * objects.len(), "{o} for {} bytes", objects.len());
        // An empty array is its 32-byte slot, per 3 bytes of text.
        assert!(a > 10 * arrays.len(), "{a} for {} bytes", arrays.len());
        parsed(&objects);
    }

    #[test]
    fn an_ordinary_child_costs_a_few_kilobytes() {
        let job = r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"hello","labels":{"a":"b"}},"spec":{"template":{"spec":{"containers":[{"name":"echo","image":"busybox","command":["echo","hi"]}],"restartPolicy":"Never"}}}}"#;
        let size = tree_bytes(job).unwrap();
        assert!((1_000..16_000).contains(&size), "{size}");
    }

    #[test]
    fn text_that_is_not_json_is_an_error() {
        assert!(tree_bytes("[1, 2").is_err());
        assert!(tree_bytes("{} trailing").is_err());
    }

    #[test]
    fn a_charge_is_taken_from_the_total_and_given_back_with_the_last_copy() {
        let memory = PluginMemory::new(1000, None);
        let held = Held::take(&memory, 600).unwrap();
        assert_eq!(Held::take(&memory, 600).unwrap_err(), Fault::PluginMemory(1000));
        let copy = held.clone();
        drop(held);
        assert!(Held::take(&memory, 600).is_err(), "a copy still holds it");
        drop(copy);
        assert_eq!(Held::take(&memory, 600).unwrap().bytes(), 600);
    }
}
