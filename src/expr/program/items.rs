//! Entries of the values valuing builds: a dict's key, a sequence's index, a key set after the
//! dict is built. Out of [`Valuer::compute`], whose frame every level of a nested value pays for.

use super::*;

impl Valuer<'_, '_> {
    /// The entry `key` of a table's value. Out of [`Valuer::compute`], whose frame every level
    /// of a nested value pays for.
    #[inline(never)]
    pub(super) fn item(&self, base: Value, key: &Key, text: &str, span: Range<usize>) -> Value {
        match (base, key) {
            (Value::Bundle(entries), Key::Str(k)) => entries
                .into_iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v)
                .unwrap_or_else(|| Value::Scalar(opaque(text, span))),
            // `cfg["gpu_memory_gb"]` of a config read at run time: the key names the
            // value, as an attribute's name does (`args.gpu_memory_gb`).
            (Value::Scalar(base), Key::Str(k)) if names_a_container(&base) => {
                Value::Scalar(Lin::symbol(text, span).with_role(item_role(&base, k)))
            }
            (Value::Seq(items), Key::Index(i)) => {
                let n = items.len() as i64;
                let at = if *i < 0 { n + i } else { *i };
                usize::try_from(at)
                    .ok()
                    .and_then(|at| items.into_iter().nth(at))
                    .unwrap_or_else(|| Value::Scalar(opaque(text, span)))
            }
            _ => Value::Scalar(opaque(text, span)),
        }
    }

    /// `table[key]` where the key is a value: its entry when the key is a known string.
    #[inline(never)]
    pub(super) fn item_at(
        &self,
        base: Id,
        key: Id,
        frame: Option<&Frame>,
        text: &str,
        span: Range<usize>,
    ) -> Value {
        match self.value(key, frame) {
            Value::Text(k, _) => self.item(self.value(base, frame), &Key::Str(&k), text, span),
            // A key known only at run time (`COUNTS[cfg["model"]]`) picks one entry: of a table
            // of models' parameter counts, a parameter count whichever it picks.
            _ => match self.value(base, frame) {
                Value::Bundle(entries) if counts_by_model(&entries) => {
                    Value::Scalar(Lin::derived(text, span, Role::ParamCount))
                }
                _ => Value::Scalar(opaque(text, span)),
            },
        }
    }

    /// `base` with `key` set to `v`. Out of [`Valuer::compute`], whose frame every level of a
    /// nested value pays for.
    #[inline(never)]
    pub(super) fn set(
        &self,
        base: Id,
        key: &str,
        v: Id,
        frame: Option<&Frame>,
        text: &str,
        span: Range<usize>,
    ) -> Value {
        match self.value(base, frame) {
            Value::Bundle(mut entries) => {
                let value = match self.value(v, frame).held() {
                    Value::Scalar(l) => Value::Scalar(l.through(part_of(key))),
                    other => other,
                };
                entries.retain(|(k, _)| k != key);
                entries.push((key.to_string(), value));
                Value::Bundle(entries)
            }
            _ => Value::Scalar(opaque(text, span)),
        }
    }
}

/// A table from models' names to their parameter counts: every key names a model with its size
/// (`"meta-llama/Meta-Llama-3-8B"`) and every value is a count near that size (within 2x).
fn counts_by_model(entries: &[(String, Value)]) -> bool {
    !entries.is_empty()
        && entries.iter().all(|(key, value)| {
            let count = match value {
                Value::Scalar(l) if l.is_constant() => l.constant,
                _ => return false,
            };
            params_from_name(key).is_some_and(|named| (0.5..=2.0).contains(&(count / named)))
        })
}
