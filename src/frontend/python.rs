//! Python: tree-sitter-python, one parse and one iterative walk per file. The walk keeps a stack of
//! the scopes, loops and branches it is in; handlers at assignments, calls, comparisons and returns
//! lower what they see into facts. Accumulating loops are assembled from the recorded events after
//! the walk.

use super::{clip, clip_tail, flag_evidence, parse_number, MAX_EXPR_DEPTH};
use crate::expr::{role_of, Lin, Role};
use crate::facts::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use tree_sitter::{Node, Parser, Tree};

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// Parse with this thread's parser (one per thread, created on first use).
pub fn parse(text: &str) -> Option<Tree> {
    super::parse_with(&PARSER, tree_sitter_python::LANGUAGE.into(), text)
}

pub fn extract(text: &str) -> Facts {
    let Some(tree) = parse(text) else {
        return Facts {
            syntax_error: true,
            ..Facts::default()
        };
    };
    let mut w = Walker::new(text);
    w.walk(&tree);
    let mut facts = w.finish();
    facts.syntax_error = tree.root_node().has_error();
    facts
}

#[derive(Clone, Debug)]
enum Frame {
    Scope(usize),
    Loop(usize),
    Branch(usize, bool),
    With,
}

#[derive(Debug)]
struct Scope {
    name: String,
    /// Enclosing class scope for methods (where `self.x` lives).
    class: Option<usize>,
    parent: Option<usize>,
    is_class: bool,
}

/// A condition of an `if`, with the accumulation test it makes, if any.
#[derive(Debug, Clone)]
struct Cond {
    /// `(factor, factor_span, boundary_when_true)`.
    accum: Option<(String, Range<usize>, bool)>,
}

#[derive(Debug, Clone)]
struct Ctx {
    scope: usize,
    loops: Vec<usize>,
    branches: Vec<(usize, bool)>,
}

#[derive(Debug)]
struct CallEvent {
    ctx: Ctx,
    kind: CallKind,
    span: Range<usize>,
}

#[derive(Debug)]
enum CallKind {
    Step,
    Backward {
        loss: Range<usize>,
        loss_text: String,
        scaling: Scaling,
    },
    GradRescale,
}

struct Walker<'s> {
    src: &'s str,
    stack: Vec<(usize, Frame)>,
    scopes: Vec<Scope>,
    conds: Vec<Cond>,
    cond_ids: HashMap<usize, usize>,
    loops: Vec<Range<usize>>,
    /// Lowered values of names, per scope: the latest assignment wins (walk order is source order).
    env: HashMap<(usize, String), Lin>,
    /// How each loss-like name was produced, per scope, in source order.
    loss_defs: HashMap<(usize, String), Vec<(usize, Scaling)>>,
    /// Accumulation tests stored in names (`do_step = (i + 1) % n == 0`).
    test_names: HashMap<(usize, String), (String, Range<usize>, bool)>,
    /// Functions defined in this file and whether what they return is a scaled loss.
    returns_scaled: HashMap<String, Scaling>,
    /// Names whose value is the device's memory (`total = torch.cuda.get_device_properties(0).total_memory`).
    gpu_names: Vec<(usize, String)>,
    /// Names bound to optimizers (`opt = torch.optim.AdamW(...)`).
    optimizer_names: Vec<String>,
    calls: Vec<CallEvent>,
    facts: Facts,
}

const OPTIMIZER_CLASSES: &[&str] = &[
    "adamw",
    "adam",
    "sgd",
    "adafactor",
    "lion",
    "adamw8bit",
    "adam8bit",
    "pagedadamw8bit",
    "pagedadamw",
    "pagedadamw32bit",
    "adamw32bit",
    "fusedadam",
    "deepspeedcpuadam",
    "fusedlamb",
    "lamb",
    "lars",
    "adagrad",
    "rmsprop",
    "nadam",
    "radam",
    "adamax",
    "adadelta",
    "rprop",
    "asgd",
    "muon",
    "ademamix",
    "sophiag",
    "sophia",
    "lion8bit",
    "sgd8bit",
    "adagrad8bit",
    "rmsprop8bit",
    "lamb8bit",
    "pagedlion",
    "pagedlion8bit",
    "shampoo",
    "distributedshampoo",
    "came",
    "adamwscheduleFree",
    "adamwschedulefree",
    "sgdschedulefree",
];

impl<'s> Walker<'s> {
    fn new(src: &'s str) -> Self {
        Walker {
            src,
            stack: Vec::new(),
            scopes: vec![Scope {
                name: String::new(),
                class: None,
                parent: None,
                is_class: false,
            }],
            conds: Vec::new(),
            cond_ids: HashMap::new(),
            loops: Vec::new(),
            env: HashMap::new(),
            loss_defs: HashMap::new(),
            test_names: HashMap::new(),
            returns_scaled: HashMap::new(),
            gpu_names: Vec::new(),
            optimizer_names: Vec::new(),
            calls: Vec::new(),
            facts: Facts::default(),
        }
    }

    fn text(&self, n: Node) -> &'s str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    fn walk(&mut self, tree: &Tree) {
        let mut cursor = tree.walk();
        loop {
            let node = cursor.node();
            let field = cursor.field_name();
            self.enter(node, field);
            if cursor.goto_first_child() {
                continue;
            }
            loop {
                self.leave(cursor.node());
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return;
                }
            }
        }
    }

    fn push(&mut self, node: Node, frame: Frame) {
        self.stack.push((node.id(), frame));
    }

    fn leave(&mut self, node: Node) {
        while self.stack.last().is_some_and(|(id, _)| *id == node.id()) {
            self.stack.pop();
        }
    }

    fn scope(&self) -> usize {
        self.stack
            .iter()
            .rev()
            .find_map(|(_, f)| match f {
                Frame::Scope(s) => Some(*s),
                _ => None,
            })
            .unwrap_or(0)
    }

    fn ctx(&self) -> Ctx {
        let mut loops = Vec::new();
        let mut branches = Vec::new();
        for (_, f) in &self.stack {
            match f {
                // A nested function starts a fresh loop context.
                Frame::Scope(_) => {
                    loops.clear();
                    branches.clear();
                }
                Frame::Loop(l) => loops.push(*l),
                Frame::Branch(c, b) => branches.push((*c, *b)),
                Frame::With => {}
            }
        }
        Ctx {
            scope: self.scope(),
            loops,
            branches,
        }
    }

    fn enter(&mut self, node: Node<'_>, field: Option<&str>) {
        match node.kind() {
            "comment" => self.facts.comments.push(Comment {
                text: self.text(node).to_string(),
                range: node.byte_range(),
            }),
            "function_definition" | "class_definition" => self.enter_scope(node),
            "for_statement" | "while_statement" => {
                let id = self.loops.len();
                self.loops
                    .push(node.start_byte()..line_end(self.src, node.start_byte()));
                self.push(node, Frame::Loop(id));
            }
            "block" if field == Some("consequence") => {
                if let Some(parent) = node.parent() {
                    if let Some(cond) = self.cond_of(parent) {
                        self.push(node, Frame::Branch(cond, true));
                    }
                }
            }
            "elif_clause" | "else_clause" if field == Some("alternative") => {
                if let Some(parent) = node.parent() {
                    if let Some(cond) = self.cond_of(parent) {
                        self.push(node, Frame::Branch(cond, false));
                    }
                }
            }
            "with_statement" => {
                let items = node
                    .child(0)
                    .and_then(|_| {
                        node.children(&mut node.walk())
                            .find(|c| c.kind() == "with_clause")
                    })
                    .map(|c| self.text(c).to_string())
                    .unwrap_or_default();
                if items.contains("no_grad") || items.contains("inference_mode") {
                    self.facts.evidence.inference.push(node.byte_range());
                }
                if items.contains("autocast") {
                    self.facts.evidence.precision.push(Mention {
                        value: Precision::Amp,
                        span: node.byte_range(),
                    });
                }
                self.push(node, Frame::With);
            }
            "assignment" => self.assignment(node),
            "augmented_assignment" => self.augmented(node),
            "return_statement" => self.ret(node),
            "comparison_operator" => self.comparison(node),
            "call" => self.call(node),
            "keyword_argument" => self.keyword(node),
            "ERROR" => self.facts.syntax_error = true,
            _ => {}
        }
    }

    fn enter_scope(&mut self, node: Node) {
        let name = node
            .child_by_field_name("name")
            .map(|n| self.text(n).to_string())
            .unwrap_or_default();
        let parent = self.scope();
        let is_class = node.kind() == "class_definition";
        // A method's `self.x` lives in its class; nested functions inherit their parent's class.
        let class = match self.scopes.get(parent) {
            _ if is_class => None,
            Some(p) if p.is_class => Some(parent),
            Some(p) => p.class,
            None => None,
        };
        if is_class {
            let bases = node
                .child_by_field_name("superclasses")
                .map(|n| self.text(n))
                .unwrap_or("");
            let framework = if bases.contains("LightningModule") {
                Some(Framework::Lightning)
            } else if bases.contains("Trainer") {
                Some(Framework::HfTrainer)
            } else {
                None
            };
            if let Some(fw) = framework {
                self.facts.evidence.frameworks.push(Mention {
                    value: fw,
                    span: node.byte_range(),
                });
                self.facts.evidence.trains.push(node.byte_range());
            }
        }
        self.scopes.push(Scope {
            name,
            class,
            parent: Some(parent),
            is_class,
        });
        let id = self.scopes.len() - 1;
        self.push(node, Frame::Scope(id));
    }

    /// The condition of an `if`/`elif`, registered once per node (both branches share it).
    fn cond_of(&mut self, stmt: Node) -> Option<usize> {
        if !matches!(stmt.kind(), "if_statement" | "elif_clause") {
            return None;
        }
        if let Some(&id) = self.cond_ids.get(&stmt.id()) {
            return Some(id);
        }
        let cond = stmt.child_by_field_name("condition")?;
        let accum = self.accum_test(cond, true);
        self.conds.push(Cond { accum });
        let id = self.conds.len() - 1;
        self.cond_ids.insert(stmt.id(), id);
        Some(id)
    }

    /// Whether `cond` tests `i % N` (directly, negated, or through a name holding such a test).
    /// Returns N and whether the test is true on the boundary step.
    fn accum_test(&self, cond: Node, polarity: bool) -> Option<(String, Range<usize>, bool)> {
        self.accum_test_at(unparen(cond), polarity, 0)
    }

    fn accum_test_at(
        &self,
        cond: Node,
        polarity: bool,
        depth: usize,
    ) -> Option<(String, Range<usize>, bool)> {
        if depth > 8 {
            return None;
        }
        match cond.kind() {
            "parenthesized_expression" => self.accum_test_at(unparen(cond), polarity, depth + 1),
            "not_operator" => self.accum_test_at(
                unparen(cond.child_by_field_name("argument")?),
                !polarity,
                depth + 1,
            ),
            "boolean_operator" => {
                let op = cond.child_by_field_name("operator").map(|o| self.text(o));
                let l = self.accum_test_at(
                    unparen(cond.child_by_field_name("left")?),
                    polarity,
                    depth + 1,
                );
                let r = self.accum_test_at(
                    unparen(cond.child_by_field_name("right")?),
                    polarity,
                    depth + 1,
                );
                // `a or is_last` still steps on the boundary; `a and b` too.
                match op {
                    Some("or") | Some("and") => l.or(r),
                    _ => None,
                }
            }
            "identifier" | "attribute" => {
                let name = self.text(cond);
                let scope = self.scope();
                self.test_names
                    .get(&(scope, name.to_string()))
                    .map(|(f, s, b)| (f.clone(), s.clone(), *b == polarity))
            }
            "comparison_operator" => {
                let mut cur = cond.walk();
                let kids: Vec<Node> = cond.children(&mut cur).collect();
                if kids.len() != 3 {
                    return None;
                }
                let op = self.text(kids[1]);
                let m = self.modulo(kids[0]).or_else(|| self.modulo(kids[2]))?;
                let eq = match op {
                    "==" => true,
                    "!=" => false,
                    _ => return None,
                };
                // `i % N == 0` and `i % N == N - 1` both mark one step in N as the boundary.
                Some((m.0, m.1, eq == polarity))
            }
            "binary_operator" => {
                // Bare `if (i + 1) % N:` is true on the non-boundary steps.
                let m = self.modulo(cond)?;
                Some((m.0, m.1, !polarity))
            }
            _ => None,
        }
    }

    /// `x % N` → N.
    fn modulo(&self, node: Node) -> Option<(String, Range<usize>)> {
        let node = unparen(node);
        if node.kind() != "binary_operator" {
            return None;
        }
        let op = node.child_by_field_name("operator")?;
        if self.text(op) != "%" {
            return None;
        }
        let right = unparen(node.child_by_field_name("right")?);
        let text = self.text(right).to_string();
        if parse_number(&text) == Some(1.0) || right.kind() == "string" {
            return None;
        }
        Some((text, right.byte_range()))
    }

    // ---- expressions ----------------------------------------------------------------------

    fn lower(&self, node: Node, depth: usize) -> Lin {
        let span = node.byte_range();
        if depth > MAX_EXPR_DEPTH {
            return Lin::opaque(self.text(node), span, &[]);
        }
        match node.kind() {
            "integer" | "float" => match parse_number(self.text(node)) {
                Some(v) => Lin::constant(v, Some(span)),
                None => Lin::opaque(self.text(node), span, &[]),
            },
            "parenthesized_expression" => match node.named_child(0) {
                Some(inner) => self.lower(inner, depth + 1),
                None => Lin::opaque("()", span, &[]),
            },
            "identifier" | "attribute" => self.name(node),
            "unary_operator" => {
                let arg = node
                    .child_by_field_name("argument")
                    .map(|a| self.lower(a, depth + 1))
                    .unwrap_or_default();
                let op = node.child_by_field_name("operator").map(|o| self.text(o));
                if op == Some("-") {
                    arg.negated()
                } else {
                    arg
                }
            }
            "binary_operator" => self.binary(node, depth),
            "call" => {
                // Numeric wrappers are transparent: `int(x)`, `float(x)`, `math.ceil(x)`, `round(x, 1)`.
                let func = node
                    .child_by_field_name("function")
                    .map(|f| self.text(f))
                    .unwrap_or("");
                let transparent = matches!(
                    func,
                    "int"
                        | "float"
                        | "round"
                        | "math.ceil"
                        | "math.floor"
                        | "ceil"
                        | "floor"
                        | "abs"
                );
                let first = node
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0))
                    .filter(|a| a.kind() != "keyword_argument");
                match (transparent, first) {
                    (true, Some(arg)) => self.lower(arg, depth + 1),
                    _ => Lin::opaque(self.text(node), span, &[]),
                }
            }
            _ => Lin::opaque(self.text(node), span, &[]),
        }
    }

    fn binary(&self, node: Node, depth: usize) -> Lin {
        let span = node.byte_range();
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

    /// A name, replaced by its lowered value when it was assigned a linear value in scope.
    fn name(&self, node: Node) -> Lin {
        let text = self.text(node);
        let span = node.byte_range();
        if let Some(value) = self.lookup(text) {
            return Lin::read(text, span, Some(&value));
        }
        let scope = self.scope();
        if self
            .gpu_names
            .iter()
            .any(|(s, n)| n == text && (*s == scope || n.starts_with("self.")))
        {
            return Lin::symbol(text, span).with_role(Role::Gpu);
        }
        Lin::symbol(text, span)
    }

    fn lookup(&self, name: &str) -> Option<Lin> {
        let mut scope = Some(self.scope());
        if name.starts_with("self.") {
            let class = self.scopes.get(self.scope()).and_then(|s| s.class)?;
            return self.env.get(&(class, name.to_string())).cloned();
        }
        while let Some(s) = scope {
            if let Some(v) = self.env.get(&(s, name.to_string())) {
                return Some(v.clone());
            }
            scope = self.scopes.get(s).and_then(|sc| sc.parent);
        }
        None
    }

    fn bind(&mut self, name: &str, value: &Lin) {
        let key_scope = if name.starts_with("self.") {
            match self.scopes.get(self.scope()).and_then(|s| s.class) {
                Some(c) => c,
                None => return,
            }
        } else {
            self.scope()
        };
        let key = (key_scope, name.to_string());
        if value.is_linear() {
            self.env.insert(key, value.clone());
        } else {
            self.env.remove(&key);
        }
    }

    // ---- statements -------------------------------------------------------------------------

    fn assignment(&mut self, node: Node) {
        let (Some(left), Some(right)) = (
            node.child_by_field_name("left"),
            node.child_by_field_name("right"),
        ) else {
            return;
        };
        let target = self.text(left).to_string();
        let simple_target = matches!(left.kind(), "identifier" | "attribute");
        // Evidence in assignments.
        let rtext = self.text(right);
        if target.ends_with("requires_grad") && rtext == "False" {
            self.facts.evidence.frozen.push(node.byte_range());
        }
        if right.kind() == "call" {
            if let Some(f) = right.child_by_field_name("function") {
                let last = last_segment(self.text(f)).to_ascii_lowercase();
                if OPTIMIZER_CLASSES.contains(&last.as_str()) && simple_target {
                    self.optimizer_names.push(target.clone());
                }
            }
        }
        if !simple_target {
            return;
        }
        // Accumulation tests stored in a name.
        if let Some(test) = self.accum_test(right, true) {
            let scope = self.scope();
            self.test_names.insert((scope, target.clone()), test);
        }
        // Loss provenance.
        let scaling = self.loss_scaling(right, 0);
        let scope = self.scope();
        self.loss_defs
            .entry((scope, target.clone()))
            .or_default()
            .push((node.start_byte(), scaling));

        let lin = self.lower(right, 0);
        if lin.terms.iter().all(|t| t.opaque) && reads_device_memory(rtext) {
            self.gpu_names.push((scope, target.clone()));
        }
        self.record_formula(
            FormulaKind::Assign {
                target: target.clone(),
                role: role_of(&target),
            },
            &lin,
            right.byte_range(),
        );
        self.bind(&target, &lin);
    }

    fn augmented(&mut self, node: Node) {
        let (Some(left), Some(right), Some(op)) = (
            node.child_by_field_name("left"),
            node.child_by_field_name("right"),
            node.child_by_field_name("operator"),
        ) else {
            return;
        };
        let target = self.text(left).to_string();
        let op = self.text(op).trim_end_matches('=').to_string();
        let scope = self.scope();
        if op == "/" || op == "//" || (op == "*" && is_count_like(self.text(right))) {
            self.loss_defs
                .entry((scope, target.clone()))
                .or_default()
                .push((node.start_byte(), Scaling::Scaled));
        }
        if left.kind() == "identifier" || left.kind() == "attribute" {
            let current = self.name(left);
            let rhs = self.lower(right, 0);
            let lin = Lin::binary(&op, current, rhs, self.text(node), node.byte_range());
            // A running sum (`total += part`) is not a statement of what training needs.
            self.record_formula(FormulaKind::Expr, &lin, node.byte_range());
            self.bind(&target, &lin);
        }
    }

    fn ret(&mut self, node: Node) {
        let Some(value) = node.named_child(0) else {
            return;
        };
        let scope = self.scope();
        let function = self
            .scopes
            .get(scope)
            .map(|s| s.name.clone())
            .unwrap_or_default();
        if function.is_empty() {
            return;
        }
        let scaling = self.loss_scaling(value, 0);
        let entry = self
            .returns_scaled
            .entry(function.clone())
            .or_insert(scaling);
        if scaling == Scaling::Scaled {
            *entry = Scaling::Scaled;
        }
        let lin = self.lower(value, 0);
        self.record_formula(
            FormulaKind::Return {
                role: role_of(&function),
                function,
            },
            &lin,
            value.byte_range(),
        );
    }

    fn comparison(&mut self, node: Node) {
        let mut cur = node.walk();
        let kids: Vec<Node> = node.children(&mut cur).collect();
        if kids.len() != 3 || !matches!(self.text(kids[1]), "<" | "<=" | ">" | ">=") {
            return;
        }
        let a = self.lower(kids[0], 0);
        let b = self.lower(kids[2], 0);
        self.record_formula(
            FormulaKind::Compare { other: b.clone() },
            &a,
            kids[0].byte_range(),
        );
        self.record_formula(FormulaKind::Compare { other: a }, &b, kids[2].byte_range());
    }

    /// Keep only what could be memory arithmetic: something sized by the model.
    fn record_formula(&mut self, kind: FormulaKind, lin: &Lin, span: Range<usize>) {
        if lin.is_sized() {
            self.facts.formulas.push(Formula {
                kind,
                lin: lin.clone(),
                span,
            });
        }
    }

    // ---- calls and evidence ------------------------------------------------------------------

    fn keyword(&mut self, node: Node) {
        let (Some(name), Some(value)) = (
            node.child_by_field_name("name"),
            node.child_by_field_name("value"),
        ) else {
            return;
        };
        let key = self.text(name);
        let v = self.text(value);
        if value.kind() == "string" || matches!(v, "True" | "False") {
            flag_evidence(
                key,
                &v.to_ascii_lowercase(),
                node.byte_range(),
                &mut self.facts.evidence,
            );
        }
        if matches!(key, "torch_dtype" | "dtype")
            && (v.contains("bfloat16") || v.contains("float16"))
        {
            self.facts.evidence.precision.push(Mention {
                value: Precision::Pure16,
                span: node.byte_range(),
            });
        }
        if key == "load_in_4bit" || key == "load_in_8bit" {
            self.facts.evidence.lora.push(node.byte_range());
        }
    }

    fn call(&mut self, node: Node) {
        let Some(func) = node.child_by_field_name("function") else {
            return;
        };
        let callee = self.text(func);
        // Names are compared with short words: read from the callee's end (`f(1)(1)(1)...` has no
        // dot, and each level reading its whole callee is quadratic).
        let last = last_segment(clip_tail(callee));
        let lower = last.to_ascii_lowercase();
        let span = node.byte_range();
        let args = node.child_by_field_name("arguments");
        if last == "add_argument" {
            self.argparse_default(node);
        }
        let src = self.src;
        let t = |n: Node| src.get(n.byte_range()).unwrap_or("");
        let ev = &mut self.facts.evidence;

        if OPTIMIZER_CLASSES.contains(&lower.as_str()) && starts_upper(last) {
            let mut m = OptimizerMention {
                name: lower.clone(),
                momentum: None,
                amsgrad: false,
                beta1: false,
            };
            if let Some(args) = args {
                let mut c = args.walk();
                for a in args.named_children(&mut c) {
                    if a.kind() != "keyword_argument" {
                        continue;
                    }
                    let k = a.child_by_field_name("name").map(t).unwrap_or("");
                    let v = a.child_by_field_name("value").map(t).unwrap_or("");
                    match k {
                        "momentum" => m.momentum = Some(parse_number(v).unwrap_or(f64::NAN)),
                        "amsgrad" => m.amsgrad = v == "True",
                        "beta1" => m.beta1 = v != "None",
                        _ => {}
                    }
                }
            }
            ev.optimizers.push(Mention {
                value: m,
                span: span.clone(),
            });
            ev.trains.push(span.clone());
        }
        match last {
            "LoraConfig"
            | "get_peft_model"
            | "prepare_model_for_kbit_training"
            | "PeftModel"
            | "LoRAConfig"
            | "inject_adapter_in_model" => ev.lora.push(span.clone()),
            "FullyShardedDataParallel"
            | "FSDP"
            | "fully_shard"
            | "ShardingStrategy"
            | "DeepSpeedPlugin"
            | "FSDPStrategy"
            | "DeepSpeedStrategy" => ev.sharding.push(span.clone()),
            "Accelerator" => ev.frameworks.push(Mention {
                value: Framework::Accelerate,
                span: span.clone(),
            }),
            "Trainer" | "Seq2SeqTrainer" | "SFTTrainer" | "DPOTrainer" | "GRPOTrainer" => {
                ev.trains.push(span.clone());
                ev.frameworks.push(Mention {
                    value: if callee.contains("lightning")
                        || callee.starts_with("pl.")
                        || callee.starts_with("L.")
                    {
                        Framework::Lightning
                    } else {
                        Framework::HfTrainer
                    },
                    span: span.clone(),
                });
            }
            "generate" | "inference_mode" | "no_grad" => ev.inference.push(span.clone()),
            "requires_grad_" if args.is_some_and(|a| clip(t(a)).contains("False")) => {
                ev.frozen.push(span.clone())
            }
            "autocast" => ev.precision.push(Mention {
                value: Precision::Amp,
                span: span.clone(),
            }),
            "bfloat16" | "half" if callee.contains('.') => ev.precision.push(Mention {
                value: Precision::Pure16,
                span: span.clone(),
            }),
            "to" if args.is_some_and(|a| {
                let t = clip(t(a));
                t.contains("bfloat16") || t.contains("float16")
            }) =>
            {
                ev.precision.push(Mention {
                    value: Precision::Pure16,
                    span: span.clone(),
                })
            }
            _ => {}
        }
        if callee == "deepspeed.initialize" {
            ev.frameworks.push(Mention {
                value: Framework::DeepSpeed,
                span: span.clone(),
            });
            ev.sharding.push(span.clone());
        }

        // Training-loop events.
        if last == "step" && func.kind() == "attribute" {
            let recv = func
                .child_by_field_name("object")
                .map(|o| self.text(o))
                .unwrap_or("");
            let is_scaler = last_segment(recv).contains("scaler");
            if self.is_optimizer_ref(recv) || is_scaler {
                self.facts.evidence.trains.push(span.clone());
                let ctx = self.ctx();
                self.calls.push(CallEvent {
                    ctx,
                    kind: CallKind::Step,
                    span,
                });
            }
        } else if last == "backward" && func.kind() == "attribute" {
            self.facts.evidence.trains.push(span.clone());
            // `accelerator.backward(loss)`, `engine.backward(loss)`: the framework's backward,
            // which takes the loss as an argument; `loss.backward()` takes none.
            let positional = args.map_or(0, |a| {
                let mut c = a.walk();
                a.named_children(&mut c)
                    .filter(|n| !matches!(n.kind(), "keyword_argument" | "comment"))
                    .count()
            });
            if positional == 0 {
                if let Some(recv) = func.child_by_field_name("object") {
                    self.backward(recv, span);
                }
            }
        } else if lower.contains("scale_grads")
            || ((last == "div_" || last == "mul_") && clip_tail(callee).contains("grad"))
        {
            let ctx = self.ctx();
            self.calls.push(CallEvent {
                ctx,
                kind: CallKind::GradRescale,
                span,
            });
        }
    }

    fn is_optimizer_ref(&self, recv: &str) -> bool {
        if self.optimizer_names.iter().any(|n| n == recv) {
            return true;
        }
        let last = last_segment(recv).to_ascii_lowercase();
        (last.contains("optim")
            || last == "opt"
            || last.starts_with("opt_")
            || last.ends_with("_opt"))
            && !last.contains("sched")
    }

    /// `X.backward()`: X is the loss, or `scaler.scale(loss)`.
    fn backward(&mut self, recv: Node, span: Range<usize>) {
        let recv = unparen(recv);
        // Framework backward calls (`accelerator.backward(loss)`) are not `loss.backward()`.
        let mut loss = recv;
        if recv.kind() == "call" {
            let f = recv
                .child_by_field_name("function")
                .map(|f| self.text(f))
                .unwrap_or("");
            if last_segment(f) == "scale" {
                match recv
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0))
                {
                    Some(arg) => loss = unparen(arg),
                    None => return,
                }
            } else if matches!(last_segment(f), "mean" | "sum") {
                if let Some(obj) = recv
                    .child_by_field_name("function")
                    .and_then(|f| f.child_by_field_name("object"))
                {
                    loss = unparen(obj);
                }
            }
        }
        let scaling = self.loss_scaling(loss, 0);
        let ctx = self.ctx();
        self.calls.push(CallEvent {
            ctx,
            kind: CallKind::Backward {
                loss: loss.byte_range(),
                loss_text: self.text(loss).to_string(),
                scaling,
            },
            span,
        });
    }

    /// How a loss value was produced.
    fn loss_scaling(&self, node: Node, depth: usize) -> Scaling {
        let node = unparen(node);
        if depth > 4 {
            return Scaling::Unknown;
        }
        match node.kind() {
            "binary_operator" => {
                let op = node
                    .child_by_field_name("operator")
                    .map(|o| self.text(o))
                    .unwrap_or("");
                let right = node.child_by_field_name("right");
                let left = node.child_by_field_name("left");
                match op {
                    "/" | "//" => Scaling::Scaled,
                    "*" if right.is_some_and(|r| is_count_like(self.text(r)))
                        || left.is_some_and(|l| is_count_like(self.text(l))) =>
                    {
                        Scaling::Scaled
                    }
                    "+" | "-" | "*" => {
                        let a = left.map_or(Scaling::Unknown, |l| self.loss_scaling(l, depth + 1));
                        let b = right.map_or(Scaling::Unknown, |r| self.loss_scaling(r, depth + 1));
                        match (a, b) {
                            (Scaling::Scaled, _) | (_, Scaling::Scaled) => Scaling::Scaled,
                            (Scaling::Unscaled, Scaling::Unscaled) => Scaling::Unscaled,
                            (Scaling::Unscaled, _) | (_, Scaling::Unscaled) if op == "*" => {
                                Scaling::Unknown
                            }
                            (Scaling::Unscaled, Scaling::Unknown)
                            | (Scaling::Unknown, Scaling::Unscaled) => {
                                // `loss + aux_weight * aux` : the constant part is irrelevant.
                                Scaling::Unscaled
                            }
                            _ => Scaling::Unknown,
                        }
                    }
                    _ => Scaling::Unknown,
                }
            }
            "identifier" | "attribute" => {
                let text = self.text(node);
                if node.kind() == "attribute" && last_segment(text) == "loss" && text != "self.loss"
                {
                    // `outputs.loss`: a model output's mean loss.
                    return Scaling::Unscaled;
                }
                match self.loss_def(text, node.start_byte()) {
                    Some(s) => s,
                    None => Scaling::Unknown,
                }
            }
            "subscript" => {
                let t = self.text(node);
                if t.ends_with("[\"loss\"]")
                    || t.ends_with("['loss']")
                    || t.ends_with("[0]") && t.contains("model(")
                {
                    Scaling::Unscaled
                } else {
                    Scaling::Unknown
                }
            }
            "call" => {
                let f = node
                    .child_by_field_name("function")
                    .map(|f| self.text(f))
                    .unwrap_or("");
                let last = last_segment(f);
                let lower = last.to_ascii_lowercase();
                if let Some(s) = self.returns_scaled.get(last) {
                    return *s;
                }
                if matches!(last, "mean" | "sum" | "float" | "squeeze" | "to" | "clone") {
                    if let Some(obj) = node
                        .child_by_field_name("function")
                        .and_then(|f| f.child_by_field_name("object"))
                    {
                        return self.loss_scaling(obj, depth + 1);
                    }
                }
                let known_loss = lower.contains("criterion")
                    || lower.contains("loss_fn")
                    || lower.contains("loss_func")
                    || lower.ends_with("_loss")
                    || lower.ends_with("loss")
                    || lower.contains("cross_entropy")
                    || f.starts_with("F.")
                    || f.starts_with("nn.functional.")
                    || f.starts_with("torch.nn.functional.");
                // A helper named like a loss but defined elsewhere may scale inside: only the
                // loss functions of torch and plain criterion objects are known to be unscaled.
                let defined_here = self.scopes.iter().any(|s| s.name == last);
                if known_loss
                    && !defined_here
                    && !lower.starts_with("compute")
                    && !lower.contains("step")
                {
                    Scaling::Unscaled
                } else {
                    Scaling::Unknown
                }
            }
            _ => Scaling::Unknown,
        }
    }

    /// The latest definition of `name` in scope before `before`.
    fn loss_def(&self, name: &str, before: usize) -> Option<Scaling> {
        let mut scope = Some(self.scope());
        while let Some(s) = scope {
            if let Some(defs) = self.loss_defs.get(&(s, name.to_string())) {
                // Any scaling of the name before the use counts (`loss /= n` after `loss = f(x)`).
                let prior: Vec<_> = defs.iter().filter(|(at, _)| *at < before).collect();
                if prior.iter().any(|(_, sc)| *sc == Scaling::Scaled) {
                    return Some(Scaling::Scaled);
                }
                if let Some((_, last)) = prior.last() {
                    return Some(*last);
                }
            }
            scope = self.scopes.get(s).and_then(|sc| sc.parent);
        }
        None
    }

    /// `parser.add_argument("--optim", default="adamw")`.
    fn argparse_default(&mut self, node: Node) {
        let Some(args) = node.child_by_field_name("arguments") else {
            return;
        };
        let mut c = args.walk();
        let mut flag = None;
        let mut default = None;
        for a in args.named_children(&mut c) {
            match a.kind() {
                "string" if flag.is_none() => {
                    flag = Some(self.text(a).trim_matches(['"', '\'']).to_string())
                }
                "keyword_argument" => {
                    let k = a.child_by_field_name("name").map(|n| self.text(n));
                    if k == Some("default") {
                        default = a.child_by_field_name("value");
                    }
                }
                _ => {}
            }
        }
        if let (Some(flag), Some(d)) = (flag, default) {
            if d.kind() == "string" {
                let v = self.text(d).to_string();
                flag_evidence(&flag, &v, d.byte_range(), &mut self.facts.evidence);
            }
        }
    }

    // ---- assembling loops ----------------------------------------------------------------------

    fn finish(mut self) -> Facts {
        let mut loops: Vec<AccumLoop> = Vec::new();
        for step in self
            .calls
            .iter()
            .filter(|c| matches!(c.kind, CallKind::Step))
        {
            // The innermost branch guarding the step with an accumulation test.
            let Some((cond_pos, (factor, _span, _))) = step
                .ctx
                .branches
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, (c, taken))| {
                    let t = self.conds.get(*c)?.accum.clone()?;
                    (t.2 == *taken).then_some((i, t))
                })
            else {
                continue;
            };
            let Some(&loop_id) = step.ctx.loops.last() else {
                continue;
            };
            let boundary = step.ctx.branches[cond_pos];
            let Some(header) = self.loops.get(loop_id).cloned() else {
                continue;
            };
            let existing = loops.iter_mut().find(|l| l.header == header);
            let lp = match existing {
                Some(l) => l,
                None => {
                    loops.push(AccumLoop {
                        header: header.clone(),
                        factor_is_simple: is_simple_factor(&factor),
                        factor,
                        steps: Vec::new(),
                        backwards: Vec::new(),
                        grads_rescaled: false,
                    });
                    let Some(l) = loops.last_mut() else { continue };
                    // Micro-step events: same loop (or nested in it), same function, not behind
                    // the boundary branch.
                    for ev in &self.calls {
                        let inside =
                            ev.ctx.scope == step.ctx.scope && ev.ctx.loops.contains(&loop_id);
                        if !inside {
                            continue;
                        }
                        let on_boundary = ev.ctx.branches.contains(&boundary);
                        match &ev.kind {
                            CallKind::Backward {
                                loss,
                                loss_text,
                                scaling,
                            } if !on_boundary => l.backwards.push(Backward {
                                call: ev.span.clone(),
                                loss: loss.clone(),
                                loss_text: loss_text.clone(),
                                scaling: *scaling,
                            }),
                            CallKind::GradRescale => l.grads_rescaled = true,
                            _ => {}
                        }
                    }
                    l
                }
            };
            lp.steps.push(step.span.clone());
        }
        self.facts.loops = loops;
        self.facts
    }
}

/// An expression that reads how much memory the device has.
fn reads_device_memory(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "total_memory",
        "mem_get_info",
        "get_device_properties",
        "device_gb",
        "device_memory",
        "gpu_memory",
        "vram",
    ]
    .iter()
    .any(|w| t.contains(w))
}

fn unparen(mut node: Node) -> Node {
    while node.kind() == "parenthesized_expression" {
        match node.named_child(0) {
            Some(inner) => node = inner,
            None => break,
        }
    }
    node
}

fn last_segment(s: &str) -> &str {
    s.rsplit('.').next().unwrap_or(s)
}

fn starts_upper(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
}

fn line_end(src: &str, from: usize) -> usize {
    src[from..].find('\n').map_or(src.len(), |i| from + i)
}

fn is_simple_factor(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// A multiplier that normalises by counts (`loss * num_tokens`) rather than a constant weight.
fn is_count_like(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "token",
        "num_items",
        "count",
        "n_items",
        "numel",
        "batch_size",
        "world_size",
        "accum",
        "gradient_accumulation",
    ]
    .iter()
    .any(|w| t.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_formula_is_lowered_through_self_attributes() {
        let src = "class C:\n    def __init__(self):\n        self.model_size_gb = 14\n    def f(self, available_memory_gb):\n        memory_for_batch = available_memory_gb - (self.model_size_gb * 2)\n";
        let facts = extract(src);
        let f = facts
            .formulas
            .iter()
            .find(|f| matches!(&f.kind, FormulaKind::Assign { target, .. } if target == "memory_for_batch"));
        let f = f.expect("budget formula");
        assert_eq!(f.lin.terms.len(), 2);
        assert_eq!(f.lin.terms[1].coef, -2.0);
        assert_eq!(f.lin.terms[1].value, Some(14.0));
    }

    #[test]
    fn accumulating_loop_with_unscaled_loss() {
        let src = "for i, b in enumerate(loader):\n    loss = criterion(model(b), b)\n    loss.backward()\n    if (i + 1) % accum_steps == 0:\n        optimizer.step()\n        optimizer.zero_grad()\n";
        let facts = extract(src);
        assert_eq!(facts.loops.len(), 1);
        let lp = &facts.loops[0];
        assert_eq!(lp.factor, "accum_steps");
        assert_eq!(lp.backwards.len(), 1);
        assert_eq!(lp.backwards[0].scaling, Scaling::Unscaled);
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let src = format!("x = {}1{}\n", "(".repeat(100_000), ")".repeat(100_000));
        let _ = extract(&src);
    }
}
