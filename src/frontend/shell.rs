//! Shell: tree-sitter-bash, one parse and one iterative walk per file. Lowers `$(( ))` arithmetic
//! into the shared expression form, and reads launch commands and their flags: words are expanded
//! through the variables set earlier in the script (see [`expand`]), `eval "$CMD"` and `$OPTS`
//! are followed, branches whose condition is known are taken or skipped, and heredocs that write
//! a config file become configs of their own.

mod arith;
mod expand;

use super::{flag_evidence, parse_number, MAX_EXPR_DEPTH};
use crate::config::{self, Node as ConfigNode, Value};
use crate::expr::{role_of, Lin};
use crate::facts::*;
use crate::source::Language;
use expand::{is_known, join_fields, source_chars, text_of, Env, Mode, RChar};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use tree_sitter::{Node, Parser, Tree};

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

pub fn parse(text: &str) -> Result<Tree, String> {
    super::parse_with(&PARSER, tree_sitter_bash::LANGUAGE.into(), text)
}

pub fn extract(text: &str) -> Result<Facts, String> {
    let tree = parse(text)?;
    let mut w = Walker {
        src: text,
        stack: Vec::new(),
        next_scope: 1,
        env: HashMap::new(),
        vars: Env::default(),
        frames: Vec::new(),
        facts: Facts::default(),
    };
    w.walk(&tree);
    w.facts.syntax_error |= tree.root_node().has_error();
    Ok(w.facts)
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
    /// What each variable holds as text, for expanding command words.
    vars: Env,
    /// One frame per node on the path from the root to the node being visited: whether it
    /// runs, and what its children need to know (kept during the walk, so no lookup climbs the
    /// tree).
    frames: Vec<StatusFrame>,
    facts: Facts,
}

#[derive(Debug)]
struct StatusFrame {
    id: usize,
    kind: &'static str,
    status: Status,
    /// `if`: the status of each branch (then, elif..., else); `case`: of each item.
    branches: Vec<Status>,
    /// Branches (elif/else clauses, case items) entered so far.
    seen: usize,
    /// A loop: the status of its body.
    body: Status,
    /// A `list` (`a && b`): its first command, which always runs.
    first: Option<usize>,
}

/// Whether a statement runs when the script runs as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Live,
    /// On some paths only.
    Maybe,
    /// Never (a branch whose condition is known to be false), or only when the script is given
    /// arguments (the option-parsing loop): the script as written does not run it.
    Dead,
}

impl Status {
    fn and(self, other: Status) -> Status {
        match (self, other) {
            (Status::Dead, _) | (_, Status::Dead) => Status::Dead,
            (Status::Maybe, _) | (_, Status::Maybe) => Status::Maybe,
            _ => Status::Live,
        }
    }
}

impl<'s> Walker<'s> {
    fn text(&self, n: Node) -> &'s str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    fn walk(&mut self, tree: &Tree) {
        let mut cursor = tree.walk();
        loop {
            let node = cursor.node();
            let field = cursor.field_name();
            self.push_frame(node, field);
            self.enter(node);
            if cursor.goto_first_child() {
                continue;
            }
            loop {
                let n = cursor.node();
                while self.stack.last().is_some_and(|(id, _)| *id == n.id()) {
                    self.stack.pop();
                }
                while self.frames.last().is_some_and(|f| f.id == n.id()) {
                    self.frames.pop();
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
            "comment" => {
                self.facts.comments.push(Comment {
                    text: self.text(node).to_string(),
                    range: node.byte_range(),
                });
                self.sbatch(node);
            }
            "for_statement" => self.for_variable(node),
            "redirected_statement" => self.heredoc(node),
            "function_definition" => {
                let id = self.next_scope;
                self.next_scope += 1;
                self.stack.push((node.id(), id));
            }
            "variable_assignment" => self.assignment(node),
            "arithmetic_expansion" => {
                // Assignments record their own formula; here only bare expansions.
                let assigned = self.parent_kind() == Some("variable_assignment");
                if !assigned {
                    if let Some(expr) = node.named_child(0) {
                        let lin = self.lower(expr, 0);
                        self.record(FormulaKind::Expr, lin, expr.byte_range());
                    }
                }
            }
            "command" => {
                if node
                    .child_by_field_name("name")
                    .is_some_and(|n| self.text(n) == "let")
                {
                    self.let_command(node);
                }
                self.command(node)
            }
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

    fn record(&mut self, kind: FormulaKind, lin: Lin, span: Range<usize>) {
        if lin.is_sized() {
            self.facts.formulas.push(Formula {
                kind,
                lin,
                span,
                inference: false,
            });
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

    /// `let "x = a - b"` (each argument one assignment): arithmetic like `$(( ))`.
    fn let_command(&mut self, node: Node) {
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
        if self.text(cmd.child_by_field_name("name")?) != "expr" {
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
    fn for_variable(&mut self, node: Node) {
        let Some(var) = node.child_by_field_name("variable") else {
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

    /// `#SBATCH --nodes=2`: the directive, and the `SLURM_*` variables it sets for the job.
    fn sbatch(&mut self, node: Node) {
        let text = self.text(node);
        let Some(rest) = text.strip_prefix("#SBATCH") else {
            return;
        };
        let words: Vec<&str> = rest
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let mut i = 0;
        while i < words.len() {
            let w = words[i];
            let (key, value) = if let Some(long) = w.strip_prefix("--") {
                match long.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => {
                        i += 1;
                        (
                            long.to_string(),
                            words.get(i).copied().unwrap_or("").to_string(),
                        )
                    }
                }
            } else if let Some(short) = w.strip_prefix('-') {
                let cut = short.chars().next().map_or(0, char::len_utf8);
                let (k, inline) = short.split_at(cut);
                let v = if inline.is_empty() {
                    i += 1;
                    words.get(i).copied().unwrap_or("").to_string()
                } else {
                    inline.trim_start_matches('=').to_string()
                };
                let long = match k {
                    "N" => "nodes",
                    "n" => "ntasks",
                    "G" => "gpus",
                    other => other,
                };
                (long.to_string(), v)
            } else {
                i += 1;
                continue;
            };
            i += 1;
            let span = node.byte_range();
            let gpus = match key.as_str() {
                "gres" => value
                    .split(',')
                    .find(|g| g.starts_with("gpu"))
                    .and_then(|g| g.rsplit(':').next())
                    .filter(|n| n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty())
                    .map(str::to_string),
                "gpus-per-node" => Some(value.rsplit(':').next().unwrap_or("").to_string()),
                _ => None,
            };
            let seeds: &[&str] = match key.as_str() {
                "nodes" => &["SLURM_NNODES", "SLURM_JOB_NUM_NODES"],
                "ntasks-per-node" => &["SLURM_NTASKS_PER_NODE"],
                "ntasks" => &["SLURM_NTASKS"],
                _ => &[],
            };
            for name in seeds {
                if value.chars().all(|c| c.is_ascii_digit()) && !value.is_empty() {
                    let chars = expand::unknown_chars(&value, span.clone())
                        .into_iter()
                        .map(|mut r| {
                            r.flags = 0;
                            r
                        })
                        .collect();
                    self.vars.bind(name, chars, span.clone(), false);
                }
            }
            if let Some(g) = gpus.filter(|g| !g.is_empty() && g.chars().all(|c| c.is_ascii_digit()))
            {
                for name in ["SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"] {
                    let chars = expand::unknown_chars(&g, span.clone())
                        .into_iter()
                        .map(|mut r| {
                            r.flags = 0;
                            r
                        })
                        .collect();
                    self.vars.bind(name, chars, span.clone(), false);
                }
            }
            self.facts.sbatch.push((key, value, span));
        }
    }

    /// The kind of the parent of the node being visited.
    fn parent_kind(&self) -> Option<&'static str> {
        let n = self.frames.len();
        n.checked_sub(2).map(|i| self.frames[i].kind)
    }

    /// Whether the node being visited runs when the script runs as written.
    fn status(&self, _node: Node) -> Status {
        self.frames.last().map_or(Status::Live, |f| f.status)
    }

    /// The frame of a node entered under the current top frame: its status follows from the
    /// parent's (a branch of a known condition, a loop body, the right side of `&&`).
    fn push_frame(&mut self, node: Node, field: Option<&str>) {
        let kind = node.kind();
        let status = match self.frames.last_mut() {
            None => Status::Live,
            Some(parent) => {
                let inherited = parent.status;
                let own = if !parent.branches.is_empty() || parent.seen > 0 {
                    // The parent is an `if` or a `case`.
                    match kind {
                        "elif_clause" | "else_clause" | "case_item" => {
                            let index = if kind == "case_item" {
                                parent.seen
                            } else {
                                parent.seen + 1
                            };
                            parent.seen += 1;
                            parent.branches.get(index).copied().unwrap_or(Status::Maybe)
                        }
                        _ if field == Some("condition") || !node.is_named() => Status::Live,
                        "comment" => Status::Live,
                        _ => parent.branches.first().copied().unwrap_or(Status::Maybe),
                    }
                } else if kind == "do_group" {
                    parent.body
                } else if let Some(first) = parent.first {
                    if node.id() == first || !node.is_named() {
                        Status::Live
                    } else {
                        Status::Maybe
                    }
                } else {
                    Status::Live
                };
                inherited.and(own)
            }
        };
        let mut frame = StatusFrame {
            id: node.id(),
            kind,
            status,
            branches: Vec::new(),
            seen: 0,
            body: Status::Live,
            first: None,
        };
        match kind {
            "if_statement" => frame.branches = self.if_branches(node),
            "case_statement" => {
                frame.branches = self.case_branches(node);
                // A case with no items still marks the frame as a branching one.
                if frame.branches.is_empty() {
                    frame.branches.push(Status::Maybe);
                }
            }
            "while_statement" | "until_statement" | "for_statement" | "c_style_for_statement" => {
                frame.body = self.loop_status(node)
            }
            "list" => frame.first = node.named_child(0).map(|n| n.id()),
            _ => {}
        }
        self.frames.push(frame);
    }

    /// The status of each branch of an `if`: the first whose known condition holds runs, the
    /// ones before it whose conditions are known false never run.
    fn if_branches(&mut self, stmt: Node) -> Vec<Status> {
        let mut conds: Vec<Option<Node>> = Vec::new();
        let mut c = stmt.walk();
        let mut first = None;
        for (i, ch) in stmt.children(&mut c).enumerate() {
            if first.is_none()
                && stmt.field_name_for_child(i as u32) == Some("condition")
                && ch.is_named()
            {
                first = Some(ch);
            }
        }
        conds.push(first);
        let mut has_else = false;
        let mut c = stmt.walk();
        for ch in stmt.children(&mut c) {
            match ch.kind() {
                "elif_clause" => {
                    let mut cc = ch.walk();
                    let cond = ch.named_children(&mut cc).find(|n| n.kind() != "comment");
                    conds.push(cond);
                }
                "else_clause" => has_else = true,
                _ => {}
            }
        }
        let mut out = Vec::new();
        let (mut decided, mut unsure) = (false, false);
        for cond in conds {
            if decided {
                out.push(Status::Dead);
                continue;
            }
            match cond.and_then(|n| self.cond_value(n)) {
                Some(true) => {
                    decided = true;
                    out.push(if unsure { Status::Maybe } else { Status::Live });
                }
                Some(false) => out.push(Status::Dead),
                None => {
                    unsure = true;
                    out.push(Status::Maybe);
                }
            }
        }
        if has_else {
            out.push(if decided {
                Status::Dead
            } else if unsure {
                Status::Maybe
            } else {
                Status::Live
            });
        }
        out
    }

    /// The value of a test (`[ "$X" = y ]`, `[[ $N -gt 1 ]]`) when its operands are known.
    fn cond_value(&mut self, node: Node) -> Option<bool> {
        let test = match node.kind() {
            "test_command" => node.named_child(0)?,
            _ => return None,
        };
        if test.kind() != "binary_expression" {
            return None;
        }
        let (l, r, op) = (
            test.child_by_field_name("left")?,
            test.child_by_field_name("right")?,
            test.child_by_field_name("operator")?,
        );
        let lv = self.known_text(l)?;
        let rv = self.known_text(r)?;
        let num = |s: &str| s.trim().parse::<i64>().ok();
        Some(match self.text(op) {
            "=" | "==" if !rv.contains(['*', '?', '[']) => lv == rv,
            "!=" if !rv.contains(['*', '?', '[']) => lv != rv,
            "-eq" => num(&lv)? == num(&rv)?,
            "-ne" => num(&lv)? != num(&rv)?,
            "-gt" => num(&lv)? > num(&rv)?,
            "-ge" => num(&lv)? >= num(&rv)?,
            "-lt" => num(&lv)? < num(&rv)?,
            "-le" => num(&lv)? <= num(&rv)?,
            _ => return None,
        })
    }

    fn known_text(&mut self, node: Node) -> Option<String> {
        let chars: Vec<RChar> = self
            .vars
            .expand_source(self.text(node), node.start_byte(), Mode::Assign)
            .into_iter()
            .flatten()
            .collect();
        is_known(&chars).then(|| text_of(&chars))
    }

    /// The status of each item of a `case` whose value is known: the first that matches runs.
    fn case_branches(&mut self, stmt: Node) -> Vec<Status> {
        let value = stmt
            .child_by_field_name("value")
            .and_then(|v| self.known_text(v));
        let mut states = Vec::new();
        let mut decided = false;
        let mut c = stmt.walk();
        let items: Vec<Node> = stmt
            .named_children(&mut c)
            .filter(|n| n.kind() == "case_item")
            .collect();
        for it in items {
            let state = match &value {
                None => Status::Maybe,
                Some(_) if decided => Status::Dead,
                Some(v) => {
                    let mut cc = it.walk();
                    let pats: Vec<String> = it
                        .children_by_field_name("value", &mut cc)
                        .map(|p| self.text(p).trim_matches(['"', '\'']).to_string())
                        .collect();
                    if pats.iter().any(|p| p == "*" || p == v) {
                        decided = true;
                        Status::Live
                    } else if pats.iter().any(|p| p.contains(['*', '?', '[', '$'])) {
                        Status::Maybe
                    } else {
                        Status::Dead
                    }
                }
            };
            states.push(state);
        }
        states
    }

    /// A loop body runs zero or more times; the option-parsing loop (`while [[ $# -gt 0 ]]`,
    /// `for arg in "$@"`) only when the script is given arguments.
    fn loop_status(&self, lp: Node) -> Status {
        let body_start = lp
            .child_by_field_name("body")
            .map_or(lp.end_byte(), |b| b.start_byte());
        let header = self.src.get(lp.start_byte()..body_start).unwrap_or("");
        if ["$#", "$@", "$*", "$1", "${1", "getopts"]
            .iter()
            .any(|w| header.contains(w))
        {
            return Status::Dead;
        }
        if lp.kind() == "for_statement" {
            let mut c = lp.walk();
            if lp.children_by_field_name("value", &mut c).count() == 1 {
                return Status::Live;
            }
        }
        Status::Maybe
    }

    fn command(&mut self, node: Node) {
        let status = self.status(node);
        if status == Status::Dead {
            return;
        }
        let mut fields: Vec<Vec<RChar>> = Vec::new();
        if let Some(name) = node.child_by_field_name("name") {
            fields.extend(
                self.vars
                    .expand_source(self.text(name), name.start_byte(), Mode::Word),
            );
        }
        let mut c = node.walk();
        let arg_nodes: Vec<Node> = node.children_by_field_name("argument", &mut c).collect();
        for a in arg_nodes {
            fields.extend(
                self.vars
                    .expand_source(self.text(a), a.start_byte(), Mode::Word),
            );
        }
        // `eval "$CMD"` runs the words as a new command line.
        let mut rounds = 0;
        while fields.first().is_some_and(|f| text_of(f) == "eval") && rounds < 4 {
            let joined = join_fields(&fields[1..]);
            fields = self.vars.expand(&joined, Mode::Word, 1);
            rounds += 1;
        }
        // `srun ... bash -c "$LAUNCHER $CMD"`: the string is a command line of its own.
        if let Some(at) = (0..fields.len().saturating_sub(2)).find(|&i| {
            matches!(text_of(&fields[i]).rsplit('/').next(), Some("bash" | "sh"))
                && text_of(&fields[i + 1]) == "-c"
        }) {
            let inner = self.vars.expand(&fields[at + 2], Mode::Word, 1);
            let mut spliced: Vec<Vec<RChar>> = fields[..at].to_vec();
            spliced.extend(inner);
            spliced.extend(fields[at + 3..].iter().cloned());
            fields = spliced;
        }
        let words: Vec<Arg> = fields.iter().map(|f| self.vars.arg(f)).collect();
        // Flags anywhere in any command: `--optim adamw_torch`, `--optimizer=adamw`, `--bf16`.
        for (i, a) in words.iter().enumerate() {
            let Some(flag) = a.value.strip_prefix("--") else {
                continue;
            };
            if let Some((k, v)) = flag.split_once('=') {
                flag_evidence(k, v, a.span.clone(), &mut self.facts.evidence);
            } else if let Some(next) = words.get(i + 1).filter(|n| !n.value.starts_with('-')) {
                let span = if next.span.start >= a.span.start {
                    a.span.start..next.span.end
                } else {
                    a.span.clone()
                };
                flag_evidence(flag, &next.value, span, &mut self.facts.evidence);
            } else {
                flag_evidence(flag, "", a.span.clone(), &mut self.facts.evidence);
            }
        }
        self.launch(words, node.byte_range(), status == Status::Maybe);
    }

    /// Record a command that starts a training script, looking through wrappers (`nohup`,
    /// `srun -N 2`, `env X=1`).
    fn launch(&mut self, words: Vec<Arg>, span: Range<usize>, conditional: bool) {
        let prog = |a: &Arg| a.value.rsplit('/').next().unwrap_or("").to_string();
        let is_launcher = |p: &str| {
            let base = p.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
            LAUNCHERS.contains(&p) || LAUNCHERS.contains(&base)
        };
        let mut wrappers: Vec<(String, Vec<Arg>)> = Vec::new();
        let mut i = 0;
        while let Some(w) = words.get(i) {
            let p = prog(w);
            if matches!(
                p.as_str(),
                "nohup" | "exec" | "time" | "nice" | "sudo" | "env" | "command" | "stdbuf"
            ) || (w.value.contains('=') && !w.value.starts_with('-') && i > 0)
            {
                wrappers.push((p, Vec::new()));
                i += 1;
                continue;
            }
            if matches!(
                p.as_str(),
                "srun" | "mpirun" | "mpiexec" | "salloc" | "uv" | "poetry" | "pipenv" | "conda"
            ) {
                let inner = (i + 1..words.len()).find(|&j| {
                    is_launcher(&prog(&words[j])) && !WRAPPING.contains(&prog(&words[j]).as_str())
                });
                if let Some(j) = inner {
                    wrappers.push((p, words[i + 1..j].to_vec()));
                    i = j;
                    continue;
                }
            }
            break;
        }
        let Some(first) = words.get(i) else { return };
        let launcher = prog(first);
        if !is_launcher(&launcher) {
            return;
        }
        let args = words[i + 1..].to_vec();
        let script = args
            .iter()
            .map(|a| a.value.as_str())
            .find(|a| a.ends_with(".py") && !a.starts_with('-'))
            .map(str::to_string);
        if script.is_some() {
            self.facts.evidence.trains.push(span.clone());
        }
        self.facts.invocations.push(Invocation {
            launcher,
            script,
            args,
            span,
            wrappers,
            conditional,
        });
    }

    /// `cat <<EOF > ds_config.json` (or `| tee`, `cat > f << EOF`): the body is a config file the
    /// script writes; variables in it are expanded as the shell would.
    fn heredoc(&mut self, node: Node) {
        let mut c = node.walk();
        let kids: Vec<Node> = node.children(&mut c).collect();
        let Some(redirect) = kids.iter().find(|k| k.kind() == "heredoc_redirect") else {
            return;
        };
        if self.status(node) == Status::Dead {
            return;
        }
        let mut rc = redirect.walk();
        let parts: Vec<Node> = redirect.children(&mut rc).collect();
        let Some(body) = parts.iter().find(|k| k.kind() == "heredoc_body") else {
            return;
        };
        let quoted = parts
            .iter()
            .find(|k| k.kind() == "heredoc_start")
            .is_some_and(|s| self.text(*s).contains(['\'', '"', '\\']));
        let dest = kids
            .iter()
            .chain(parts.iter())
            .filter(|k| k.kind() == "file_redirect")
            .find(|k| {
                let t = self.text(**k);
                t.starts_with('>') || t.starts_with("1>")
            })
            .and_then(|k| k.child_by_field_name("destination"))
            .or_else(|| {
                let cmd = node.child_by_field_name("body")?;
                let name = cmd.child_by_field_name("name")?;
                if self.text(name) != "tee" {
                    return None;
                }
                let mut cc = cmd.walk();
                let found = cmd
                    .children_by_field_name("argument", &mut cc)
                    .find(|a| !self.text(*a).starts_with('-'));
                found
            });
        let Some(dest) = dest else { return };
        let path: Vec<RChar> = self
            .vars
            .expand_source(self.text(dest), dest.start_byte(), Mode::Assign)
            .into_iter()
            .flatten()
            .collect();
        let path = text_of(&path);
        let chars: Vec<RChar> = if quoted {
            source_chars(self.text(*body), body.start_byte())
        } else {
            self.vars
                .expand_source(self.text(*body), body.start_byte(), Mode::Heredoc)
                .into_iter()
                .flatten()
                .collect()
        };
        let lower = path.to_ascii_lowercase();
        let trimmed = text_of(&chars);
        let language = if lower.ends_with(".json") {
            Language::Json
        } else if lower.ends_with(".yaml") || lower.ends_with(".yml") {
            Language::Yaml
        } else if lower.ends_with(".toml") {
            Language::Toml
        } else if trimmed.trim_start().starts_with('{') {
            Language::Json
        } else {
            return;
        };
        let chars = if language == Language::Json {
            quote_unknowns(chars)
        } else {
            chars
        };
        let text = text_of(&chars);
        let Ok(doc) = config::parse(language, &text) else {
            return;
        };
        let map = SpanMap::new(&chars);
        for mut root in doc.roots {
            if !matches!(root.value, Value::Map(_)) {
                continue;
            }
            let mut via = Vec::new();
            map.remap(&mut root, &self.vars, &mut via, 0);
            self.facts.inline_configs.push(InlineConfig {
                kind: InlineKind::Heredoc {
                    path: Some(path.clone()),
                },
                root,
                via,
            });
        }
    }
}

/// Programs that start other programs: looked through to find the launcher inside.
const WRAPPING: &[&str] = &["srun", "mpirun", "uv", "poetry", "pipenv"];

/// In JSON, an unresolved `$VAR` outside a string becomes a string, so the rest still parses
/// (its value stays unknown).
fn quote_unknowns(chars: Vec<RChar>) -> Vec<RChar> {
    let mut out = Vec::with_capacity(chars.len() + 8);
    let mut in_str = false;
    let mut prev = ' ';
    let mut i = 0;
    while i < chars.len() {
        let r = &chars[i];
        if !in_str && r.flags & expand::UNKNOWN != 0 {
            let mut j = i;
            while j < chars.len() && chars[j].flags & expand::UNKNOWN != 0 {
                j += 1;
            }
            let quote = |src: &Range<usize>| RChar {
                c: '"',
                src: src.clone(),
                via: expand::NO_BINDING,
                flags: expand::UNKNOWN,
            };
            out.push(quote(&r.src));
            for u in &chars[i..j] {
                let mut u = u.clone();
                if u.c == '"' || u.c == '\\' {
                    u.c = '\'';
                }
                out.push(u);
            }
            out.push(quote(&chars[j - 1].src));
            i = j;
            prev = '"';
            continue;
        }
        if r.c == '"' && prev != '\\' {
            in_str = !in_str;
        }
        prev = r.c;
        out.push(r.clone());
        i += 1;
    }
    out
}

/// From byte offsets in expanded text back to where each character is written.
struct SpanMap<'a> {
    chars: &'a [RChar],
    /// The character each byte of the expanded text belongs to.
    owner: Vec<usize>,
}

impl<'a> SpanMap<'a> {
    fn new(chars: &'a [RChar]) -> Self {
        let mut owner = Vec::new();
        for (k, r) in chars.iter().enumerate() {
            owner.extend(std::iter::repeat_n(k, r.c.len_utf8()));
        }
        SpanMap { chars, owner }
    }

    fn map(&self, span: &Range<usize>) -> Range<usize> {
        let n = self.chars.len();
        if n == 0 {
            return 0..0;
        }
        let at = |b: usize| self.owner.get(b).copied().unwrap_or(n - 1);
        let first = &self.chars[at(span.start)];
        if span.end <= span.start {
            return first.src.start..first.src.start;
        }
        let last = &self.chars[at(span.end - 1)];
        first.src.start..last.src.end.max(first.src.start)
    }

    fn binding(&self, span: &Range<usize>, env: &Env) -> Option<Binding> {
        let n = self.chars.len();
        (span.start..span.end.min(self.owner.len()))
            .filter_map(|b| self.owner.get(b))
            .filter(|&&k| k < n)
            .find_map(|&k| env.bindings.get(self.chars[k].via as usize))
            .cloned()
    }

    fn remap(
        &self,
        node: &mut ConfigNode,
        env: &Env,
        via: &mut Vec<(Range<usize>, Binding)>,
        depth: usize,
    ) {
        if depth > config::MAX_DEPTH {
            return;
        }
        let original = node.span.clone();
        node.span = self.map(&original);
        match &mut node.value {
            Value::Map(entries) => {
                for (k, v) in entries {
                    k.span = self.map(&k.span);
                    self.remap(v, env, via, depth + 1);
                }
            }
            Value::List(items) => {
                for v in items {
                    self.remap(v, env, via, depth + 1);
                }
            }
            _ => {
                if let Some(b) = self.binding(&original, env) {
                    via.push((node.span.clone(), b));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_in_arithmetic() {
        let src = "local model_size_gb=14\navail=$((gpu_memory_gb - model_size_gb - 4))\n";
        let facts = extract(src).expect("parses");
        assert_eq!(facts.formulas.len(), 1);
        assert_eq!(facts.formulas[0].lin.terms[1].value, Some(14.0));
        let src =
            "avail=$((gpu_memory_gb - model_size_gb - 4))\npython train.py --optimizer adamw\n";
        let facts = extract(src).expect("parses");
        assert_eq!(facts.formulas.len(), 1);
        assert_eq!(facts.evidence.optimizers[0].value.name, "adamw");
        assert_eq!(facts.invocations[0].script.as_deref(), Some("train.py"));
    }

    #[test]
    fn eval_of_a_command_string_with_options_and_a_heredoc_config() {
        let src = r#"#!/bin/bash
TP=1
PP=1
DP=2
WORLD_SIZE=$((TP*PP*DP))
GLOBAL_BATCH=1
MICRO_BATCH=1
CONFIG_JSON="/tmp/ds_config.json"
USE_DEEPSPEED=1
options=" \
        --tensor-model-parallel-size $TP \
        --global-batch-size $GLOBAL_BATCH"
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-deepspeed) USE_DEEPSPEED=0; shift ;;
  esac
done
if [[ ${USE_DEEPSPEED} -eq 1 ]]; then
  options="${options} \
      --deepspeed_config=${CONFIG_JSON}"
fi
cat <<EOT > $CONFIG_JSON
{
  "train_batch_size" : $GLOBAL_BATCH,
  "train_micro_batch_size_per_gpu": $MICRO_BATCH,
  "zero_optimization": {"stage": $ZERO_STAGE}
}
EOT
WORKER_STR="--num_nodes 1 --num_gpus $WORLD_SIZE"
run_cmd="deepspeed --master_port 29600 $WORKER_STR ${DIR}/pretrain_gpt.py $@ ${options}"
eval ${run_cmd}
"#;
        let facts = extract(src).expect("parses");
        assert_eq!(facts.invocations.len(), 1);
        let inv = &facts.invocations[0];
        assert_eq!(inv.launcher, "deepspeed");
        assert!(!inv.conditional);
        let words: Vec<&str> = inv.args.iter().map(|a| a.value.as_str()).collect();
        assert_eq!(
            words,
            [
                "--master_port",
                "29600",
                "--num_nodes",
                "1",
                "--num_gpus",
                "2",
                "${DIR}/pretrain_gpt.py",
                "$@",
                "--tensor-model-parallel-size",
                "1",
                "--global-batch-size",
                "1",
                "--deepspeed_config=/tmp/ds_config.json"
            ]
        );
        let gpus = &inv.args[5];
        assert!(gpus.known);
        assert_eq!(gpus.via[0].name, "WORLD_SIZE");
        assert_eq!(&src[gpus.span.clone()], "$((TP*PP*DP))");
        assert!(!inv.args[7].known);
        assert_eq!(facts.inline_configs.len(), 1);
        let cfg = &facts.inline_configs[0];
        assert_eq!(
            cfg.kind,
            InlineKind::Heredoc {
                path: Some("/tmp/ds_config.json".into())
            }
        );
        let tbs = cfg.root.get("train_batch_size").unwrap();
        assert_eq!(tbs.as_number(), Some(1.0));
        assert_eq!(&src[tbs.span.clone()], "$GLOBAL_BATCH");
        let stage = cfg
            .root
            .get("zero_optimization")
            .unwrap()
            .get("stage")
            .unwrap();
        assert!(matches!(stage.value, Value::Unknown(_)));
        assert!(cfg
            .via
            .iter()
            .any(|(s, b)| *s == tbs.span && b.name == "GLOBAL_BATCH"));
    }

    #[test]
    fn branches_defaults_wrappers_and_sbatch() {
        let src = r#"#SBATCH --nodes=2
#SBATCH --gres=gpu:a100:4
MODE=${1:-full}
BS=${2:-8}
if [ "$MODE" = "lora" ]; then GAS=4; else GAS=2; fi
if [ "$X" = "y" ]; then LR=1; fi
srun --ntasks-per-node=1 torchrun --nnodes $SLURM_NNODES --nproc_per_node $SLURM_GPUS_ON_NODE train.py --bs $BS --gas $GAS --lr $LR
"#;
        let facts = extract(src).expect("parses");
        let inv = &facts.invocations[0];
        assert_eq!(inv.launcher, "torchrun");
        assert_eq!(inv.wrappers[0].0, "srun");
        let v: Vec<(&str, bool)> = inv
            .args
            .iter()
            .map(|a| (a.value.as_str(), a.known))
            .collect();
        assert_eq!(
            v,
            [
                ("--nnodes", true),
                ("2", true),
                ("--nproc_per_node", true),
                ("4", true),
                ("train.py", true),
                ("--bs", true),
                ("8", true),
                ("--gas", true),
                ("2", true),
                ("--lr", true),
                ("1", false)
            ]
        );
        assert!(inv.args[6].via[0].default);
        let src = "export LAUNCHER=\"python -u -m torch.distributed.run --nproc_per_node 4 --nnodes 2\"\nexport CMD=\" pretrain_gpt.py --micro-batch-size 2\"\nsrun --jobid $SLURM_JOBID bash -c \"$LAUNCHER --node_rank \\$SLURM_PROCID $CMD\"\n";
        let inner = extract(src).expect("parses");
        let inv = &inner.invocations[0];
        assert_eq!(inv.launcher, "python");
        assert_eq!(inv.wrappers[0].0, "srun");
        assert_eq!(inv.script.as_deref(), Some("pretrain_gpt.py"));
        assert_eq!(facts.sbatch.len(), 2);
    }
}
