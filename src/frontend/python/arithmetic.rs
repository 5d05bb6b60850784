//! Memory arithmetic: expressions lowered into [`Lin`], the formulas and comparisons recorded,
//! tables of numbers keyed by dtype or optimizer, and unit conversions.

use super::*;
use crate::frontend::fields::{PyField, PyKind};

impl<'s> Walker<'s> {
    /// `{"bf16": 2, "fp32": 4}`: a table when at least two values are numbers.
    pub(super) fn dictionary(&mut self, node: Node, assigned: bool) {
        let mut c = node.walk();
        let mut entries = Vec::new();
        for pair in node.named_children(&mut c) {
            if pair.ty() != "pair" {
                continue;
            }
            let (Some(k), Some(v)) = (pair.field("key"), pair.field("value")) else {
                continue;
            };
            let key = match k.ty() {
                "string" => string_key(self.text(k)),
                "attribute" => self.text(k).to_string(),
                _ => continue,
            };
            if let Some(value) = self.number(v) {
                entries.push(TableEntry {
                    key,
                    value,
                    value_span: v.byte_range(),
                });
            }
        }
        if entries.len() < 2 {
            self.record_columns(node);
            return;
        }
        let name = assigned
            .then(|| node.parent())
            .flatten()
            .filter(|p| p.ty() == "assignment")
            .and_then(|p| p.field("left"))
            .map(|l| self.text(l).to_string());
        self.facts.tables.push(Table {
            name,
            entries,
            arms: false,
            returned: false,
        });
    }

    /// `{"adam": {"states": 2, "fused": True}, "sgd": {"states": 0, ...}}`: records keyed by
    /// name, each numeric field of which is a table of its own (`states`), keyed by the records'
    /// keys.
    fn record_columns(&mut self, node: Node) {
        let mut columns: Vec<(String, Vec<TableEntry>)> = Vec::new();
        let mut c = node.walk();
        for pair in node.named_children(&mut c) {
            let (Some(k), Some(v)) = (pair.field("key"), pair.field("value")) else {
                continue;
            };
            if k.ty() != "string" || v.ty() != "dictionary" {
                continue;
            }
            let key = string_key(self.text(k));
            let mut fields = v.walk();
            for field in v.named_children(&mut fields) {
                let (Some(fk), Some(fv)) = (field.field("key"), field.field("value")) else {
                    continue;
                };
                let Some(value) = (fk.ty() == "string").then(|| self.number(fv)).flatten() else {
                    continue;
                };
                let name = string_key(self.text(fk));
                let entry = TableEntry {
                    key: key.clone(),
                    value,
                    value_span: fv.byte_range(),
                };
                match columns.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, entries)) => entries.push(entry),
                    None => columns.push((name, vec![entry])),
                }
            }
        }
        for (name, entries) in columns {
            if entries.len() >= 2 {
                self.facts.tables.push(Table {
                    name: Some(name),
                    entries,
                    arms: false,
                    returned: false,
                });
            }
        }
    }

    /// A number written as a literal or constant arithmetic (`2`, `0.5`, `4 * 2`, `2**30`).
    pub(super) fn number(&self, node: Node) -> Option<f64> {
        if node.byte_range().len() > 64 {
            return None;
        }
        self.fold(node, 0).filter(|v| v.is_finite())
    }

    fn fold(&self, node: Node, depth: usize) -> Option<f64> {
        if depth > 16 {
            return None;
        }
        match node.ty() {
            "integer" | "float" => parse_number(self.text(node)),
            "parenthesized_expression" => self.fold(node.named_child(0)?, depth + 1),
            "unary_operator" => {
                let v = self.fold(node.field("argument")?, depth + 1)?;
                match node.field("operator").map(|o| self.text(o))? {
                    "-" => Some(-v),
                    "+" => Some(v),
                    _ => None,
                }
            }
            "binary_operator" => {
                let a = self.fold(node.field("left")?, depth + 1)?;
                let b = self.fold(node.field("right")?, depth + 1)?;
                match node.field("operator").map(|o| self.text(o))? {
                    "+" => Some(a + b),
                    "-" => Some(a - b),
                    "*" => Some(a * b),
                    "/" | "//" if b != 0.0 => Some(a / b),
                    "**" => Some(a.powf(b)),
                    "<<" if (0.0..64.0).contains(&b) => Some(a * 2f64.powf(b)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// `nbytes = 2 if dtype == "bf16" else 4` (also returned, and chained in the `else`): one
    /// entry per key of the table the conditionals build for `nbytes` (the arms of `if` chains
    /// are read in `tables.rs`).
    pub(super) fn branch_entry(&mut self, target: &str, right: Node, returned: bool) {
        let mut found: Vec<(String, f64, Range<usize>)> = Vec::new();
        let mut at = unparen(right);
        for _ in 0..8 {
            if at.ty() != "conditional_expression" {
                break;
            }
            let mut c = at.walk();
            let kids: Vec<Node> = at.named_children(&mut c).collect();
            let [then, cond, otherwise] = kids.as_slice() else {
                break;
            };
            let (keys, negated) = self.test_keys(*cond);
            let arm = if negated { *otherwise } else { *then };
            if let Some(value) = self.number(arm) {
                for key in keys {
                    found.push((key, value, arm.byte_range()));
                }
            }
            if negated {
                break;
            }
            at = unparen(*otherwise);
        }
        self.arm_table(target, returned, found);
    }

    /// Entries of the table that the arms of one function build for `target` (a name, or the
    /// function's returns).
    pub(super) fn arm_table(
        &mut self,
        target: &str,
        returned: bool,
        found: Vec<(String, f64, Range<usize>)>,
    ) {
        if found.is_empty() {
            return;
        }
        let key = (self.scope(), target.to_string(), returned);
        let index = match self.branch_tables.get(&key) {
            Some(i) => *i,
            None => {
                self.facts.tables.push(Table {
                    name: Some(target.to_string()),
                    entries: Vec::new(),
                    arms: true,
                    returned,
                });
                let i = self.facts.tables.len() - 1;
                self.branch_tables.insert(key, i);
                i
            }
        };
        if let Some(table) = self.facts.tables.get_mut(index) {
            for (k, value, value_span) in found {
                if table
                    .entries
                    .iter()
                    .any(|e| e.value_span == value_span && e.key == k)
                {
                    continue;
                }
                table.entries.push(TableEntry {
                    key: k,
                    value,
                    value_span,
                });
            }
        }
    }

    /// `weights = n_b * 2  # bf16`: a part of the model's memory whose line names the dtype
    /// multiplies a parameter count by that dtype's bytes; the name it multiplies counts
    /// parameters in this function, and `n_b * 2` is the model's size.
    pub(super) fn note_counts(&mut self, target: &str, right: Node) {
        let part = last_segment(target).to_ascii_lowercase();
        if !matches!(
            part.as_str(),
            "weights" | "params" | "parameters" | "model" | "grads" | "gradients"
        ) {
            return;
        }
        let end = line_end(self.src, right.end_byte());
        let comment = self.src[right.end_byte()..end]
            .split_once('#')
            .map(|(_, c)| c.to_ascii_lowercase())
            .unwrap_or_default();
        let bytes = if ["fp32", "float32"].iter().any(|d| comment.contains(d)) {
            4.0
        } else if ["bf16", "fp16", "float16", "bfloat16", "half"]
            .iter()
            .any(|d| comment.contains(d))
        {
            2.0
        } else {
            return;
        };
        let right = unparen(right);
        if right.ty() != "binary_operator"
            || right.field("operator").map(|o| self.text(o)) != Some("*")
        {
            return;
        }
        let (Some(a), Some(b)) = (right.field("left"), right.field("right")) else {
            return;
        };
        let (count, k) = match (self.number(a), self.number(b)) {
            (None, Some(k)) => (b.prev_sibling().map_or(a, |_| a), k),
            (Some(k), None) => (b, k),
            _ => return,
        };
        // The multiplier is the dtype's size: `n * 2  # bf16`, not `n * 16  # fp32 + Adam`.
        if k != bytes || count.ty() != "identifier" || role_of(self.text(count)) != Role::Unknown {
            return;
        }
        let scope = self.scope();
        self.program
            .name_role(scope, self.text(count), Role::Model, 1.0 / bytes);
    }

    /// The calls a test is made of (`if not fits(w, act, cap):`, `while need(b) and ok(b):`)
    /// are valued, so a helper called only in tests is valued with their arguments. A
    /// comparison values its own sides.
    pub(super) fn value_tested_calls(&mut self, statement: Node) {
        if !self.value_model {
            return;
        }
        // A `for` or an `else` tests nothing.
        let mut test = statement.field("condition");
        let mut pending = Vec::new();
        while let Some(node) = test.take().or_else(|| pending.pop()) {
            match node.ty() {
                "call" => {
                    self.value_of(node, 0);
                }
                "not_operator" => test = node.field("argument"),
                "parenthesized_expression" => test = node.named_child(0),
                "boolean_operator" => {
                    pending.extend(node.field("right"));
                    test = node.field("left");
                }
                _ => {}
            }
        }
    }

    pub(super) fn comparison(&mut self, node: Node) {
        let mut cur = node.walk();
        let kids: Vec<Node> = node.children(&mut cur).collect();
        if kids.len() != 3 || !matches!(self.text(kids[1]), "<" | "<=" | ">" | ">=") {
            return;
        }
        let a = self.value_of(kids[0], 0);
        let b = self.value_of(kids[2], 0);
        let whole = node.byte_range();
        let compare = |other| PendingKind::Compare {
            other,
            whole: whole.clone(),
        };
        self.pend(compare(b), a, kids[0].byte_range());
        self.pend(compare(a), b, kids[2].byte_range());
    }

    // ---- calls and evidence ------------------------------------------------------------------
}
