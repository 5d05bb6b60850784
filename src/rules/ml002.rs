//! ML002: a key written twice in one mapping of a JSON or YAML config. `json.load` and PyYAML
//! keep the last value, so the run uses it and the earlier one is dead text that reads as a
//! setting (DeepSpeed refuses the file only when it opens the path itself).

use super::{Checker, Rule};
use crate::diagnostic::Diagnostic;

pub struct RepeatedKey;

impl Rule for RepeatedKey {
    fn code(&self) -> &'static str {
        "ML002"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let Some(doc) = &cx.facts.config else {
            return;
        };
        for r in &doc.repeated {
            let again = cx.file.position(r.kept.start).row;
            out.push(
                Diagnostic::new(
                    "ML002",
                    r.shadowed.clone(),
                    format!(
                        "`{}` is written again at line {again} of the same mapping: this value is \
                         discarded (json.load and PyYAML keep the last one)",
                        r.name
                    ),
                )
                .with_help("keep one of the two keys, with the value the run should use"),
            );
        }
    }
}
