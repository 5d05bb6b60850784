//! Which models the file's optimizers train: a `zero_grad()` of a model no optimizer steps (a
//! frozen teacher, a reference copy) clears gradients nothing accumulates.

use super::*;

impl<'s> Walker<'s> {
    /// An optimizer's construction: the models whose parameters it is handed
    /// (`AdamW(student.parameters())`, groups of `model.head.parameters()`, a name holding
    /// them). Anything else it is handed leaves the trained models unknown.
    pub(super) fn note_optimized(&mut self, ctor: Node) {
        let Some(args) = ctor.field("arguments") else {
            return;
        };
        let mut c = args.walk();
        let params = args.named_children(&mut c).find(|a| match a.ty() {
            "keyword_argument" => a.field("name").is_some_and(|n| self.text(n) == "params"),
            "comment" => false,
            _ => true,
        });
        let Some(params) = params.and_then(|p| p.field("value").or(Some(p))) else {
            self.optimized_unknown = true;
            return;
        };
        let text = self.text(params);
        let text = match self.assigned_text.get(text.trim()) {
            Some(held) if !text.contains(".parameters(") => *held,
            _ => text,
        };
        let roots = parameter_owners(text);
        if roots.is_empty() {
            self.optimized_unknown = true;
        }
        // `g_opt = Adam(gen.parameters())`: a `gen.zero_grad()` clears what `g_opt` steps.
        let bound = ctor
            .parent()
            .filter(|a| a.ty() == "assignment")
            .and_then(|a| a.field("left"))
            .filter(|l| matches!(l.ty(), "identifier" | "attribute"));
        if let Some(name) = bound {
            let name = self.text(name).to_string();
            for root in &roots {
                self.optimizer_models.push((name.clone(), root.clone()));
            }
        }
        for root in roots {
            if !self.optimized.contains(&root) {
                self.optimized.push(root);
            }
        }
    }

    /// A model no optimizer of the file trains: none is handed its parameters, under its name
    /// or one bound to it (`ddp = DDP(net)`; a `deepcopy` is another model). A name a function
    /// is handed may be a trained model under another name, unless the file freezes it (in
    /// eval mode and never back in training mode, or its gradients turned off).
    pub(super) fn untrained(&self, receiver: &str) -> bool {
        if self.optimized.is_empty() || self.optimized_unknown {
            return false;
        }
        let model = root_of(receiver);
        let aliased = |a: &str, b: &str| {
            self.assigned_text.get(a).is_some_and(|held| {
                let held = held.trim_start();
                !(held.starts_with("copy.deepcopy(") || held.starts_with("deepcopy("))
                    && contains_word(held, b)
            })
        };
        let trained = self
            .optimized
            .iter()
            .any(|o| *o == model || aliased(&model, o) || aliased(o, &model));
        if trained {
            return false;
        }
        let written = |tail: &str| {
            let needle = format!("{model}.{tail}");
            self.src.match_indices(&needle).any(|(at, _)| {
                let before = self.src[..at].chars().next_back();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            })
        };
        let frozen = (written("eval()") && !written("train(")) || written("requires_grad_(False)");
        frozen || !self.scopes.iter().any(|s| s.params.contains(&model))
    }
}

/// The models whose parameters a text hands over: `x` of each `x.parameters(` or
/// `x.named_parameters(`, by its root (`model` for `model.head`, `self.net` for `self.net.fc`).
fn parameter_owners(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("parameters(") {
        let before = text[..at].strip_suffix("named_").unwrap_or(&text[..at]);
        let Some(before) = before.strip_suffix('.') else {
            continue;
        };
        let start = before
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .map_or(0, |i| i + 1);
        let owner = &before[start..];
        if owner.starts_with(|c: char| c.is_alphabetic() || c == '_') {
            let root = root_of(owner);
            if !out.contains(&root) {
                out.push(root);
            }
        }
    }
    out
}

/// The object an expression names: its first name, or `self.x` for an attribute of `self`.
fn root_of(expr: &str) -> String {
    let mut parts = expr.trim().split('.');
    let first = parts.next().unwrap_or("");
    match (first, parts.next()) {
        ("self", Some(attr)) => format!("self.{attr}"),
        _ => first.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::parameter_owners;

    #[test]
    fn the_models_an_optimizer_is_handed_are_read_by_their_root() {
        assert_eq!(parameter_owners("student.parameters()"), ["student"]);
        assert_eq!(
            parameter_owners(
                "[{'params': net.head.parameters()}, {'params': self.enc.named_parameters()}]"
            ),
            ["net", "self.enc"]
        );
        assert!(parameter_owners("groups").is_empty());
        assert!(parameter_owners("get_parameters(model)").is_empty());
    }
}
