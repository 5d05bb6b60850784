//! Shell: tree-sitter-bash, one parse and one iterative walk per file. Lowers `$(( ))` arithmetic
//! into the shared expression form, and reads launch commands and their flags.

use super::{flag_evidence, parse_number, MAX_EXPR_DEPTH};
use crate::expr::{role_of, Lin};
use crate::facts::*;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use tree_sitter::{Node, Parser, Tree};

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

pub fn parse(text: &str) -> Option<Tree> {
    super::parse_with(&PARSER, tree_sitter_bash::LANGUAGE.into(), text)
}

pub fn extract(text: &str) -> Facts {
    let Some(tree) = parse(text) else {
        return Facts {
            syntax_error: true,
            ..Facts::default()
        };
    };
    let mut w = Walker {
        src: text,
        stack: Vec::new(),
        next_scope: 1,
        env: HashMap::new(),
        strings: HashMap::new(),
        assigned_expansions: HashSet::new(),
        facts: Facts::default(),
    };
    w.walk(&tree);
    w.facts.syntax_error |= tree.root_node().has_error();
    w.facts
}

/// Programs that start a training script.
const LAUNCHERS: &[&str] = &[
    "python",
    "python3",
    "torchrun",
    "deepspeed",
    "accelerate",
    "srun",
    "mpirun",
    "llamafactory-cli",
    "axolotl",
    "tune",
    "composer",
    "lightning",
    "uv",
    "poetry",
    "pipenv",
];

struct Walker<'s> {
    src: &'s str,
    stack: Vec<(usize, usize)>,
    next_scope: usize,
    /// Arithmetic values of variables, per scope (0 = the script).
    env: HashMap<(usize, String), Lin>,
    /// Literal string values of variables (`OPTIM=adamw`), for resolving `$OPTIM` in flags.
    strings: HashMap<String, String>,
    /// Arithmetic expansions that are the value of an assignment, marked when the walk enters the
    /// assignment (`Node::parent` walks down from the root: quadratic in nested expansions).
    assigned_expansions: HashSet<usize>,
    facts: Facts,
}

impl<'s> Walker<'s> {
    fn text(&self, n: Node) -> &'s str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    fn walk(&mut self, tree: &Tree) {
        let mut cursor = tree.walk();
        loop {
            let node = cursor.node();
            self.enter(node);
            if cursor.goto_first_child() {
                continue;
            }
            loop {
                let n = cursor.node();
                while self.stack.last().is_some_and(|(id, _)| *id == n.id()) {
                    self.stack.pop();
                }
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return;
                }
            }
        }
    }

    fn scope(&self) -> usize {
        self.stack.last().map_or(0, |(_, s)| *s)
    }

    fn enter(&mut self, node: Node) {
        match node.kind() {
            "comment" => self.facts.comments.push(Comment {
                text: self.text(node).to_string(),
                range: node.byte_range(),
            }),
            "function_definition" => {
                let id = self.next_scope;
                self.next_scope += 1;
                self.stack.push((node.id(), id));
            }
            "variable_assignment" => {
                let mut cursor = node.walk();
                for child in node.children(&mut cursor) {
                    if child.kind() == "arithmetic_expansion" {
                        self.assigned_expansions.insert(child.id());
                    }
                }
                self.assignment(node)
            }
            // Assignments record their own formula; here only bare expansions.
            "arithmetic_expansion" if !self.assigned_expansions.contains(&node.id()) => {
                if let Some(expr) = node.named_child(0) {
                    let lin = self.lower(expr, 0);
                    self.record(FormulaKind::Expr, lin, expr.byte_range());
                }
            }
            "command" => self.command(node),
            "ERROR" => self.facts.syntax_error = true,
            _ => {}
        }
    }

    fn assignment(&mut self, node: Node) {
        let (Some(name), Some(value)) = (
            node.child_by_field_name("name"),
            node.child_by_field_name("value"),
        ) else {
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
        if !literal.contains('$') {
            self.strings.insert(target.clone(), literal.to_string());
        }
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
                Some(v) => Lin::constant(v, Some(value.byte_range())),
                None => return,
            },
            "simple_expansion" | "expansion" => self.variable(value),
            "string" | "word" | "raw_string" => match parse_number(literal) {
                Some(v) => Lin::constant(v, None),
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

    fn record(&mut self, kind: FormulaKind, lin: Lin, span: Range<usize>) {
        if lin.is_sized() {
            self.facts.formulas.push(Formula { kind, lin, span });
        }
    }

    fn lower(&self, node: Node, depth: usize) -> Lin {
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
                    node.child_by_field_name("left"),
                    node.child_by_field_name("right"),
                    node.child_by_field_name("operator"),
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
        let value = self
            .env
            .get(&(self.scope(), name.to_string()))
            .or_else(|| self.env.get(&(0, name.to_string())));
        Lin::read(name, node.byte_range(), value)
    }

    fn command(&mut self, node: Node) {
        let Some(name) = node.child_by_field_name("name") else {
            return;
        };
        let prog = self.text(name).rsplit('/').next().unwrap_or("").to_string();
        // Borrowed until kept: in nested command substitutions each command's arguments hold the
        // text of all the inner ones, and copying them all is quadratic.
        let (src, strings) = (self.src, &self.strings);
        let mut args: Vec<Mention<&str>> = Vec::new();
        let mut c = node.walk();
        for a in node.children_by_field_name("argument", &mut c) {
            args.push(Mention {
                value: resolve(strings, src.get(a.byte_range()).unwrap_or("")),
                span: a.byte_range(),
            });
        }
        // Flags anywhere in any command: `--optim adamw_torch`, `--optimizer=adamw`, `--bf16`.
        let mut i = 0;
        let evidence = &mut self.facts.evidence;
        while i < args.len() {
            let a = args[i].value;
            if let Some(flag) = a.strip_prefix("--") {
                if let Some((k, v)) = flag.split_once('=') {
                    flag_evidence(k, v, args[i].span.clone(), evidence);
                } else if let Some(next) = args.get(i + 1).filter(|n| !n.value.starts_with('-')) {
                    flag_evidence(
                        flag,
                        next.value,
                        args[i].span.start..next.span.end,
                        evidence,
                    );
                } else {
                    flag_evidence(flag, "", args[i].span.clone(), evidence);
                }
            }
            i += 1;
        }
        let launcher = prog.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        if LAUNCHERS.contains(&prog.as_str()) || LAUNCHERS.contains(&launcher) {
            let script = args
                .iter()
                .map(|a| a.value)
                .find(|a| a.ends_with(".py") && !a.starts_with('-'))
                .map(str::to_string);
            let args = args
                .into_iter()
                .map(|a| Mention {
                    value: a.value.to_string(),
                    span: a.span,
                })
                .collect();
            if script.is_some() {
                self.facts.evidence.trains.push(node.byte_range());
            }
            self.facts.invocations.push(Invocation {
                launcher: prog,
                script,
                args,
                span: node.byte_range(),
            });
        }
    }
}

/// Resolve `$VAR`/`"${VAR}"` in an argument through literal assignments seen so far.
fn resolve<'a>(strings: &'a HashMap<String, String>, word: &'a str) -> &'a str {
    let w = word.trim_matches(['"', '\'']);
    let name = w
        .trim_start_matches('$')
        .trim_start_matches('{')
        .trim_end_matches('}');
    if w.starts_with('$') {
        if let Some(v) = strings.get(name) {
            return v;
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_in_arithmetic() {
        let src = "local model_size_gb=14\navail=$((gpu_memory_gb - model_size_gb - 4))\n";
        let facts = extract(src);
        assert_eq!(facts.formulas.len(), 1);
        assert_eq!(facts.formulas[0].lin.terms[1].value, Some(14.0));
        let src =
            "avail=$((gpu_memory_gb - model_size_gb - 4))\npython train.py --optimizer adamw\n";
        let facts = extract(src);
        assert_eq!(facts.formulas.len(), 1);
        assert_eq!(facts.evidence.optimizers[0].value.name, "adamw");
        assert_eq!(facts.invocations[0].script.as_deref(), Some("train.py"));
    }
}
