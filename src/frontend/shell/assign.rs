//! Variables: assignments lowered into the shared expression form (`x=$(( ))`, `let`, `$(expr
//! ...)`, numbers), and what each variable holds as text, for expanding command words later.

use super::arith;
use super::expand::{self, Mode, RChar};
use super::flow::Status;
use super::Walker;
use crate::expr::{role_of, Lin};
use crate::facts::{Formula, FormulaKind, Topics};
use crate::frontend::fields::ShField;
use crate::frontend::{flag_evidence, parse_number, MAX_EXPR_DEPTH};
use std::ops::Range;
use tree_sitter::Node;

impl<'s> Walker<'s> {
    pub(super) fn assignment(&mut self, node: Node) {
        let (Some(name), Some(value)) = (node.field("name"), node.field("value")) else {
            return;
        };
        let target = self.text(name).to_string();
        let value_text = self.text(value);
        flag_evidence(
            &target,
            value_text,
            node.byte_range(),
            &mut self.facts.evidence,
        );
        let literal = value_text.trim_matches(['"', '\'']);
        let status = self.text_binding(node, &target, value);
        let lin = match value.kind() {
            "arithmetic_expansion" => match value.named_child(0) {
                Some(expr) => {
                    let lin = self.lower(expr, 0);
                    self.record(
                        FormulaKind::Assign {
                            target: target.clone(),
                            role: role_of(&target),
                        },
                        lin.clone(),
                        expr.byte_range(),
                    );
                    lin
                }
                None => return,
            },
            "number" => match parse_number(value_text) {
                Some(v) => {
                    let lin = Lin::constant(v, Some(value.byte_range()));
                    if status == Status::Live {
                        self.facts.note_constant(&target, &lin, value.byte_range());
                    }
                    lin
                }
                None => return,
            },
            "simple_expansion" | "expansion" => self.variable(value),
            "command_substitution" => match self.expr_command(value) {
                Some(lin) => {
                    self.record(
                        FormulaKind::Assign {
                            target: target.clone(),
                            role: role_of(&target),
                        },
                        lin.clone(),
                        value.byte_range(),
                    );
                    lin
                }
                None => {
                    self.unbind(&target);
                    return;
                }
            },
            "string" | "word" | "raw_string" => match parse_number(literal) {
                Some(v) => {
                    if status == Status::Live {
                        let lin = Lin::constant(v, None);
                        self.facts.note_constant(&target, &lin, value.byte_range());
                    }
                    Lin::constant(v, None)
                }
                None => {
                    self.unbind(&target);
                    return;
                }
            },
            _ => {
                self.unbind(&target);
                return;
            }
        };
        self.bind(&target, lin);
    }

    fn bind(&mut self, name: &str, lin: Lin) {
        let key = (self.scope(), name.to_string());
        if lin.is_linear() {
            self.env.insert(key, lin);
        } else {
            self.env.remove(&key);
        }
    }

    fn unbind(&mut self, name: &str) {
        self.env.remove(&(self.scope(), name.to_string()));
    }

    pub(super) fn record(&mut self, kind: FormulaKind, lin: Lin, span: Range<usize>) {
        if lin.is_sized() {
            self.facts.formulas.push(Formula {
                kind,
                lin,
                span,
                inference: false,
                scope: 0,
                guard: Topics::default(),
                feeds: false,
                stages: None,
            });
        }
    }

    pub(super) fn lower(&self, node: Node, depth: usize) -> Lin {
        let span = node.byte_range();
        if depth > MAX_EXPR_DEPTH {
            return Lin::opaque(self.text(node), span, &[]);
        }
        match node.kind() {
            "number" => match parse_number(self.text(node)) {
                Some(v) => Lin::constant(v, Some(span)),
                None => Lin::opaque(self.text(node), span, &[]),
            },
            "parenthesized_expression" => match node.named_child(0) {
                Some(inner) => self.lower(inner, depth + 1),
                None => Lin::opaque("()", span, &[]),
            },
            "variable_name" | "simple_expansion" | "expansion" => self.variable(node),
            "unary_expression" => {
                let inner = node
                    .named_child(0)
                    .map(|c| self.lower(c, depth + 1))
                    .unwrap_or_default();
                if self.text(node).starts_with('-') {
                    inner.negated()
                } else {
                    inner
                }
            }
            "binary_expression" => {
                let (Some(l), Some(r), Some(op)) = (
                    node.field("left"),
                    node.field("right"),
                    node.field("operator"),
                ) else {
                    return Lin::opaque(self.text(node), span, &[]);
                };
                let a = self.lower(l, depth + 1);
                let b = self.lower(r, depth + 1);
                Lin::binary(self.text(op), a, b, self.text(node), span)
            }
            _ => Lin::opaque(self.text(node), span, &[]),
        }
    }

    /// `let "x = a - b"` (each argument one assignment): arithmetic like `$(( ))`.
    pub(super) fn let_command(&mut self, node: Node) {
        let mut c = node.walk();
        let args: Vec<Node> = node.children_by_field_name("argument", &mut c).collect();
        for a in args {
            let text = self.text(a);
            let (inner, base) = match a.kind() {
                "string" | "raw_string" if text.len() >= 2 => {
                    (&text[1..text.len() - 1], a.start_byte() + 1)
                }
                "word" => (text, a.start_byte()),
                _ => continue,
            };
            let Some(eq) = inner.find('=') else { continue };
            let target = inner[..eq].trim();
            let compound = inner[eq + 1..].starts_with('=')
                || target.ends_with(['+', '-', '*', '/', '%', '!', '<', '>']);
            if compound
                || target.is_empty()
                || !target
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            {
                continue;
            }
            let expr = &inner[eq + 1..];
            let lin = arith::tokenize(expr, base + eq + 1)
                .and_then(|toks| arith::lower(&toks, self.src, &|n, r| self.named(n, r)));
            let Some(lin) = lin else {
                self.unbind(target);
                continue;
            };
            let lead = expr.len() - expr.trim_start().len();
            let span = base + eq + 1 + lead..base + eq + 1 + expr.trim_end().len();
            self.record(
                FormulaKind::Assign {
                    target: target.to_string(),
                    role: role_of(target),
                },
                lin.clone(),
                span,
            );
            self.bind(target, lin);
        }
    }

    /// `$(expr $a - $b \* 2)`: the words of an `expr` command as arithmetic.
    fn expr_command(&self, node: Node) -> Option<Lin> {
        let cmd = node.named_child(0).filter(|c| c.kind() == "command")?;
        if self.text(cmd.field("name")?) != "expr" {
            return None;
        }
        let mut c = cmd.walk();
        let mut toks = Vec::new();
        for a in cmd.children_by_field_name("argument", &mut c) {
            let text = self.text(a);
            // `\*` and `'*'` keep the shell from globbing.
            let trimmed = text.trim_start_matches('\\').trim_matches(['"', '\'']);
            let offset = text.find(trimmed).unwrap_or(0);
            toks.extend(arith::tokenize(trimmed, a.start_byte() + offset)?);
        }
        arith::lower(&toks, self.src, &|n, r| self.named(n, r))
    }

    /// A variable by name: its arithmetic value when assigned earlier, else a symbol.
    fn named(&self, name: &str, span: Range<usize>) -> Lin {
        let value = self
            .env
            .get(&(self.scope(), name.to_string()))
            .or_else(|| self.env.get(&(0, name.to_string())));
        Lin::read(name, span, value)
    }

    /// `x`, `$x` or `${x}`: its arithmetic value when assigned earlier, else a symbol.
    fn variable(&self, node: Node) -> Lin {
        let name = self
            .text(node)
            .trim_start_matches('$')
            .trim_start_matches('{')
            .trim_end_matches('}');
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Lin::opaque(self.text(node), node.byte_range(), &[]);
        }
        self.named(name, node.byte_range())
    }

    /// Record what a variable holds as text (for command words), unless the assignment never runs.
    fn text_binding(&mut self, node: Node, target: &str, value: Node) -> Status {
        // `VAR=x cmd` sets the variable for that command only.
        if self.parent_kind() == Some("command") {
            return Status::Maybe;
        }
        let status = self.status(node);
        if status == Status::Dead {
            return status;
        }
        let append = self
            .src
            .get(node.start_byte()..value.start_byte())
            .is_some_and(|t| t.ends_with("+="));
        let mut chars: Vec<RChar> = if value.kind() == "array" {
            expand::unknown_chars(self.text(value), value.byte_range())
        } else {
            self.vars
                .expand_source(self.text(value), value.start_byte(), Mode::Assign)
                .into_iter()
                .flatten()
                .collect()
        };
        if append {
            let mut old = self
                .vars
                .vars
                .get(target)
                .map(|v| v.chars.clone())
                .unwrap_or_default();
            old.append(&mut chars);
            chars = old;
        }
        match status {
            Status::Live => self.vars.bind(target, chars, node.byte_range(), false),
            _ => self.vars.bind_maybe(target, chars, node.byte_range()),
        }
        status
    }

    /// `for x in one; do`: a loop over one word binds it; over several, `x` has no single value.
    pub(super) fn for_variable(&mut self, node: Node) {
        let Some(var) = node.field("variable") else {
            return;
        };
        let name = self.text(var).to_string();
        let mut c = node.walk();
        let values: Vec<Node> = node.children_by_field_name("value", &mut c).collect();
        let status = self.status(node);
        if status == Status::Dead {
            return;
        }
        match values.as_slice() {
            [one] if status == Status::Live => {
                let chars: Vec<RChar> = self
                    .vars
                    .expand_source(self.text(*one), one.start_byte(), Mode::Word)
                    .into_iter()
                    .flatten()
                    .collect();
                self.vars.bind(&name, chars, node.byte_range(), false);
            }
            _ => {
                let unknown = expand::unknown_chars(&format!("${name}"), var.byte_range());
                self.vars.bind(&name, unknown, node.byte_range(), true);
            }
        }
    }
}
