//! Imports: what each name of the file was imported as, and the library a name comes from.

use super::*;

impl<'s> Walker<'s> {
    /// `import a.b as m`, `from a.b import f as g`, `from . import losses`.
    pub(super) fn import(&mut self, node: Node) {
        let from = node.ty() == "import_from_statement";
        let module = if from {
            match node.field("module_name") {
                Some(m) => self.text(m).to_string(),
                None => return,
            }
        } else {
            String::new()
        };
        let mut c = node.walk();
        for name in node.children_by_field_name("name", &mut c) {
            let (path, alias) = match name.ty() {
                "aliased_import" => (
                    name.field("name").map(|n| self.text(n)),
                    name.field("alias").map(|n| self.text(n)),
                ),
                _ => (Some(self.text(name)), None),
            };
            let Some(path) = path else {
                continue;
            };
            // `from peft import ...`, `import peft`: adapters in the run.
            if [module.as_str(), path]
                .iter()
                .any(|m| m.split('.').next() == Some("peft"))
            {
                self.facts.evidence.lora.push(node.byte_range());
            }
            let (key, value) = if from {
                (
                    alias.unwrap_or(path).to_string(),
                    (module.clone(), Some(path.to_string())),
                )
            } else {
                // `import a.b` binds `a.b` as written; `import a.b as m` binds `m`.
                (alias.unwrap_or(path).to_string(), (path.to_string(), None))
            };
            self.imports.insert(key, value);
        }
    }

    /// A base class list that names transformers' or TRL's trainer (`Trainer`,
    /// `transformers.Trainer`, `SFTTrainer`), not a project's own (`BaseTrainer`, a `Trainer`
    /// imported from the project).
    pub(super) fn hf_trainer_base(&self, bases: &str) -> bool {
        bases
            .trim_matches(['(', ')'])
            .split(',')
            .map(|b| b.trim())
            .any(|b| {
                let last = last_segment(b);
                let known = matches!(
                    last,
                    "Trainer"
                        | "Seq2SeqTrainer"
                        | "SFTTrainer"
                        | "DPOTrainer"
                        | "GRPOTrainer"
                        | "RewardTrainer"
                        | "PPOTrainer"
                        | "ORPOTrainer"
                        | "KTOTrainer"
                );
                // A bare name imported from nowhere is taken for the library's (a notebook).
                let first = b.split('.').next().unwrap_or(b);
                let from_library = match self.imports.contains_key(first) {
                    true => matches!(self.library_of(b), "transformers" | "trl"),
                    false => !b.contains('.') || first == "transformers" || first == "trl",
                };
                known && from_library
            })
    }

    /// The library a called name comes from, by the file's imports (`transformers` for
    /// `get_scheduler` after `from transformers import get_scheduler`, or for
    /// `transformers.get_scheduler`); empty when unknown. `transformers.get_scheduler` and
    /// diffusers' take their lengths at different places; a project's
    /// own `Trainer` is not transformers'.
    pub(super) fn library_of<'a>(&'a self, callee: &'a str) -> &'a str {
        let module = match callee.split_once('.') {
            Some((first, _)) => self.imports.get(first).map_or(first, |(module, _)| module),
            None => self.imports.get(callee).map_or("", |(module, _)| module),
        };
        module.split('.').next().unwrap_or("")
    }
}
