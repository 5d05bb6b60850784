//! Python: tree-sitter-python, one parse and one iterative walk per file. The walk keeps a stack of
//! the scopes, loops and branches it is in; handlers at assignments, calls, comparisons and returns
//! lower what they see into facts. Accumulating loops are assembled from the recorded events after
//! the walk.

use super::loops::{self, AccumTest, Branch, CallEvent, CallKind, Ctx, LoopInfo};
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
pub fn parse(text: &str) -> Result<Tree, String> {
    super::parse_with(&PARSER, tree_sitter_python::LANGUAGE.into(), text)
}

pub fn extract(text: &str) -> Result<Facts, String> {
    let blanked = blank_long_comment_runs(text);
    let tree = parse(blanked.as_ref().map_or(text, |(t, _)| t.as_str()))?;
    let mut w = Walker::new(text);
    w.walk(&tree);
    let mut facts = w.finish();
    if let Some((_, comments)) = blanked {
        // The blanked lines that were comments (not lines of a string) are comments still.
        let root = tree.root_node();
        let in_string = |at: usize| {
            let mut node = root.descendant_for_byte_range(at, at);
            while let Some(n) = node {
                if n.kind() == "string" {
                    return true;
                }
                node = n.parent();
            }
            false
        };
        facts.comments.extend(
            comments
                .into_iter()
                .filter(|r| !in_string(r.start))
                .map(|range| Comment {
                    text: text[range.clone()].to_string(),
                    range,
                }),
        );
        facts.comments.sort_by_key(|c| c.range.start);
    }
    facts.syntax_error = tree.root_node().has_error();
    Ok(facts)
}

/// A run of comment lines costs tree-sitter-python its length at every line (it looks ahead for
/// the next line's indentation), so a run this large in lines x bytes is parsed as blank lines.
const COMMENT_RUN_COST: usize = 1 << 20;

/// The text with the comments of costly comment runs replaced by spaces (same offsets, still
/// UTF-8), and the blanked comments' ranges; `None` when no run is costly.
fn blank_long_comment_runs(text: &str) -> Option<(String, Vec<Range<usize>>)> {
    let bytes = text.as_bytes();
    let mut costly: Vec<Range<usize>> = Vec::new();
    let mut run: Vec<Range<usize>> = Vec::new();
    let mut run_bytes = 0;
    let mut close = |run: &mut Vec<Range<usize>>, run_bytes: &mut usize| {
        if run.len() * *run_bytes >= COMMENT_RUN_COST {
            costly.append(run);
        }
        run.clear();
        *run_bytes = 0;
    };
    let mut start = 0;
    while start < bytes.len() {
        let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |e| start + e);
        let line = &bytes[start..end];
        let indent = line
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\x0c' | b'\r'));
        match indent.map(|i| line[i]) {
            Some(b'#') => {
                run.push(start + indent.unwrap_or(0)..end);
                run_bytes += line.len() + 1;
            }
            // Blank lines neither end a run nor count in it.
            None => {}
            Some(_) => close(&mut run, &mut run_bytes),
        }
        start = end + 1;
    }
    close(&mut run, &mut run_bytes);
    if costly.is_empty() {
        return None;
    }
    let mut blanked = bytes.to_vec();
    for r in &costly {
        blanked[r.clone()].fill(b' ');
    }
    String::from_utf8(blanked).ok().map(|t| (t, costly))
}

/// A division by the accumulation factor: the divisor as written, and how to undo it.
type DivisionBy = (String, Division);

/// The unit a division converts to, and the divisor as written when it is one operand.
type UnitDivision = (Unit, Option<(String, Range<usize>)>);

/// Per name and scope, in source order: where it was assigned, under which branches, and whether
/// that divided it.
type Divisions = HashMap<(usize, String), Vec<(usize, Vec<Branch>, Option<DivisionBy>)>>;

#[derive(Clone, Debug)]
enum Frame {
    Scope(usize),
    Loop(usize),
    Branch(usize, bool),
    /// A `with` block; `Some(id)` for `with accelerator.accumulate(...)`; whether it turns off
    /// gradients.
    With(Option<usize>, bool),
}

#[derive(Debug)]
struct Scope {
    name: String,
    /// Enclosing class scope for methods (where `self.x` lives).
    class: Option<usize>,
    parent: Option<usize>,
    is_class: bool,
    /// A `LightningModule` subclass.
    lightning: bool,
    /// A function for inference: decorated with `no_grad`/`inference_mode`, or named for
    /// generation or serving.
    inference: bool,
}

/// `if (i + 1) % N != 0: continue` inside a loop: what follows in the loop is the boundary.
#[derive(Debug)]
struct Guard {
    loop_id: usize,
    cond: usize,
    after: usize,
}

struct Walker<'s> {
    src: &'s str,
    stack: Vec<(usize, Frame)>,
    scopes: Vec<Scope>,
    /// The accumulation test each `if` makes, by condition id.
    conds: Vec<Option<AccumTest>>,
    /// Whether each condition reads the accumulation factor (`if args.gas > 1:`).
    cond_reads_factor: Vec<bool>,
    /// The strings each condition compares a name with (`dtype == "bf16"`, `opt in ("adam", "adamw")`).
    cond_keys: Vec<Vec<String>>,
    /// Tables built from the arms of `if` chains, by scope and assigned name.
    branch_tables: HashMap<(usize, String), usize>,
    /// Units of names assigned a converted value (`free_gib = free / 2**30`).
    name_units: HashMap<(usize, String), Unit>,
    cond_ids: HashMap<usize, usize>,
    loops: Vec<LoopInfo>,
    guards: Vec<Guard>,
    accumulate_blocks: usize,
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
    /// Names bound to learning-rate schedulers and to DeepSpeed engines.
    scheduler_names: Vec<String>,
    engine_names: Vec<String>,
    /// Per name, in source order: whether each assignment divided it (`loss = loss / n`).
    divisions: Divisions,
    /// `Accelerator(...)` constructions and their `gradient_accumulation_steps` as written.
    accelerators: Vec<Option<String>>,
    /// The latest right-hand side assigned to each name, as written (to follow a schedule length
    /// back to what it counts).
    assigned_text: HashMap<String, &'s str>,
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
                lightning: false,
                inference: false,
            }],
            conds: Vec::new(),
            cond_reads_factor: Vec::new(),
            cond_keys: Vec::new(),
            branch_tables: HashMap::new(),
            name_units: HashMap::new(),
            cond_ids: HashMap::new(),
            loops: Vec::new(),
            guards: Vec::new(),
            accumulate_blocks: 0,
            env: HashMap::new(),
            loss_defs: HashMap::new(),
            test_names: HashMap::new(),
            returns_scaled: HashMap::new(),
            gpu_names: Vec::new(),
            optimizer_names: Vec::new(),
            scheduler_names: Vec::new(),
            engine_names: Vec::new(),
            divisions: HashMap::new(),
            accelerators: Vec::new(),
            assigned_text: HashMap::new(),
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

    /// Where a call at byte `at` sits: loops, branches (and `continue` guards already passed) and
    /// the accumulate block around it.
    fn ctx(&self, at: usize) -> Ctx {
        let mut ctx = Ctx {
            scope: self.scope(),
            ..Ctx::default()
        };
        for (_, f) in &self.stack {
            match f {
                // A nested function starts a fresh loop context.
                Frame::Scope(_) => {
                    ctx = Ctx {
                        scope: ctx.scope,
                        ..Ctx::default()
                    }
                }
                Frame::Loop(l) => {
                    ctx.loops.push(*l);
                    for g in self
                        .guards
                        .iter()
                        .filter(|g| g.loop_id == *l && g.after <= at)
                    {
                        ctx.branches.push(Branch {
                            cond: g.cond,
                            taken: false,
                            depth: ctx.loops.len(),
                        });
                    }
                }
                Frame::Branch(c, b) => ctx.branches.push(Branch {
                    cond: *c,
                    taken: *b,
                    depth: ctx.loops.len(),
                }),
                Frame::With(Some(block), _) => ctx.accumulate = Some((*block, ctx.branches.len())),
                Frame::With(None, _) => {}
            }
        }
        ctx
    }

    fn enter(&mut self, node: Node<'_>, field: Option<&str>) {
        match node.kind() {
            "comment" => self.facts.comments.push(Comment {
                text: self.text(node).to_string(),
                range: node.byte_range(),
            }),
            "function_definition" | "class_definition" => {
                if node.kind() == "class_definition" {
                    super::python_config::class_defaults(node, self.src, &mut self.facts);
                }
                self.enter_scope(node)
            }
            // Only a dict on the right of an assignment can be a named config; asking any other
            // dict for its parent would walk down from the root each time.
            "dictionary" if field == Some("right") => {
                super::python_config::dict(node, self.src, &mut self.facts);
                self.dictionary(node, true);
            }
            "dictionary" => self.dictionary(node, false),
            "for_statement" | "while_statement" => {
                let id = self.loops.len();
                self.loops.push(LoopInfo {
                    header: node.start_byte()..line_end(self.src, node.start_byte()),
                    micro_factor: self.micro_factor(node),
                });
                self.push(node, Frame::Loop(id));
            }
            "if_statement" => self.continue_guard(node),
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
                let no_grad = items.contains("no_grad") || items.contains("inference_mode");
                if no_grad {
                    self.facts.evidence.inference.push(node.byte_range());
                }
                if items.contains("autocast") {
                    self.facts.evidence.precision.push(Mention {
                        value: Precision::Amp,
                        span: node.byte_range(),
                    });
                }
                let block = items.contains(".accumulate(").then(|| {
                    self.accumulate_blocks += 1;
                    self.accumulate_blocks
                });
                self.push(node, Frame::With(block, no_grad));
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
        let lightning =
            is_class
                && self.facts.evidence.frameworks.last().is_some_and(|f| {
                    f.value == Framework::Lightning && f.span == node.byte_range()
                });
        let decorators: String = node
            .parent()
            .filter(|p| p.kind() == "decorated_definition")
            .map(|p| {
                let mut c = p.walk();
                p.named_children(&mut c)
                    .filter(|d| d.kind() == "decorator")
                    .map(|d| self.text(d))
                    .collect()
            })
            .unwrap_or_default();
        let lower = name.to_ascii_lowercase();
        let inference = !is_class
            && (decorators.contains("no_grad")
                || decorators.contains("inference_mode")
                || ["infer", "generat", "serv", "kv_cache"]
                    .iter()
                    .any(|w| lower.contains(w)));
        self.scopes.push(Scope {
            name,
            class,
            parent: Some(parent),
            is_class,
            lightning,
            inference,
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
        let accum = self
            .accum_test(cond, true)
            .or_else(|| self.counter_test(cond, stmt.child_by_field_name("consequence")?))
            .map(|(factor, _, boundary_when_true)| AccumTest {
                factor,
                boundary_when_true,
            });
        self.conds.push(accum);
        self.cond_reads_factor
            .push(names_accumulation(self.text(cond)));
        self.cond_keys.push(self.compared_strings(cond));
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

    /// `if seen >= N: ...; seen = 0`: a counter compared with N and reset in the branch.
    fn counter_test(&self, cond: Node, body: Node) -> Option<(String, Range<usize>, bool)> {
        let cond = unparen(cond);
        if cond.kind() != "comparison_operator" {
            return None;
        }
        let mut cur = cond.walk();
        let kids: Vec<Node> = cond.children(&mut cur).collect();
        if kids.len() != 3 {
            return None;
        }
        let (counter, n) = match self.text(kids[1]) {
            ">=" | "==" | ">" => (kids[0], kids[2]),
            "<=" => (kids[2], kids[0]),
            _ => return None,
        };
        if !matches!(counter.kind(), "identifier" | "attribute")
            || matches!(parse_number(self.text(n)), Some(v) if v <= 1.0)
        {
            return None;
        }
        let counter = self.text(counter);
        let mut c = body.walk();
        let resets = body.named_children(&mut c).any(|st| {
            st.named_child(0).is_some_and(|a| {
                a.kind() == "assignment"
                    && a.child_by_field_name("left").map(|l| self.text(l)) == Some(counter)
                    && a.child_by_field_name("right").map(|r| self.text(r)) == Some("0")
            })
        });
        resets.then(|| (self.text(n).to_string(), n.byte_range(), true))
    }

    /// `N` of `for micro in range(N)` when the loop names micro-batches: the variable or `N` says
    /// so (`micro_step`, `accum_steps`, `chunk`). A loop over tasks or layers that happens to run
    /// backwards is not accumulation.
    fn micro_factor(&self, node: Node) -> Option<String> {
        if node.kind() != "for_statement" {
            return None;
        }
        let var = self.text(node.child_by_field_name("left")?);
        let iter = unparen(node.child_by_field_name("right")?);
        if iter.kind() != "call"
            || iter.child_by_field_name("function").map(|f| self.text(f)) != Some("range")
        {
            return None;
        }
        let args = iter.child_by_field_name("arguments")?;
        let mut c = args.walk();
        let args: Vec<Node> = args.named_children(&mut c).collect();
        let n = match args.as_slice() {
            [n] => *n,
            [start, n] if self.text(*start) == "0" => *n,
            _ => return None,
        };
        let n_text = self.text(n);
        if matches!(parse_number(n_text), Some(v) if v <= 1.0) {
            return None;
        }
        (names_micro_batches(var) || names_micro_batches(n_text)).then(|| n_text.to_string())
    }

    /// `if <true on micro-steps>: continue` as the loop's guard for the step that follows.
    fn continue_guard(&mut self, node: Node) {
        if node.child_by_field_name("alternative").is_some() {
            return;
        }
        let Some(body) = node.child_by_field_name("consequence") else {
            return;
        };
        let mut c = body.walk();
        let last = body.named_children(&mut c).last();
        if last.is_none_or(|l| l.kind() != "continue_statement") {
            return;
        }
        let Some(cond) = self.cond_of(node) else {
            return;
        };
        let skips_micro_steps = self
            .conds
            .get(cond)
            .and_then(|t| t.as_ref())
            .is_some_and(|t| !t.boundary_when_true);
        let innermost = self.stack.iter().rev().find_map(|(_, f)| match f {
            Frame::Loop(l) => Some(Some(*l)),
            Frame::Scope(_) => Some(None),
            _ => None,
        });
        if let (true, Some(Some(loop_id))) = (skips_micro_steps, innermost) {
            self.guards.push(Guard {
                loop_id,
                cond,
                after: node.end_byte(),
            });
        }
    }

    /// The strings a condition compares with: `x == "bf16"`, `x in ("fp16", "half")`, joined by
    /// `or`.
    fn compared_strings(&self, cond: Node) -> Vec<String> {
        let cond = unparen(cond);
        match cond.kind() {
            "boolean_operator"
                if cond.child_by_field_name("operator").map(|o| self.text(o)) == Some("or") =>
            {
                let mut keys = Vec::new();
                for side in ["left", "right"] {
                    if let Some(n) = cond.child_by_field_name(side) {
                        keys.extend(self.compared_strings(n));
                    }
                }
                keys
            }
            "comparison_operator" => {
                let mut c = cond.walk();
                let kids: Vec<Node> = cond.children(&mut c).collect();
                if kids.len() != 3 || !matches!(self.text(kids[1]), "==" | "in") {
                    return Vec::new();
                }
                let strings = |n: Node| -> Vec<String> {
                    let n = unparen(n);
                    match n.kind() {
                        "string" => vec![string_key(self.text(n))],
                        "tuple" | "list" | "set" => {
                            let mut c = n.walk();
                            n.named_children(&mut c)
                                .filter(|k| k.kind() == "string")
                                .map(|k| string_key(self.text(k)))
                                .collect()
                        }
                        _ => Vec::new(),
                    }
                };
                let mut keys = strings(kids[2]);
                if keys.is_empty() {
                    keys = strings(kids[0]);
                }
                keys
            }
            _ => Vec::new(),
        }
    }

    /// `{"bf16": 2, "fp32": 4}`: a table when at least two values are numbers.
    fn dictionary(&mut self, node: Node, assigned: bool) {
        let mut c = node.walk();
        let mut entries = Vec::new();
        for pair in node.named_children(&mut c) {
            if pair.kind() != "pair" {
                continue;
            }
            let (Some(k), Some(v)) = (
                pair.child_by_field_name("key"),
                pair.child_by_field_name("value"),
            ) else {
                continue;
            };
            let key = match k.kind() {
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
            return;
        }
        let name = assigned
            .then(|| node.parent())
            .flatten()
            .filter(|p| p.kind() == "assignment")
            .and_then(|p| p.child_by_field_name("left"))
            .map(|l| self.text(l).to_string());
        self.facts.tables.push(Table { name, entries });
    }

    /// A number written as a literal or constant arithmetic (`2`, `0.5`, `4 * 2`).
    fn number(&self, node: Node) -> Option<f64> {
        // Only arithmetic on literals is a number; lowering a nested container would copy its text.
        let arithmetic = matches!(
            node.kind(),
            "integer" | "float" | "unary_operator" | "binary_operator" | "parenthesized_expression"
        );
        if !arithmetic || node.byte_range().len() > 64 {
            return None;
        }
        let lin = self.lower(node, 0);
        (lin.terms.is_empty() && lin.constant.is_finite()).then_some(lin.constant)
    }

    /// `if dtype == "bf16": nbytes = 2` and `nbytes = 2 if dtype == "bf16" else 4`: one entry of
    /// the table the chain builds for `nbytes`.
    fn branch_entry(&mut self, target: &str, right: Node) {
        let t = target.to_ascii_lowercase();
        // The prefilter keeps files with a quoted key only when such a name may be assigned.
        if !["byte", "multiplier"].iter().any(|w| t.contains(w)) {
            return;
        }
        let mut found: Vec<(String, f64, Range<usize>)> = Vec::new();
        if let Some(value) = self.number(right) {
            let innermost = self.stack.iter().rev().find_map(|(_, f)| match f {
                Frame::Branch(c, true) => Some(Some(*c)),
                Frame::Branch(_, false) | Frame::Scope(_) | Frame::Loop(_) => Some(None),
                Frame::With(..) => None,
            });
            if let Some(Some(cond)) = innermost {
                for key in self.cond_keys.get(cond).cloned().unwrap_or_default() {
                    found.push((key, value, right.byte_range()));
                }
            }
        } else if right.kind() == "conditional_expression" {
            let mut c = right.walk();
            let kids: Vec<Node> = right.named_children(&mut c).collect();
            if let [then, cond, _] = kids.as_slice() {
                if let Some(value) = self.number(*then) {
                    for key in self.compared_strings(*cond) {
                        found.push((key, value, then.byte_range()));
                    }
                }
            }
        }
        if found.is_empty() {
            return;
        }
        let key = (self.scope(), target.to_string());
        let index = match self.branch_tables.get(&key) {
            Some(i) => *i,
            None => {
                self.facts.tables.push(Table {
                    name: Some(target.to_string()),
                    entries: Vec::new(),
                });
                let i = self.facts.tables.len() - 1;
                self.branch_tables.insert(key, i);
                i
            }
        };
        if let Some(table) = self.facts.tables.get_mut(index) {
            for (k, value, value_span) in found {
                table.entries.push(TableEntry {
                    key: k,
                    value,
                    value_span,
                });
            }
        }
    }

    /// The unit a division converts to: `x / 1e9` (GB), `x / 1024**3`, `x / 2**30`,
    /// `x / 1024 / 1024 / 1024`, `x >> 30` (GiB), `x * 1e-9`; searched through the expression.
    /// Also the divisor as written when it is a single operand.
    fn unit_division(&self, node: Node, depth: usize) -> Option<UnitDivision> {
        let node = unparen(node);
        if depth > 8 {
            return None;
        }
        match node.kind() {
            "binary_operator" => {
                let op = node.child_by_field_name("operator").map(|o| self.text(o))?;
                let left = node.child_by_field_name("left")?;
                let right = node.child_by_field_name("right")?;
                let found = match op {
                    "/" => {
                        // Along the chain of divisions: `x / 1024 / 1024 / 1024`.
                        let mut divisor = 1.0;
                        let mut at = node;
                        let mut single = None;
                        let mut count = 0;
                        while at.kind() == "binary_operator"
                            && at.child_by_field_name("operator").map(|o| self.text(o)) == Some("/")
                        {
                            let Some(r) = at.child_by_field_name("right") else {
                                break;
                            };
                            let Some(d) = self.number(r) else { break };
                            divisor *= d;
                            count += 1;
                            single = Some((self.text(r).to_string(), r.byte_range()));
                            match at.child_by_field_name("left") {
                                Some(l) => at = unparen(l),
                                None => break,
                            }
                        }
                        unit_of_divisor(divisor)
                            .map(|u| (u, if count == 1 { single } else { None }))
                    }
                    "*" => self
                        .number(right)
                        .or_else(|| self.number(left))
                        .filter(|f| *f > 0.0 && *f < 1.0)
                        .and_then(|f| unit_of_divisor(1.0 / f))
                        .map(|u| (u, None)),
                    ">>" => match self.number(right) {
                        Some(30.0) => Some((
                            Unit {
                                binary: true,
                                power: 3,
                            },
                            None,
                        )),
                        Some(20.0) => Some((
                            Unit {
                                binary: true,
                                power: 2,
                            },
                            None,
                        )),
                        _ => None,
                    },
                    _ => None,
                };
                found
                    .or_else(|| self.unit_division(left, depth + 1))
                    .or_else(|| self.unit_division(right, depth + 1))
            }
            "call" => {
                let arg = node
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0))?;
                self.unit_division(arg, depth + 1)
            }
            _ => None,
        }
    }

    /// The unit of one side of a comparison: converted there, or a name converted earlier.
    fn unit_of(&self, node: Node) -> Option<Unit> {
        if let Some((u, _)) = self.unit_division(node, 0) {
            return Some(u);
        }
        let node = unparen(node);
        if !matches!(node.kind(), "identifier" | "attribute") {
            return None;
        }
        let name = self.text(node);
        self.name_units
            .get(&(scope_of_name(self, name), name.to_string()))
            .copied()
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
        if target == "self.automatic_optimization" && rtext == "False" {
            self.facts.manual_optimization = true;
        }
        if right.kind() == "call" {
            if let Some(f) = right.child_by_field_name("function") {
                let callee = self.text(f);
                let last = last_segment(callee).to_ascii_lowercase();
                if OPTIMIZER_CLASSES.contains(&last.as_str()) && simple_target {
                    self.optimizer_names.push(target.clone());
                }
                if simple_target && (last.contains("schedule") || last.ends_with("lr")) {
                    self.scheduler_names.push(target.clone());
                    if self.counts_accumulation(rtext, 0) {
                        self.facts.schedule_in_optimizer_steps = true;
                    }
                }
                // `engine, optimizer, _, _ = deepspeed.initialize(...)`
                if callee == "deepspeed.initialize" {
                    let engine = match left.kind() {
                        "pattern_list" | "tuple_pattern" => left.named_child(0),
                        _ => Some(left),
                    };
                    if let Some(e) = engine {
                        self.engine_names.push(self.text(e).to_string());
                    }
                }
            }
        }
        if !simple_target {
            return;
        }
        self.assigned_text.insert(target.clone(), rtext);
        // `loss = loss / n` is its own statement; `loss = out.loss / n` divides on the way.
        let division = self.division_of(right).map(|(divisor, mut d)| {
            let rebinds = unparen(right)
                .child_by_field_name("left")
                .is_some_and(|l| self.text(unparen(l)) == target);
            if rebinds {
                d.statement = node
                    .parent()
                    .filter(|p| p.kind() == "expression_statement")
                    .map(|p| p.byte_range());
            }
            (divisor, d)
        });
        self.record_division(node, &target, division);
        self.branch_entry(&target, right);
        if let Some(divided) = self.unit_division(right, 0) {
            // Only memory counts as a use of a unit: `/ 1e9` also makes billions of parameters.
            let t = target.to_ascii_lowercase();
            let memory = unit_of_name(&target).is_some() || t.contains("mem") || t.contains("byte");
            if memory && !self.facts.units_used.contains(&divided.0) {
                self.facts.units_used.push(divided.0);
            }
            self.name_units
                .insert((scope_of_name(self, &target), target.clone()), divided.0);
            if let Some(named) = unit_of_name(&target) {
                if named.power == divided.0.power && named.binary != divided.0.binary {
                    self.facts.unit_conversions.push(UnitConversion {
                        target: target.clone(),
                        named,
                        divided: divided.0,
                        divisor: divided.1,
                        span: right.byte_range(),
                    });
                }
            }
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
        self.facts.note_constant(&target, &lin, right.byte_range());
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
        if op == "/" && names_accumulation(self.text(right)) {
            let division = Division {
                operator_and_divisor: node.byte_range(),
                statement: node
                    .parent()
                    .filter(|p| p.kind() == "expression_statement")
                    .map(|p| p.byte_range()),
            };
            self.record_division(
                node,
                &target,
                Some((self.text(right).to_string(), division)),
            );
        }
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
        // Lightning divides what `training_step` returns by `accumulate_grad_batches`.
        let lightning = self
            .scopes
            .get(scope)
            .and_then(|s| s.class)
            .and_then(|c| self.scopes.get(c))
            .is_some_and(|c| c.lightning);
        if lightning && function == "training_step" {
            if let Some((divisor, division)) = self.division_of(value) {
                self.facts.manual_divisions.push(ManualDivision {
                    framework: Framework::Lightning,
                    at: node.byte_range(),
                    divisor,
                    division,
                });
            }
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
        if let (Some(l), Some(r)) = (self.unit_of(kids[0]), self.unit_of(kids[2])) {
            if l.power == r.power && l.binary != r.binary {
                self.facts.unit_comparisons.push(UnitComparison {
                    span: node.byte_range(),
                    left: l,
                    right: r,
                });
            }
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
            let inference = self.stack.iter().any(|(_, f)| match f {
                Frame::With(_, no_grad) => *no_grad,
                Frame::Scope(s) => self.scopes.get(*s).is_some_and(|s| s.inference),
                _ => false,
            });
            self.facts.formulas.push(Formula {
                kind,
                lin: lin.clone(),
                span,
                inference,
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
        // `torch.autocast(..., dtype=torch.bfloat16)` picks the compute dtype, not the weights'.
        let in_autocast = node
            .parent()
            .and_then(|args| args.parent())
            .and_then(|call| call.child_by_field_name("function"))
            .is_some_and(|f| self.text(f).ends_with("autocast"));
        if matches!(key, "torch_dtype" | "dtype")
            && !in_autocast
            && (v.contains("bfloat16") || v.contains("float16"))
        {
            self.facts.evidence.precision.push(Mention {
                value: Precision::Pure16,
                span: node.byte_range(),
            });
        }
        if matches!(key, "torch_dtype" | "dtype") && v.ends_with("float32") {
            self.facts.evidence.precision.push(Mention {
                value: Precision::Fp32,
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
            super::python_config::argparse_default(node, self.src, &mut self.facts);
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

        if last == "Accelerator" {
            let gas = args.and_then(|a| {
                let mut c = a.walk();
                let kw = a.named_children(&mut c).find(|k| {
                    k.kind() == "keyword_argument"
                        && k.child_by_field_name("name").map(t).is_some_and(|n| {
                            n == "gradient_accumulation_steps"
                                || n == "gradient_accumulation_plugin"
                        })
                });
                kw.and_then(|k| k.child_by_field_name("value"))
                    .map(|v| t(v).to_string())
            });
            self.accelerators.push(gas);
        }
        self.training_call(node, func, last);
    }

    /// Calls the loop model reads: steps, backwards, zeroing, schedulers, clipping, unscaling.
    fn training_call(&mut self, node: Node, func: Node, last: &str) {
        if func.kind() != "attribute" {
            return;
        }
        let span = node.byte_range();
        // A receiver may be a long call chain: only its tail names it.
        let recv = func
            .child_by_field_name("object")
            .map(|o| clip_tail(self.text(o)))
            .unwrap_or("");
        let recv_last = last_segment(recv).to_ascii_lowercase();
        let args = node.child_by_field_name("arguments");
        let positional = args.map_or(0, |a| {
            let mut c = a.walk();
            a.named_children(&mut c)
                .filter(|n| !matches!(n.kind(), "keyword_argument" | "comment"))
                .count()
        });
        let kind = match last {
            "step" if self.is_optimizer_ref(recv) || recv_last.contains("scaler") => {
                self.facts.evidence.trains.push(span.clone());
                CallKind::Step {
                    scaler: recv_last.contains("scaler"),
                }
            }
            "step"
                if positional == 0
                    && !recv_last.contains("noise")
                    && (recv_last.contains("sched")
                        || self.scheduler_names.iter().any(|n| n == recv)) =>
            {
                CallKind::SchedulerStep
            }
            "backward" => {
                self.facts.evidence.trains.push(span.clone());
                // `accelerator.backward(loss)`, `engine.backward(loss)`: the framework's
                // backward, which takes the loss as an argument; `loss.backward()` takes none.
                if positional == 0 {
                    let Some(recv) = func.child_by_field_name("object") else {
                        return;
                    };
                    match self.backward(recv) {
                        Some(kind) => kind,
                        None => return,
                    }
                } else {
                    self.framework_backward(node, recv);
                    CallKind::FrameworkBackward
                }
            }
            "zero_grad" => CallKind::ZeroGrad,
            "clip_grad_norm_" | "clip_grad_norm" | "clip_grad_value_" => CallKind::Clip {
                framework: recv_last.contains("accelerator") || recv_last.contains("fabric"),
            },
            "unscale_" => CallKind::Unscale,
            _ if last.to_ascii_lowercase().contains("scale_grads")
                || ((last == "div_" || last == "mul_") && recv.contains("grad")) =>
            {
                CallKind::GradRescale
            }
            _ => return,
        };
        let ctx = self.ctx(span.start);
        let statement = node
            .parent()
            .filter(|p| p.kind() == "expression_statement" && p.byte_range() == span)
            .map(|p| p.byte_range());
        self.calls.push(CallEvent {
            ctx,
            kind,
            call: Call { span, statement },
        });
    }

    /// `accelerator.backward(loss / n)` or `engine.backward(loss)` after `loss = loss / n`: a
    /// candidate for double scaling, judged once the whole file is read.
    fn framework_backward(&mut self, node: Node, recv: &str) {
        let framework = if recv.to_ascii_lowercase().contains("accelerator") {
            Framework::Accelerate
        } else if self.engine_names.iter().any(|n| n == recv)
            || last_segment(recv).to_ascii_lowercase().contains("engine")
        {
            Framework::DeepSpeed
        } else {
            return;
        };
        let Some(args) = node.child_by_field_name("arguments") else {
            return;
        };
        let mut c = args.walk();
        let kids: Vec<Node> = args.named_children(&mut c).collect();
        // `scale_wrt_gas=False`: the engine does not divide.
        if kids.iter().any(|k| {
            k.kind() == "keyword_argument"
                && k.child_by_field_name("name").map(|n| self.text(n)) == Some("scale_wrt_gas")
        }) {
            return;
        }
        let Some(loss) = kids.iter().find(|k| k.kind() != "keyword_argument") else {
            return;
        };
        if let Some((divisor, division)) = self.division_of(*loss) {
            self.facts.manual_divisions.push(ManualDivision {
                framework,
                at: node.byte_range(),
                divisor,
                division,
            });
        }
    }

    /// The division of a loss by the accumulation factor, in the expression or in the latest
    /// assignment of the name (`loss = loss / n`, `loss /= n`).
    fn division_of(&self, node: Node) -> Option<DivisionBy> {
        let node = unparen(node);
        match node.kind() {
            "binary_operator" => {
                let op = node.child_by_field_name("operator").map(|o| self.text(o));
                let left = node.child_by_field_name("left")?;
                let right = node.child_by_field_name("right")?;
                let divisor = self.text(right);
                // `loss * accum / num_items` cancels the framework's division on purpose.
                if op != Some("/")
                    || !names_accumulation(divisor)
                    || self.text(left).to_ascii_lowercase().contains("accum")
                {
                    return None;
                }
                Some((
                    divisor.to_string(),
                    Division {
                        operator_and_divisor: left.end_byte()..right.end_byte(),
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
            _ => None,
        }
    }

    /// Whether an expression, or a name it reads (followed back a few assignments), involves the
    /// accumulation factor: `num_training_steps = len(loader) // accum * epochs`.
    fn counts_accumulation(&self, text: &str, depth: usize) -> bool {
        if names_accumulation(text) {
            return true;
        }
        depth < 3
            && text
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .filter(|w| !w.is_empty())
                .any(|w| {
                    self.assigned_text
                        .get(w)
                        .is_some_and(|t| self.counts_accumulation(t, depth + 1))
                })
    }

    /// Remember whether an assignment to `name` divided it by the accumulation factor.
    fn record_division(&mut self, stmt: Node, name: &str, division: Option<DivisionBy>) {
        let scope = self.scope();
        let under = self.ctx(stmt.start_byte()).branches;
        self.divisions
            .entry((scope, name.to_string()))
            .or_default()
            .push((stmt.start_byte(), under, division));
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
    fn backward(&self, recv: Node) -> Option<CallKind> {
        let recv = unparen(recv);
        let mut loss = recv;
        let mut scaler = false;
        if recv.kind() == "call" {
            let f = recv.child_by_field_name("function");
            let f_text = f.map(|f| self.text(f)).unwrap_or("");
            if last_segment(f_text) == "scale" {
                scaler = true;
                let arg = recv
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0))?;
                loss = unparen(arg);
            } else if matches!(last_segment(f_text), "mean" | "sum") {
                if let Some(obj) = f.and_then(|f| f.child_by_field_name("object")) {
                    loss = unparen(obj);
                }
            }
        }
        Some(CallKind::Backward {
            loss: loss.byte_range(),
            loss_text: self.text(loss).to_string(),
            scaling: self.loss_scaling(loss, 0),
            scaler,
        })
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
        let mut assembled = loops::assemble(&self.loops, &self.conds, &self.calls);
        for lp in &mut assembled.loops {
            lp.factor_value = parse_number(&lp.factor).or_else(|| {
                let v = self.env.get(&(0, lp.factor.clone()))?;
                v.terms.is_empty().then_some(v.constant)
            });
        }
        self.facts.loops = assembled.loops;
        self.facts.zero_grad_in_accumulate = assembled.zero_grad_in_accumulate;
        // accelerate divides only when it was told to accumulate (its default is 1).
        let accelerate_divides = self
            .accelerators
            .iter()
            .any(|gas| gas.as_deref().is_some_and(|g| g.trim() != "1"));
        self.facts
            .manual_divisions
            .retain(|d| d.framework != Framework::Accelerate || accelerate_divides);
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

/// The scope a name lives in: its class for `self.x`, else the current scope.
fn scope_of_name(w: &Walker, name: &str) -> usize {
    if name.starts_with("self.") {
        if let Some(class) = w.scopes.get(w.scope()).and_then(|s| s.class) {
            return class;
        }
    }
    w.scope()
}

/// `"bf16"` → `bf16` (quotes and string prefixes dropped).
fn string_key(text: &str) -> String {
    text.trim_start_matches(['r', 'b', 'u', 'R', 'B', 'U'])
        .trim_matches(['"', '\''])
        .to_string()
}

/// The unit a name states: a `gb`, `gib`, `mb` or `mib` word in its last segment.
fn unit_of_name(name: &str) -> Option<Unit> {
    let last = last_segment(name).to_ascii_lowercase();
    last.split('_').find_map(|w| match w {
        "gb" => Some(Unit {
            binary: false,
            power: 3,
        }),
        "gib" => Some(Unit {
            binary: true,
            power: 3,
        }),
        "mb" => Some(Unit {
            binary: false,
            power: 2,
        }),
        "mib" => Some(Unit {
            binary: true,
            power: 2,
        }),
        _ => None,
    })
}

fn unit_of_divisor(d: f64) -> Option<Unit> {
    let near = |x: f64| (d - x).abs() <= x * 1e-9;
    if near(1e9) {
        Some(Unit {
            binary: false,
            power: 3,
        })
    } else if near(1_073_741_824.0) {
        Some(Unit {
            binary: true,
            power: 3,
        })
    } else if near(1e6) {
        Some(Unit {
            binary: false,
            power: 2,
        })
    } else if near(1_048_576.0) {
        Some(Unit {
            binary: true,
            power: 2,
        })
    } else {
        None
    }
}

/// A divisor that is the accumulation factor (`args.gradient_accumulation_steps`, `self.accum`,
/// `gas`, `self.trainer.accumulate_grad_batches`).
fn names_accumulation(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("accum")
        || t.contains("grad_acc")
        || t.split(['.', '_', '(', ')']).any(|w| w == "gas")
}

/// A loop variable or bound that names micro-batches.
fn names_micro_batches(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    names_accumulation(text) || ["micro", "chunk"].iter().any(|w| t.contains(w))
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
        let facts = extract(src).expect("parses");
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
        let facts = extract(src).expect("parses");
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
