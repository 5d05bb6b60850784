//! Shell arithmetic into the program of [`crate::expr::program`], the form Python's memory
//! arithmetic takes too, so that both are valued the same way once the script is read:
//! - `$(( ))` (nested too), `let`, `(( x = ... ))`, `expr` and the string piped into `bc`;
//! - a variable is the latest value assigned to it on each path (the arms of an `if` or a
//!   `case`, the right side of `&&`), `${VAR:-default}` its default when the script never sets it;
//! - a function is a helper: `$1..$9` are its parameters, what it `echo`es or `printf`s is what
//!   `$(f args)` gives, the globals it assigns are what a call `f args` sets, all valued at each
//!   call site with the arguments bound (and its own formulas once per call site);
//! - `nvidia-smi --query-gpu=memory.total` is the device's memory, whatever it is stored in.

use super::arith;
use super::Walker;
use crate::expr::program::{Id, Key, Node as V, Path, ScopeDef, Source};
use crate::expr::{role_of, Lin, Role};
use crate::facts::{CheckpointedValue, Formula, FormulaKind, ScopeFacts, Topics};
use crate::frontend::fields::ShField;
use crate::frontend::{parse_number, MAX_EXPR_DEPTH};
use std::ops::Range;
use tree_sitter::Node;

/// The name what a function prints is bound to in its scope, and its key in what a call gives.
pub(super) const OUTPUT: &str = ">";
/// A function's positional parameters.
const POSITIONAL: [&str; 9] = ["1", "2", "3", "4", "5", "6", "7", "8", "9"];

/// A formula to value once the script is read.
pub(super) struct Pending {
    kind: PendingKind,
    value: Id,
    span: Range<usize>,
    scope: usize,
    guard: Topics,
}

pub(super) enum PendingKind {
    Assign {
        target: String,
    },
    /// What a function prints.
    Return {
        function: String,
    },
    /// One side of a comparison, and the other side.
    Compare {
        other: Id,
    },
    Expr,
    /// A memory value set under a test of gradient checkpointing (`ACT_GB=0`), and what the
    /// assignment scales the name's own value by (`OPT_GB=$((OPT_GB / 2))`).
    Checkpointed {
        target: String,
        factor: Option<f64>,
    },
}

/// A shell function, as valuing sees it.
pub(super) struct Function<'s> {
    pub scope: usize,
    pub end: usize,
    /// The names it assigns without `local`: a call sets them for the caller.
    pub globals: Vec<&'s str>,
}

impl<'s> Walker<'s> {
    /// Tell the program which arms of the tests around here (in the current function) what is
    /// added next is under.
    pub(super) fn sync_path(&mut self) {
        let start = self
            .frames
            .iter()
            .rposition(|f| f.kind == "function_definition")
            .map_or(0, |i| i + 1);
        let mut path: Path = Vec::new();
        for i in start..self.frames.len() {
            let f = &self.frames[i];
            let arm = match f.kind {
                "if_statement" => Some(f.seen),
                "case_statement" => f.seen.checked_sub(1),
                "list" => {
                    let child = self.frames.get(i + 1).map(|c| c.id);
                    if child.is_some() && child != f.first {
                        path.push((f.test, true));
                    }
                    None
                }
                _ => None,
            };
            if let Some(arm) = arm {
                for k in 0..arm.min(f.conds) {
                    path.push((f.test + k as u32, false));
                }
                if arm < f.conds {
                    path.push((f.test + arm as u32, true));
                }
            }
        }
        self.program.at_path(path);
    }

    /// A function definition: a scope whose parameters are the positional ones.
    pub(super) fn function_scope(&mut self, node: Node) {
        let name = node.field("name").map(|n| self.text(n)).unwrap_or("");
        let id = self.program.add_scope(ScopeDef {
            name,
            parent: Some(0),
            params: POSITIONAL.iter().map(|p| (*p, None)).collect(),
            ..ScopeDef::default()
        });
        self.stack.push((node.id(), id));
        self.facts.scopes.push(ScopeFacts {
            name: name.to_string(),
            tests: Topics::default(),
        });
        self.functions.insert(
            name,
            Function {
                scope: id,
                end: node.end_byte(),
                globals: Vec::new(),
            },
        );
    }

    /// The function the walk is in, by its scope.
    fn function_at(&self, scope: usize) -> Option<(&'s str, &Function<'s>)> {
        self.functions
            .iter()
            .find(|(_, f)| f.scope == scope)
            .map(|(n, f)| (*n, f))
    }

    /// `name` holds `value` from byte `at` on. In a function, a name not declared `local` is
    /// also what a call of the function sets.
    pub(super) fn bind_name(&mut self, name: &'s str, value: Id, at: usize, local: bool) {
        self.sync_path();
        let scope = self.scope();
        self.program.bind(scope, name, at, value);
        self.assigned.insert(name);
        if scope != 0 && !local {
            if let Some(f) = self.functions.values_mut().find(|f| f.scope == scope) {
                if !f.globals.contains(&name) {
                    f.globals.push(name);
                }
            }
        }
    }

    pub(super) fn pend(&mut self, kind: PendingKind, value: Id, span: Range<usize>) {
        let scope = self.scope();
        let guard = self.guard();
        self.pending.push(Pending {
            kind,
            value,
            span,
            scope,
            guard,
        });
    }

    fn opaque(&mut self, span: Range<usize>) -> Id {
        let scope = self.scope();
        self.program.add(V::Opaque, span, scope)
    }

    /// The program node of a word or an arithmetic expression.
    pub(super) fn value_of(&mut self, node: Node, depth: usize) -> Id {
        if depth == 0 {
            self.sync_path();
        }
        let scope = self.scope();
        let span = node.byte_range();
        if depth > MAX_EXPR_DEPTH {
            return self.opaque(span);
        }
        let text = self.text(node);
        let v = match node.kind() {
            "number" => parse_number(text).map_or(V::Opaque, V::Num),
            "word" | "raw_string" => {
                parse_number(text.trim_matches('\'')).map_or(V::Opaque, V::Num)
            }
            "parenthesized_expression" | "arithmetic_expansion" => {
                let mut c = node.walk();
                let inner: Vec<Node> = node
                    .named_children(&mut c)
                    .filter(|n| n.kind() != "comment")
                    .collect();
                match inner.as_slice() {
                    [one] => return self.value_of(*one, depth + 1),
                    _ => V::Opaque,
                }
            }
            "variable_name" => V::Name(text),
            "simple_expansion" => match node.named_child(0) {
                Some(n) if n.kind() == "variable_name" => V::Name(self.text(n)),
                _ => V::Opaque,
            },
            "expansion" => return self.expansion_value(node, depth),
            "unary_expression" => match node.named_child(0) {
                Some(inner) if text.starts_with('-') => V::Neg(self.value_of(inner, depth + 1)),
                Some(inner) if text.starts_with('+') => return self.value_of(inner, depth + 1),
                _ => V::Opaque,
            },
            "binary_expression" => {
                let (Some(l), Some(r), Some(op)) = (
                    node.field("left"),
                    node.field("right"),
                    node.field("operator"),
                ) else {
                    return self.opaque(span);
                };
                match self.text(op) {
                    // `>> 30` converts bytes to GiB as `/ 2**30` does.
                    op @ ("+" | "-" | "*" | "/" | "%" | "**" | ">>" | "<<") => {
                        let a = self.value_of(l, depth + 1);
                        let b = self.value_of(r, depth + 1);
                        V::Bin(op, a, b)
                    }
                    _ => V::Opaque,
                }
            }
            "command_substitution" => return self.substitution_value(node, depth),
            "string" => {
                let mut c = node.walk();
                let parts: Vec<Node> = node.named_children(&mut c).collect();
                match parts.as_slice() {
                    [one] if one.kind() == "string_content" => {
                        parse_number(self.text(*one).trim()).map_or(V::Opaque, V::Num)
                    }
                    [one] => return self.value_of(*one, depth + 1),
                    _ => V::Opaque,
                }
            }
            _ => V::Opaque,
        };
        self.program.add(v, span, scope)
    }

    /// `${VAR}`, and `${VAR:-default}`: the default when the script never sets the variable (a
    /// function's parameter: the default when a call leaves it out).
    fn expansion_value(&mut self, node: Node, depth: usize) -> Id {
        let span = node.byte_range();
        let inner = self
            .text(node)
            .trim_start_matches("${")
            .trim_end_matches('}');
        let Some(var) = node.named_child(0).filter(|n| n.kind() == "variable_name") else {
            return self.opaque(span);
        };
        let name = self.text(var);
        let rest = inner.get(name.len()..).unwrap_or("");
        let scope = self.scope();
        if rest.is_empty() {
            return self.program.add(V::Name(name), span, scope);
        }
        if !["-", ":-", "=", ":="].iter().any(|op| {
            rest.strip_prefix(op)
                .is_some_and(|d| !d.starts_with(['-', '=']))
        }) {
            return self.opaque(span);
        }
        let mut c = node.walk();
        let default: Vec<Node> = node.named_children(&mut c).skip(1).collect();
        let default = match default.as_slice() {
            [one] => self.value_of(*one, depth + 1),
            _ => self.opaque(span.clone()),
        };
        let positional = POSITIONAL.contains(&name);
        if positional && scope != 0 {
            self.program.param_default(scope, name, default);
            return self.program.add(V::Name(name), span, scope);
        }
        if positional || !self.assigned.contains(name) {
            return default;
        }
        self.program.add(V::Name(name), span, scope)
    }

    /// `$(...)`: a function's output, `expr`, `bc`, the device's memory from `nvidia-smi`.
    fn substitution_value(&mut self, node: Node, depth: usize) -> Id {
        let span = node.byte_range();
        let mut c = node.walk();
        let inner: Vec<Node> = node
            .named_children(&mut c)
            .filter(|n| n.kind() != "comment")
            .collect();
        let [inner] = inner.as_slice() else {
            return self.opaque(span);
        };
        let text = self.text(*inner);
        if text.contains("nvidia-smi") && text.contains("memory.") {
            let scope = self.scope();
            return self
                .program
                .add(V::Source(Source::DeviceMemory), span, scope);
        }
        match inner.kind() {
            "command" => self.command_value(*inner, span, depth),
            "pipeline" => {
                let mut c = inner.walk();
                let cmds: Vec<Node> = inner
                    .named_children(&mut c)
                    .filter(|n| n.kind() == "command")
                    .collect();
                match cmds.as_slice() {
                    [first, last] if self.command_name(*last) == Some("bc") => {
                        match self.printed(*first) {
                            Some(arg) => self.bc_value(arg, span),
                            None => self.opaque(span),
                        }
                    }
                    _ => self.opaque(span),
                }
            }
            // `bc <<< "$P * 2"`
            "redirected_statement" => {
                let body = inner
                    .field("body")
                    .filter(|b| self.command_name(*b) == Some("bc"));
                let mut c = inner.walk();
                let here = inner
                    .named_children(&mut c)
                    .find(|n| n.kind() == "herestring_redirect")
                    .and_then(|h| h.named_child(0));
                match (body, here) {
                    (Some(_), Some(arg)) => self.bc_value(arg, span),
                    _ => self.opaque(span),
                }
            }
            _ => self.opaque(span),
        }
    }

    fn command_name(&self, cmd: Node) -> Option<&'s str> {
        (cmd.kind() == "command")
            .then(|| cmd.field("name"))
            .flatten()
            .map(|n| self.text(n))
    }

    fn arguments<'t>(cmd: Node<'t>) -> Vec<Node<'t>> {
        let mut c = cmd.walk();
        cmd.children_by_field_name("argument", &mut c).collect()
    }

    /// The one value an `echo` or `printf` prints (`echo $((x))`, `printf '%d\n' "$x"`).
    pub(super) fn printed<'t>(&self, cmd: Node<'t>) -> Option<Node<'t>> {
        let args = Self::arguments(cmd);
        match self.command_name(cmd)? {
            "echo" => {
                let words: Vec<Node> = args
                    .into_iter()
                    .filter(|a| !matches!(self.text(*a), "-n" | "-e" | "-ne" | "-en"))
                    .collect();
                match words.as_slice() {
                    [one] => Some(*one),
                    _ => None,
                }
            }
            "printf" => match args.as_slice() {
                [format, one] if self.text(*format).matches('%').count() == 1 => Some(*one),
                _ => None,
            },
            _ => None,
        }
    }

    /// A command in `$(...)`: what it prints, when that is arithmetic or a function's output.
    fn command_value(&mut self, cmd: Node, span: Range<usize>, depth: usize) -> Id {
        let scope = self.scope();
        let Some(name) = self.command_name(cmd) else {
            return self.opaque(span);
        };
        match name {
            "expr" => match self.expr_words(cmd) {
                Some(id) => id,
                None => self.opaque(span),
            },
            "echo" | "printf" => match self.printed(cmd) {
                Some(arg) => self.value_of(arg, depth + 1),
                None => self.opaque(span),
            },
            _ if name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == ':') =>
            {
                let args = Self::arguments(cmd)
                    .into_iter()
                    .map(|a| self.value_of(a, depth + 1))
                    .collect();
                let call = self.program.add(
                    V::Call {
                        callee: name,
                        args,
                        keywords: Vec::new(),
                    },
                    span.clone(),
                    scope,
                );
                self.program
                    .add(V::Item(call, Key::Str(OUTPUT)), span, scope)
            }
            _ => self.opaque(span),
        }
    }

    /// A string handed to `bc`: its last statement (after `scale=2;`) as arithmetic.
    fn bc_value(&mut self, arg: Node, span: Range<usize>) -> Id {
        let text = self.text(arg);
        let (body, base) = match arg.kind() {
            "string" | "raw_string" if text.len() >= 2 => {
                (&text[1..text.len() - 1], arg.start_byte() + 1)
            }
            "word" => (text, arg.start_byte()),
            _ => return self.opaque(span),
        };
        let cut = body.rfind(';').map_or(0, |i| i + 1);
        let stmt = &body[cut..];
        let scope = self.scope();
        let lowered = arith::tokenize(stmt, base + cut, true).and_then(|toks| {
            arith::lower(&toks, &mut self.program, scope, &|p, n, r| {
                p.add(V::Name(n), r, scope)
            })
        });
        match lowered {
            Some(id) => id,
            None => self.opaque(span),
        }
    }

    /// `expr $a - $b \* 2`: the words of an `expr` command as arithmetic.
    pub(super) fn expr_words(&mut self, cmd: Node) -> Option<Id> {
        let mut toks = Vec::new();
        for a in Self::arguments(cmd) {
            let text = self.text(a);
            // `\*` and `'*'` keep the shell from globbing.
            let trimmed = text.trim_start_matches('\\').trim_matches(['"', '\'']);
            let offset = text.find(trimmed).unwrap_or(0);
            toks.extend(arith::tokenize(trimmed, a.start_byte() + offset, false)?);
        }
        let scope = self.scope();
        arith::lower(&toks, &mut self.program, scope, &|p, n, r| {
            p.add(V::Name(n), r, scope)
        })
    }

    /// `echo`/`printf` in a function, not captured inside it: what the function gives `$(f)`.
    pub(super) fn function_output(&mut self, cmd: Node) {
        let scope = self.scope();
        let Some((function, _)) = self.function_at(scope) else {
            return;
        };
        if self
            .frames
            .iter()
            .any(|f| matches!(f.kind, "command_substitution" | "redirected_statement"))
        {
            return;
        }
        let value = match self.printed(cmd) {
            Some(arg) => {
                let key = format!("{function}()");
                match self.scale_of(arg, 0) {
                    Some(scale) => self.scales.insert(key, scale),
                    None => self.scales.remove(&key),
                };
                let id = self.value_of(arg, 0);
                self.pend(
                    PendingKind::Return {
                        function: function.to_string(),
                    },
                    id,
                    arg.byte_range(),
                );
                self.consumed.push(arg.id());
                id
            }
            None => {
                self.sync_path();
                self.opaque(cmd.byte_range())
            }
        };
        self.bind_name(OUTPUT, value, cmd.end_byte(), true);
    }

    /// `f args` as a statement: the globals `f` assigns hold what it assigns them, valued with
    /// these arguments.
    pub(super) fn function_call(&mut self, cmd: Node) {
        let Some(name) = self.command_name(cmd) else {
            return;
        };
        let Some(globals) = self.functions.get(name).map(|f| f.globals.clone()) else {
            return;
        };
        if globals.is_empty() || self.frames.iter().any(|f| f.kind == "command_substitution") {
            return;
        }
        let args: Vec<Id> = Self::arguments(cmd)
            .into_iter()
            .map(|a| self.value_of(a, 0))
            .collect();
        let scope = self.scope();
        let span = cmd.byte_range();
        let call = self.program.add(
            V::Call {
                callee: name,
                args,
                keywords: Vec::new(),
            },
            span.clone(),
            scope,
        );
        for g in globals {
            let item = self
                .program
                .add(V::Item(call, Key::Str(g)), span.clone(), scope);
            self.bind_name(g, item, cmd.end_byte(), false);
        }
    }

    /// `[ "$need" -gt "$gpu" ]`, `[[ a -le b && ... ]]`, `(( need > gpu ))` (`arith`): each
    /// side of a comparison, compared with the other.
    pub(super) fn comparisons(&mut self, node: Node, depth: usize, arith: bool) {
        if depth > 16 {
            return;
        }
        match node.kind() {
            "test_command" | "parenthesized_expression" | "compound_statement" => {
                let mut c = node.walk();
                let kids: Vec<Node> = node.named_children(&mut c).collect();
                for k in kids {
                    self.comparisons(k, depth + 1, arith);
                }
            }
            "binary_expression" => {
                let (Some(l), Some(r), Some(op)) = (
                    node.field("left"),
                    node.field("right"),
                    node.field("operator"),
                ) else {
                    return;
                };
                let op = self.text(op);
                match op {
                    "&&" | "||" | "-a" | "-o" => {
                        self.comparisons(l, depth + 1, arith);
                        self.comparisons(r, depth + 1, arith);
                    }
                    // `<` and `>` compare strings in `[[ ]]`.
                    "-gt" | "-ge" | "-lt" | "-le" if !arith => self.compare(node, l, r),
                    ">" | ">=" | "<" | "<=" if arith => self.compare(node, l, r),
                    _ => {}
                }
            }
            _ => {}
        }
    }

    fn compare(&mut self, node: Node, l: Node, r: Node) {
        self.compare_units(l, r, node.byte_range());
        let a = self.value_of(l, 0);
        let b = self.value_of(r, 0);
        self.pend(PendingKind::Compare { other: b }, a, l.byte_range());
        self.pend(PendingKind::Compare { other: a }, b, r.byte_range());
    }

    /// Every function's result (what it prints, the globals it sets) and every pending formula,
    /// valued now that the script is read: as written, and in each function once per call site.
    pub(super) fn value_formulas(&mut self) {
        self.program.at_path(Vec::new());
        let functions: Vec<(usize, usize, Vec<&'s str>)> = self
            .functions
            .values()
            .map(|f| (f.scope, f.end, f.globals.clone()))
            .collect();
        for (scope, end, globals) in functions {
            let mut entries = Vec::new();
            for name in std::iter::once(OUTPUT).chain(globals) {
                entries.push((name, self.program.add(V::Name(name), end..end, scope)));
            }
            let dict = self.program.add(V::Dict(entries), end..end, scope);
            self.program.returns(scope, dict);
        }
        // A shell variable holds a number or a string: `PARAMS` counts parameters.
        let counts: Vec<&'s str> = self
            .assigned
            .iter()
            .copied()
            .filter(|n| counts_parameters(n))
            .collect();
        for scope in 0..self.facts.scopes.len() {
            for n in &counts {
                self.program.name_role(scope, n, Role::ParamCount, 1.0);
            }
        }
        let pending = std::mem::take(&mut self.pending);
        let program = std::mem::take(&mut self.program);
        let valuer = program.valuer();
        let reads = program.reads();
        for p in &pending {
            let feeds = match &p.kind {
                PendingKind::Assign { target } => reads
                    .get(&(p.scope, target.as_str()))
                    .is_some_and(|at| at.iter().any(|a| *a > p.span.end)),
                _ => false,
            };
            let valued = valuer.valuations(p.value, p.scope, true);
            for (lin, frame) in valued {
                let kind = match &p.kind {
                    PendingKind::Assign { target } => {
                        let kind = FormulaKind::Assign {
                            target: target.clone(),
                            role: lin.assigned_role(target),
                        };
                        self.push_formula(kind, lin.assigned_to(target), p, feeds);
                        continue;
                    }
                    PendingKind::Return { function } => FormulaKind::Return {
                        function: function.clone(),
                        role: role_of(function),
                    },
                    PendingKind::Compare { other } => FormulaKind::Compare {
                        other: valuer.lin(*other, frame.as_ref()),
                    },
                    PendingKind::Expr => FormulaKind::Expr,
                    PendingKind::Checkpointed { target, factor } => {
                        self.facts.checkpointed.push(CheckpointedValue {
                            target: target.clone(),
                            role: role_of(target),
                            lin,
                            factor: *factor,
                            span: p.span.clone(),
                            offloaded: p.guard.offload,
                            returned: false,
                        });
                        continue;
                    }
                };
                self.push_formula(kind, lin, p, false);
            }
        }
    }

    fn push_formula(&mut self, kind: FormulaKind, lin: Lin, p: &Pending, feeds: bool) {
        if !lin.is_sized() {
            return;
        }
        self.facts.formulas.push(Formula {
            kind,
            lin,
            span: p.span.clone(),
            inference: false,
            scope: p.scope,
            guard: p.guard,
            feeds,
            shown: false,
            stages: None,
        });
    }
}

/// A variable that holds a count of the model's parameters: in a shell script a name is a
/// number or a string, never the parameters themselves.
fn counts_parameters(name: &str) -> bool {
    role_of(name) == Role::Unknown
        && matches!(
            name.to_ascii_lowercase().as_str(),
            "params" | "parameters" | "model_parameters" | "total_parameters" | "num_param"
        )
}
