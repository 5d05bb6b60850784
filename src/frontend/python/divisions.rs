//! Divisions of a loss by the accumulation factor: in an expression, in the latest assignment
//! of a name, as a method (`loss.div(n)`), and what counts as the factor.

use super::*;
use crate::frontend::fields::{PyField, PyKind};

impl<'s> Walker<'s> {
    /// The division of a loss by the accumulation factor, in the expression or in the latest
    /// assignment of the name (`loss = loss / n`, `loss /= n`).
    pub(super) fn division_of(&self, node: Node) -> Option<DivisionBy> {
        let node = unparen(node);
        match node.ty() {
            "binary_operator" => {
                let mut op = node.field("operator").map(|o| self.text(o));
                let mut left = node.field("left")?;
                let mut right = node.field("right")?;
                // What removing the division leaves: the text between the loss and the end of
                // the divisor, or, for `(1 / n) * loss`, before the loss.
                let mut division = left.end_byte()..right.end_byte();
                // `loss * (1 / n)` divides by `n` as `loss / n` does.
                if op == Some("*") {
                    if let Some(n) = self.reciprocal_of(right) {
                        (op, right) = (Some("/"), n);
                        division = left.end_byte()..node.end_byte();
                    } else if let Some(n) = self.reciprocal_of(left) {
                        division = node.start_byte()..right.start_byte();
                        (op, left, right) = (Some("/"), right, n);
                    }
                }
                let divisor = self.text(right);
                // `loss * accum / num_items` cancels the framework's division on purpose.
                if op != Some("/")
                    || !self.is_factor(divisor)
                    || self.text(left).to_ascii_lowercase().contains("accum")
                {
                    return None;
                }
                Some((
                    divisor.to_string(),
                    Division {
                        operator_and_divisor: division,
                        statement: None,
                    },
                ))
            }
            "identifier" => {
                let name = self.text(node);
                let mut scope = Some(self.scope());
                while let Some(s) = scope {
                    if let Some(defs) = self.divisions.get(&(s, name.to_string())) {
                        // Only a division that runs whenever this use does counts: one in the
                        // other arm of an `if` does not reach it. `if gas > 1: loss /= gas`
                        // runs exactly when the division matters.
                        let here = self.ctx(node.start_byte()).branches;
                        let reaches = |b: &Branch| {
                            here.contains(b)
                                || self.cond_reads_factor.get(b.cond).copied().unwrap_or(false)
                        };
                        return defs
                            .iter()
                            .rfind(|(at, _, _)| *at < node.start_byte())
                            .filter(|(_, under, _)| under.iter().all(reaches))
                            .and_then(|(_, _, d)| d.clone());
                    }
                    scope = self.scopes.get(s).and_then(|sc| sc.parent);
                }
                None
            }
            // `loss.div(n)`: the same division as a method.
            "call" => {
                let (object, divisor) = self.divide_method(node)?;
                let divisor_text = self.text(divisor);
                if !self.is_factor(divisor_text) {
                    return None;
                }
                Some((
                    divisor_text.to_string(),
                    Division {
                        operator_and_divisor: object.end_byte()..node.end_byte(),
                        statement: None,
                    },
                ))
            }
            _ => None,
        }
    }

    /// `x.div(n)` (also `divide`, `true_divide`), without a rounding mode: the object and the
    /// divisor.
    pub(super) fn divide_method<'t>(&self, call: Node<'t>) -> Option<(Node<'t>, Node<'t>)> {
        let func = call.field("function")?;
        if func.ty() != "attribute"
            || !matches!(
                func.field("attribute").map(|a| self.text(a)),
                Some("div" | "divide" | "true_divide")
            )
        {
            return None;
        }
        // `torch.div(a, b)` takes two arguments and is not read.
        let object = func.field("object")?;
        let args = call.field("arguments")?;
        let mut c = args.walk();
        let kids: Vec<Node> = args
            .named_children(&mut c)
            .filter(|n| n.ty() != "comment")
            .collect();
        match kids.as_slice() {
            [divisor] if divisor.ty() != "keyword_argument" => Some((object, *divisor)),
            _ => None,
        }
    }

    /// Whether an expression, or a name it reads (followed back a few assignments), involves the
    /// accumulation factor: `num_training_steps = len(loader) // accum * epochs`.
    pub(super) fn counts_accumulation(&self, text: &str, depth: usize) -> bool {
        if names_accumulation(text) {
            return true;
        }
        depth < 3
            && text
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .filter(|w| !w.is_empty())
                // `len(loader)` counts the loader's batches, whatever its batch size was made of;
                // `cfg["epochs"]` is one entry, not every setting of the dict `cfg` holds (the
                // entry's key was read with the text).
                .filter(|w| {
                    !text.contains(&format!("len({w})")) && !text.contains(&format!("{w}["))
                })
                .any(|w| {
                    // The arms are read last: they scan the lines between the two texts.
                    self.assigned_text.get(w).is_some_and(|t| {
                        self.counts_accumulation(t, depth + 1) && !self.in_other_arms(text, t)
                    }) || self.divided_in_place_by_factor(w, depth)
                })
    }

    /// Two texts of the source in different arms of one `if`: no run reads the one after the
    /// other (`if args.max_steps > 0: epochs = ... // accum else: total = len(dl) * epochs`).
    pub(super) fn in_other_arms(&self, a: &str, b: &str) -> bool {
        let at = |t: &str| super::batch_model::offset_in(self.src, t);
        matches!((at(a), at(b)), (Some(a), Some(b)) if super::conditions::other_arms(self.src, a, b))
    }

    /// `total //= accum` (or `/=`) somewhere in the file: the name ends up divided by the factor.
    fn divided_in_place_by_factor(&self, name: &str, depth: usize) -> bool {
        let src = self.src;
        ["//=", "/="].iter().any(|op| {
            let pattern = format!("{name} {op}");
            memchr::memmem::find_iter(src.as_bytes(), pattern.as_bytes()).any(|at| {
                let before = src[..at].chars().next_back();
                let divisor_at = at + pattern.len();
                let end = src[divisor_at..]
                    .find('\n')
                    .map_or(src.len(), |e| divisor_at + e);
                let divisor = src[divisor_at..end].split('#').next().unwrap_or("").trim();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
                    && (self.is_factor(divisor) || self.counts_accumulation(divisor, depth + 1))
            })
        })
    }

    /// An expression that is the accumulation factor: it names it, it is what a framework was
    /// told to accumulate over (`Accelerator(gradient_accumulation_steps=k)`), or a name bound
    /// to either, or it asks the engine (`engine.gradient_accumulation_steps()`).
    pub(super) fn is_factor(&self, text: &str) -> bool {
        let text = text.trim();
        // A factor known to be 1 divides nothing.
        let value = parse_number(text).or_else(|| self.module_numbers.get(text).copied());
        if value.is_some_and(|v| v <= 1.0) {
            return false;
        }
        let known = |t: &str| {
            names_accumulation(t)
                || self
                    .factor_exprs
                    .iter()
                    .chain(self.accelerators.iter().flatten())
                    .any(|f| crate::frontend::loops::same_expr(f, t))
        };
        // `self.cfg.ga` after `self.cfg = cfg`: the attribute of what the object holds.
        let through_alias = text.rsplit_once('.').is_some_and(|(object, field)| {
            self.assigned_text
                .get(object)
                .map(|t| t.trim())
                .is_some_and(|t| plain_name(t) && known(&format!("{t}.{field}")))
        });
        known(text)
            || through_alias
            || self
                .assigned_text
                .get(text)
                .is_some_and(|t| known(t.trim()))
    }

    /// Remember whether an assignment to `name` divided it by the accumulation factor.
    pub(super) fn record_division(&mut self, stmt: Node, name: &str, division: Option<DivisionBy>) {
        let scope = self.scope();
        let under = self.ctx(stmt.start_byte()).branches;
        self.divisions
            .entry((scope, name.to_string()))
            .or_default()
            .push((stmt.start_byte(), under, division));
    }
}
