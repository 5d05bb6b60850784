//! A loop whose every iteration is one optimizer step (`for it in range(max_iters):` around a
//! loop over the micro-steps): its bound counts optimizer steps, as a scheduler's length does.

use super::*;
use crate::facts::LOOP_ITERATIONS;

impl Walker<'_> {
    /// `for it in range(max_iters):` around a loop over the micro-steps: `max_iters` counts
    /// optimizer steps. Its name, where the outer loop reads it (`range(stop)` or `range(start,
    /// stop)`).
    pub(super) fn update_count(&self, lp: &AccumLoop) -> Option<Count> {
        let updates = lp.updates.as_deref()?.trim();
        let args = updates.strip_prefix("range(")?.strip_suffix(')')?;
        let parts: Vec<&str> = args.split(',').collect();
        let stop = match parts.as_slice() {
            [stop] | [_, stop] => stop.trim(),
            _ => return None,
        };
        let plain = !stop.is_empty()
            && stop
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
        if !plain {
            return None;
        }
        let at = self.src[..lp.header.start].rfind(updates)?;
        let stop_at = at + "range(".len() + args.rfind(stop)?;
        Some(Count {
            value: stop_at..stop_at + stop.len(),
            scheduler: None,
            call: at..at + updates.len(),
            key: LOOP_ITERATIONS.into(),
            iterations: Some(
                (!lp.factor_value.is_some_and(|v| v <= 1.0))
                    .then(|| Missing::Accumulation(lp.factor.clone(), lp.header.clone())),
            ),
        })
    }
}
