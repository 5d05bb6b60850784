//! Python: tree-sitter-python, one parse and one iterative walk per file. The walk keeps a stack of
//! the scopes, loops and branches it is in; handlers at assignments, calls, comparisons and returns
//! lower what they see into facts. Accumulating loops are assembled from the recorded events after
//! the walk.
//!
//! This file holds the walk, its scopes, and the assembly at the end; the handlers live beside
//! it: `statements` (assignments, returns), `calls` (evidence and training calls), `conditions`
//! (what a test says about the accumulation window), `arithmetic` (memory formulas, tables,
//! units), `provenance` (where a loss comes from), `imports` (what a name was imported as) and
//! `inline` (helpers' training calls at their call sites).

mod arithmetic;
mod assembly;
mod batch_model;
mod calls;
mod comments;
mod conditions;
mod config_paths;
mod deferred;
mod divisions;
mod exported;
mod gathered;
mod global_batch;
mod grad_clearing;
mod hooks;
mod imports;
mod inline;
mod loader_batch;
mod micro_bound;
mod module_links;
mod moves;
mod provenance;
mod schedules;
mod statements;
mod sync_flag;
mod tables;
mod token_means;
mod trained;
mod trainer_loss;
mod units;
mod values;
mod valuing;

use super::loops::{
    self, AccumTest, Branch, CallEvent, CallKind, Cond, Ctx, LoopInfo, Recorded, ScopeInfo,
};
use super::{clip, clip_tail, flag_evidence, lora_setting, parse_number, MAX_EXPR_DEPTH};
use crate::expr::program::Program;
use crate::expr::{role_of, Lin, Role};
use crate::facts::*;
use crate::frontend::fields::{PyField, PyKind};
pub use calls::OPTIMIZER_CLASSES;
pub use deferred::{finish_values, Deferred};
use micro_bound::StepBound;
pub(crate) use schedules::same_operand;
use std::cell::RefCell;
use values::{Pending, PendingKind};
/// The walk's maps are keyed by short names and offsets it looks up at every node: foldhash,
/// as SipHash's defence against crafted keys costs time and protects nothing here.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
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
    extract_with(text, Reads::ALL)
}

/// The parts of the walk a file needs: files parsed for some rules skip what only others read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    /// The loop model and loss provenance (the loop rules).
    pub loops: bool,
    /// Memory arithmetic valued into formulas, units, constants and checkpointed values (the
    /// memory rules).
    pub values: bool,
}

impl Reads {
    pub const ALL: Reads = Reads {
        loops: true,
        values: true,
    };
}

/// [`extract`], with only the parts of the walk `reads` asks for.
pub fn extract_with(text: &str, reads: Reads) -> Result<Facts, String> {
    extract_inner(text, reads, true, false).map(|(facts, _)| facts)
}

/// [`extract_with`] for a file of a project: when its memory arithmetic calls names imported
/// from other modules, it is left unvalued until [`finish_values`] is told what they return.
pub fn extract_deferring(text: &str, reads: Reads) -> Result<(Facts, Option<Deferred>), String> {
    extract_inner(text, reads, true, true)
}

/// The loop model of a text a fix produced: what the fix is checked against (its own missteps
/// are not fixed again).
fn extract_unchecked(text: &str) -> Result<Facts, String> {
    extract_inner(text, Reads::ALL, false, false).map(|(facts, _)| facts)
}

fn extract_inner(
    text: &str,
    reads: Reads,
    verify_fixes: bool,
    defer: bool,
) -> Result<(Facts, Option<Deferred>), String> {
    let blanked = comments::blank_long_comment_runs(text);
    let tree = parse(blanked.as_ref().map_or(text, |(t, _)| t.as_str()))?;
    let mut w = Walker::new(text);
    w.loop_model = reads.loops;
    if reads.loops {
        // Read before the walk, and only for the loop model, which alone asks for them.
        w.optimizers_by_use = statements::optimizers_by_use(text);
        w.window_lists = gathered::window_lists(text);
    }
    w.value_model = reads.values;
    w.verify_fixes = verify_fixes;
    w.defer = defer;
    w.trainer_loss.active = memchr::memmem::find(text.as_bytes(), b"compute_loss").is_some();
    w.facts.loops_read = reads.loops;
    w.factor_exprs = calls::factors_set(text);
    w.walk(&tree);
    let (mut facts, deferred) = w.finish(&tree);
    if let Some((_, comments)) = blanked {
        // The blanked lines that were comments (not lines of a string) are comments still.
        let root = tree.root_node();
        let in_string = |at: usize| {
            let mut node = root.descendant_for_byte_range(at, at);
            while let Some(n) = node {
                if n.ty() == "string" {
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
    Ok((facts, deferred))
}

/// A division by the accumulation factor: the divisor as written, and how to undo it.
type DivisionBy = (String, Division);

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
    /// A function's parameters by name, without `self`/`cls`.
    params: Vec<String>,
    /// Names assigned in the scope.
    assigned: Vec<String>,
}

/// `if (i + 1) % N != 0: continue` inside a loop: what follows in the loop is the boundary.
#[derive(Debug)]
struct Guard {
    loop_id: usize,
    cond: usize,
    after: usize,
}

/// A binding of a name to a loss: its scope, where it is written, what it holds, and the
/// innermost branch arm around it (`(cond, taken)`), if any.
struct LossDef {
    scope: usize,
    at: usize,
    prov: Prov,
    arm: Option<(usize, bool)>,
}

struct Walker<'s> {
    src: &'s str,
    /// Read the loop model's inputs: names assigned in loops, loss provenance, helpers' calls.
    loop_model: bool,
    /// Memory arithmetic is valued (see [`Reads::values`]).
    value_model: bool,
    /// Build fixes for the loop's missteps (and check each on the edited text).
    verify_fixes: bool,
    /// `x.require_backward_grad_sync = ...` statements (GA009).
    sync_flags: Vec<Range<usize>>,
    /// The `no_sync(` calls the backward-only blocks enter, written in their items or bound to
    /// the names they open.
    no_sync_entered: usize,
    /// Where the file chooses between `no_sync()` and a syncing context by a remainder test:
    /// the choice, its function, and the micro-step that syncs.
    sync_choices: Vec<(Range<usize>, usize, loops::Pick)>,
    stack: Vec<(usize, Frame)>,
    scopes: Vec<Scope>,
    /// What each `if` tests, by condition id.
    conds: Vec<Cond>,
    /// Conditions by scope and text: an `if` that repeats another's test shares its id.
    cond_texts: HashMap<(usize, &'s str), usize>,
    /// Whether each condition reads the accumulation factor (`if args.gas > 1:`).
    cond_reads_factor: Vec<bool>,
    /// Each condition's scope and text, for what it tests (see [`Topics`]).
    cond_spans: Vec<(usize, Range<usize>)>,
    /// Tables built from the arms of `if` chains, by scope, assigned name (or function) and
    /// whether the arms return the values.
    branch_tables: HashMap<(usize, String, bool), usize>,
    cond_ids: std::collections::HashMap<usize, usize>,
    loops: Vec<LoopInfo>,
    guards: Vec<Guard>,
    accumulate_blocks: usize,
    /// The file's memory arithmetic as written, valued once the walk is done.
    program: Program<'s>,
    pending: Vec<Pending>,
    /// What the module's top-level functions return, for the files that import them.
    exports: exported::ExportNotes,
    /// Leave the file's memory arithmetic unvalued when it calls names imported from other
    /// modules (see [`Deferred`]).
    defer: bool,
    /// Module-level names bound to a number, as the walk has seen them so far.
    module_numbers: HashMap<&'s str, f64>,
    /// How each name's value was produced, per scope, in source order.
    /// By name: the scope, the position and what was assigned.
    loss_defs: HashMap<&'s str, Vec<LossDef>>,
    /// What each function scope returns.
    returns: HashMap<usize, Vec<Prov>>,
    /// Names bound to an instance of a class (`crit = MyLoss()`), per scope: the class as called
    /// and the `reduction=` it was built with.
    instances: HashMap<&'s str, Vec<Instance<'s>>>,
    /// Imported names: alias → (module, name in it); `import a.b as m` has no name.
    imports: HashMap<String, (String, Option<String>)>,
    /// Counters kept modulo the factor (`acc = (acc + 1) % n`, `acc %= n`): `acc == 0` is the
    /// boundary.
    modulo_names: HashMap<(usize, String), (String, Range<usize>)>,
    /// Accumulation tests stored in names (`do_step = (i + 1) % n == 0`).
    test_names: HashMap<(usize, String), (String, Range<usize>, bool)>,
    /// Names holding a counter compared with N (`full = seen >= N`): the counter, the value
    /// that resets it, and N.
    counter_names: HashMap<(usize, String), (String, String, String)>,
    /// The micro-step a remainder test stored in a name picks (`do_update = i % N == N - 1`).
    pick_names: HashMap<(usize, String), loops::Pick>,
    /// Names assigned a count of the data in hand (`n = mask.sum()`), by scope: the innermost
    /// loop they were counted in.
    local_counts: HashMap<(usize, String), Option<usize>>,
    /// Comparisons of a factor with one stored in names (`accumulating = n > 1`).
    above_one_names: HashMap<(usize, String), (String, bool)>,
    /// Names bound to optimizers (`opt = torch.optim.AdamW(...)`).
    optimizer_names: Vec<String>,
    /// Names bound to a `GradScaler`.
    scaler_names: Vec<String>,
    /// Names bound to a clip with its arguments fixed (`clip = partial(clip_grad_norm_, ...)`).
    clip_names: Vec<String>,
    /// Names used as optimizers (zeroed and stepped), wherever the optimizer is built.
    optimizers_by_use: Vec<String>,
    /// Names filled across a window's micro-steps and emptied again (see `window_lists`).
    window_lists: Vec<String>,
    /// The outermost loop last asked about, by its start, and what its lines assign to each name.
    loop_assignments: std::cell::RefCell<Option<(usize, provenance::Assignments<'s>)>>,
    /// Names bound to learning-rate schedulers and to DeepSpeed engines.
    scheduler_names: Vec<String>,
    engine_names: Vec<String>,
    /// Names bound to `Accelerator(...)`.
    accelerator_names: Vec<String>,
    /// Per name, in source order: whether each assignment divided it (`loss = loss / n`).
    divisions: Divisions,
    /// `Accelerator(...)` constructions and their `gradient_accumulation_steps` as written.
    accelerators: Vec<Option<String>>,
    /// The scopes of top-level functions that build an `Accelerator`, with its factor.
    built_accelerators: Vec<(usize, String)>,
    /// The latest right-hand side assigned to each name, as written (to follow a schedule length
    /// back to what it counts).
    assigned_text: HashMap<String, &'s str>,
    /// The same per function, for the loop model (a helper's `idx = state["idx"]` is not the
    /// loop's `idx`).
    scope_text: HashMap<(usize, String), &'s str>,
    calls: Vec<CallEvent>,
    /// Calls of functions that may be defined in this file, for inlining their training calls.
    invokes: Vec<Invoke>,
    /// Calls of a module's attribute (`du.wrap(model)`): the scope, the callee and the call.
    module_calls: Vec<(usize, Range<usize>, Range<usize>)>,
    /// The models the file's optimizers are handed the parameters of, by root; whether one is
    /// handed something else.
    optimized: Vec<String>,
    optimized_unknown: bool,
    /// Each optimizer bound to a name, with a model it is handed the parameters of.
    optimizer_models: Vec<(String, String)>,
    /// The function each `DistributedDataParallel(...)` is written in.
    ddp_wrap_scopes: Vec<usize>,
    /// The file's functions by name, built once the file is read.
    functions: std::cell::OnceCell<provenance::FunctionIndex>,
    /// `accelerator.backward(loss)` calls with their loss: a plain backward when accelerate
    /// was not told to accumulate.
    accelerate_backwards: Vec<(Range<usize>, Range<usize>, String, Prov)>,
    /// A DeepSpeed engine's backward handed a parameter of its function (`model.backward(out)`
    /// under `if args.deepspeed:` in `backward_step(out, model, args)`): the call, its function
    /// and the parameter, judged with what each call site hands in.
    engine_param_backwards: Vec<(Range<usize>, usize, String)>,
    /// Divisors of losses divided only where the DeepSpeed flag is off (`if not args.deepspeed:`).
    divided_off_engine: Vec<String>,
    /// Receivers of `zero_grad()`, and `step()` calls on scheduler-named receivers: a
    /// "scheduler" that zeroes gradients wraps the optimizer, and its step is the optimizer's.
    zero_grad_receivers: Vec<String>,
    scheduler_steps: Vec<(Range<usize>, String)>,
    /// `zero_grad()` calls and their receivers; the receivers of optimizer steps.
    zero_grads: Vec<(Range<usize>, String)>,
    step_receivers: Vec<String>,
    /// `with accelerator.accumulate(...)` blocks: their scope and the loops around them.
    accumulate_at: Vec<(usize, Vec<usize>)>,
    /// The object the first `accumulate()` block is opened on, as written (`accelerator`).
    accumulate_receiver: Option<String>,
    /// Schedulers whose length counts a loader's batches: name, construction, length as
    /// written, the loader.
    micro_schedules: Vec<schedules::MicroSized>,
    /// Schedulers sized by `len(dataset) // batch` (BS004).
    sample_sized: Vec<schedules::SampleSized>,
    /// Calls of a class named like a framework's trainer (`Trainer(...)`), with the name.
    trainer_calls: Vec<(Range<usize>, String)>,
    /// Backwards taken for a DeepSpeed engine's by the receiver's name alone (`engine.backward`),
    /// with the receiver: judged once the file's classes are known.
    named_engines: Vec<(Range<usize>, String)>,
    /// What frameworks are told to accumulate over, as written (`gradient_accumulation_steps=k`).
    factor_exprs: Vec<String>,
    /// Nested and module functions by name, as written (a schedule's lambda reads them).
    def_texts: HashMap<&'s str, &'s str>,
    /// Functions whose body (or a function nested in it) divides (`/`, `//`, `/=`, `//=`).
    dividing_defs: HashSet<String>,
    /// Names a call's value is assigned to (`model, opt, sched = build(...)`), by the last
    /// segment of the callee: (`build`, `sched`).
    call_targets: HashSet<(&'s str, &'s str)>,
    /// What each scheduler's length reads, its names followed.
    schedule_lengths: Vec<String>,
    /// Counters that go up by one where the optimizer steps (under `sync_gradients` or the
    /// accumulation boundary): they count optimizer steps. With where each is added to.
    step_counters: Vec<(String, usize)>,
    /// `while c < total` and `if c >= total: break`: a counter and the total that ends training.
    step_bounds: Vec<StepBound>,
    /// Every scheduler built: its name, the function it is built in, and the constructor.
    built_schedulers: Vec<(String, usize, Range<usize>)>,
    /// `accelerator.prepare(...)` assignments: where, the names bound and the arguments.
    prepares: Vec<(usize, Vec<&'s str>, Vec<&'s str>)>,
    /// `batch_size=` values of data loaders, as written, and the loaders' calls.
    loader_batch_args: Vec<loader_batch::LoaderArg<'s>>,
    /// Products named as global batches (BS004).
    global_products: Vec<global_batch::Product>,
    /// Trainer losses written by hand (GA007).
    trainer_loss: trainer_loss::TrainerLossNotes,
    /// Gradient hooks registered on parameters (GA005).
    hooks: hooks::HookNotes<'s>,
    /// What sizes or reads a batch (BS002, BS004).
    batch: batch_model::BatchNotes,
    facts: Facts,
}

/// A call of a function that may be defined in this file (`self.backward(loss)`,
/// `train_step(batch)`).
#[derive(Debug, Clone)]
struct Invoke {
    ctx: Ctx,
    callee: Callee,
    /// Keyword or positional, with their provenance, span and text.
    args: Vec<(Option<String>, Prov, Range<usize>, String)>,
    call: Range<usize>,
}

/// Where a name was bound to an instance: the scope, the class as called, and the
/// `reduction=` it was given.
type Instance<'s> = (usize, &'s str, Option<&'s str>);

impl<'s> Walker<'s> {
    /// The file is Lightning's (it imports it): its trainer steps a module's schedulers, and a
    /// trainer's devices are those of one node of `num_nodes`.
    fn lightning(&self) -> bool {
        (self.facts.evidence.frameworks.iter()).any(|f| f.value == Framework::Lightning)
    }

    fn new(src: &'s str) -> Self {
        let (scheduler_names, optimizer_names) = statements::built_names(src);
        Walker {
            src,
            loop_model: true,
            value_model: true,
            verify_fixes: true,
            sync_flags: Vec::new(),
            no_sync_entered: 0,
            sync_choices: Vec::new(),
            stack: Vec::new(),
            scopes: vec![Scope {
                name: String::new(),
                class: None,
                parent: None,
                is_class: false,
                lightning: false,
                inference: false,
                params: Vec::new(),
                assigned: Vec::new(),
            }],
            conds: Vec::new(),
            cond_texts: HashMap::default(),
            cond_reads_factor: Vec::new(),
            cond_spans: Vec::new(),
            branch_tables: HashMap::default(),
            cond_ids: std::collections::HashMap::default(),
            loops: Vec::new(),
            guards: Vec::new(),
            accumulate_blocks: 0,
            program: Program::new(src),
            pending: Vec::new(),
            exports: exported::ExportNotes::default(),
            defer: false,
            module_numbers: HashMap::default(),
            loss_defs: HashMap::default(),
            returns: HashMap::default(),
            instances: HashMap::default(),
            imports: HashMap::default(),
            test_names: HashMap::default(),
            counter_names: HashMap::default(),
            pick_names: HashMap::default(),
            above_one_names: HashMap::default(),
            local_counts: HashMap::default(),
            modulo_names: HashMap::default(),
            optimizer_names,
            scheduler_names,
            scaler_names: statements::scalers_by_use(src),
            optimizers_by_use: Vec::new(),
            window_lists: Vec::new(),
            loop_assignments: Default::default(),
            clip_names: Vec::new(),
            engine_names: Vec::new(),
            accelerator_names: Vec::new(),
            divisions: HashMap::default(),
            accelerators: Vec::new(),
            built_accelerators: Vec::new(),
            assigned_text: HashMap::default(),
            scope_text: HashMap::default(),
            calls: Vec::new(),
            invokes: Vec::new(),
            module_calls: Vec::new(),
            optimized: Vec::new(),
            optimized_unknown: false,
            optimizer_models: Vec::new(),
            ddp_wrap_scopes: Vec::new(),
            functions: std::cell::OnceCell::new(),
            accelerate_backwards: Vec::new(),
            engine_param_backwards: Vec::new(),
            divided_off_engine: Vec::new(),
            zero_grad_receivers: Vec::new(),
            scheduler_steps: Vec::new(),
            zero_grads: Vec::new(),
            step_receivers: Vec::new(),
            accumulate_at: Vec::new(),
            accumulate_receiver: None,
            micro_schedules: Vec::new(),
            sample_sized: Vec::new(),
            global_products: Vec::new(),
            loader_batch_args: Vec::new(),
            prepares: Vec::new(),
            schedule_lengths: Vec::new(),
            step_counters: Vec::new(),
            step_bounds: Vec::new(),
            built_schedulers: Vec::new(),
            def_texts: HashMap::default(),
            dividing_defs: HashSet::default(),
            call_targets: HashSet::default(),
            factor_exprs: Vec::new(),
            trainer_calls: Vec::new(),
            named_engines: Vec::new(),
            trainer_loss: Default::default(),
            hooks: Default::default(),
            batch: Default::default(),
            facts: Facts::default(),
        }
    }

    fn text(&self, n: Node) -> &'s str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    fn walk(&mut self, tree: &Tree) {
        let mut cursor = tree.walk();
        // The nodes above the cursor: `Node::parent` searches down from the root on each call.
        let mut above: Vec<Node> = Vec::new();
        loop {
            let node = cursor.node();
            let field = cursor.field_name();
            self.enter(node, field, above.last().copied());
            if cursor.goto_first_child() {
                above.push(node);
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
                above.pop();
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

    /// A division is written in the current function: it and every function around it divide.
    fn note_division(&mut self) {
        let mut at = Some(self.scope());
        while let Some(s) = at.and_then(|i| self.scopes.get(i)) {
            if !s.is_class && !s.name.is_empty() && !self.dividing_defs.contains(&s.name) {
                self.dividing_defs.insert(s.name.clone());
            }
            at = s.parent;
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

    fn enter(&mut self, node: Node<'_>, field: Option<&str>, parent: Option<Node<'_>>) {
        if self.loop_model && is_division(node) {
            self.note_division();
        }
        match node.ty() {
            "string" => {
                self.note_config_path(node);
                self.printed(node);
            }
            "comment" => self.facts.comments.push(Comment {
                text: self.text(node).to_string(),
                range: node.byte_range(),
            }),
            "function_definition" | "class_definition" => {
                if node.ty() == "class_definition" {
                    super::python_config::class_defaults(node, self.src, &mut self.facts);
                }
                self.enter_scope(node, parent, node.field("name"))
            }
            // `need = lambda b: 2 * model_gb + b * act_gb`: a function named by its target.
            "lambda" if field == Some("right") => {
                let target = parent
                    .filter(|p| p.ty() == "assignment")
                    .and_then(|p| p.field("left"))
                    .filter(|l| l.ty() == "identifier");
                if let (Some(target), Some(body)) = (target, node.field("body")) {
                    self.enter_scope(node, parent, Some(target));
                    self.returned(node, body);
                }
            }
            // A named config is a dict on the right of an assignment, or one handed over as a
            // keyword (`deepspeed.initialize(config={...})`): asking any other dict for its
            // parent would walk down from the root each time. Tables are read by the memory
            // rules alone.
            "dictionary" => {
                match field {
                    Some("right") => {
                        super::python_config::dict(node, parent, self.src, &mut self.facts)
                    }
                    Some("value") => {
                        super::python_config::keyword_dict(node, parent, self.src, &mut self.facts)
                    }
                    _ => {}
                }
                if self.value_model {
                    self.dictionary(node, field == Some("right"));
                }
            }
            "for_statement" | "while_statement" => {
                let id = self.loops.len();
                self.loops.push(LoopInfo {
                    header: node.start_byte()..line_end(self.src, node.start_byte()),
                    span: node.byte_range(),
                    micro_factor: self.micro_factor(node),
                    assigned: Vec::new(),
                    iterates: node
                        .field("right")
                        .map(|r| self.text(r).to_string())
                        .unwrap_or_default(),
                });
                self.value_tested_calls(node);
                if self.loop_model && node.ty() == "for_statement" {
                    self.note_grad_clearing(node);
                }
                self.push(node, Frame::Loop(id));
                if self.loop_model {
                    self.note_step_bound(node);
                }
                if let Some(left) = node.field("left") {
                    if self.loop_model {
                        self.note_assigned_names(left);
                    }
                    self.bind_loop(left, node.field("right"));
                }
            }
            "if_statement" => {
                self.continue_guard(node);
                if self.loop_model {
                    self.note_step_bound(node);
                }
                if self.value_model {
                    self.chain_table(node);
                }
                self.value_tested_calls(node);
            }
            "match_statement" if self.value_model => self.match_table(node),
            "list" | "tuple"
                if self.value_model && node.named_child(0).is_some_and(|c| c.ty() == "tuple") =>
            {
                self.pair_table(node)
            }
            "parameters" if self.value_model => {
                let mut c = node.walk();
                let kids: Vec<Node> = node.named_children(&mut c).collect();
                self.keyword_pair(&kids);
            }
            "block" if field == Some("consequence") => {
                if let Some(parent) = parent {
                    if let Some(cond) = self.cond_of(parent) {
                        self.push(node, Frame::Branch(cond, true));
                    }
                }
            }
            "elif_clause" | "else_clause" if field == Some("alternative") => {
                if let Some(parent) = parent {
                    if let Some(cond) = self.cond_of(parent) {
                        self.push(node, Frame::Branch(cond, false));
                    }
                }
                self.value_tested_calls(node);
            }
            "with_statement" => {
                let items = node
                    .child(0)
                    .and_then(|_| {
                        node.children(&mut node.walk())
                            .find(|c| c.ty() == "with_clause")
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
                if block.is_some() {
                    let loops = self.ctx(node.start_byte()).loops;
                    self.accumulate_at.push((self.scope(), loops));
                    if self.accumulate_receiver.is_none() {
                        self.accumulate_receiver = self.accumulate_receiver_of(node);
                    }
                }
                // `with ctx:` where `ctx = nullcontext() if last else model.no_sync()`; each
                // of `with model_ctx, loss_ctx:`.
                let opened: Vec<&str> = (items.trim_start_matches("with").trim())
                    .trim_end_matches(':')
                    .split(',')
                    .filter_map(|name| self.assigned_text.get(name.trim()).copied())
                    .collect();
                if self.loop_model && items.contains("no_sync") {
                    self.note_sync_choice_in(node);
                }
                let torch_ddp = || self.src.contains("TorchDDPPlugin");
                if (sync_flag::ddp_no_sync(&items, torch_ddp)
                    || opened.iter().any(|o| sync_flag::ddp_no_sync(o, torch_ddp)))
                    && sync_flag::backward_only(node, self.src)
                {
                    let calls = |t: &str| t.matches("no_sync(").count();
                    self.no_sync_entered +=
                        calls(&items) + opened.iter().map(|o| calls(o)).sum::<usize>();
                    self.facts
                        .no_sync_backward_only
                        .push(node.start_byte()..line_end(self.src, node.start_byte()));
                }
                if self.loop_model && items.contains("scale_loss(") {
                    self.scaled_loss_alias(node);
                }
                self.push(node, Frame::With(block, no_grad));
            }
            "import_statement" | "import_from_statement" => self.import(node),
            "expression_statement" if self.loop_model => {
                // `stack.enter_context(model.no_sync())` in an arm of a remainder test.
                if self.text(node).contains("no_sync") {
                    let line = node.start_byte()..line_end(self.src, node.start_byte());
                    self.note_sync_choice(node, line);
                }
                if let Some(expr) = node.named_child(0) {
                    self.invoke(expr);
                    self.divide_in_place(node, expr);
                }
            }
            "assignment" => self.assignment(node),
            "augmented_assignment" => self.augmented(node),
            "return_statement" => self.ret(node),
            "comparison_operator" => self.comparison(node),
            "call" => {
                if field == Some("right") {
                    super::python_config::dict(node, parent, self.src, &mut self.facts);
                }
                self.call(node);
                if self.value_model {
                    self.call_table(node);
                    // A helper called for what it does (`log_estimate(args.num_params)`) is a
                    // call site its formulas are valued for, as one whose value is kept.
                    let bare = parent.is_some_and(|p| p.ty() == "expression_statement");
                    let helper = node.field("function").is_some_and(|f| {
                        let callee = self.text(f);
                        !callee.strip_prefix("self.").unwrap_or(callee).contains('.')
                    });
                    if bare && helper {
                        self.value_of(node, 0);
                    }
                }
            }
            "keyword_argument" => self.keyword(node),
            // `{"lora_r": 16}`, `def plan(n, lora_rank=8)`: LoRA settings written as data.
            "pair" | "default_parameter" | "typed_default_parameter" => self.setting(node),
            "ERROR" => self.facts.syntax_error = true,
            _ => {}
        }
    }

    /// A function, class or lambda, named by `name_node`.
    fn enter_scope(&mut self, node: Node, above: Option<Node>, name_node: Option<Node>) {
        let name = name_node
            .map(|n| self.text(n).to_string())
            .unwrap_or_default();
        if self.loop_model && node.ty() != "lambda" {
            if let Some(n) = name_node {
                if node.ty() == "function_definition" {
                    self.def_texts.insert(self.text(n), self.text(node));
                } else {
                    self.note_class_text(self.text(n), self.text(node));
                }
            }
        }
        let parent = self.scope();
        let is_class = node.ty() == "class_definition";
        // A method's `self.x` lives in its class; nested functions inherit their parent's class.
        let class = match self.scopes.get(parent) {
            _ if is_class => None,
            Some(p) if p.is_class => Some(parent),
            Some(p) => p.class,
            None => None,
        };
        if is_class {
            self.note_trainer_class(node);
            let bases = node
                .field("superclasses")
                .map(|n| self.text(n))
                .unwrap_or("");
            let framework = if bases.contains("LightningModule") {
                Some(Framework::Lightning)
            } else if self.hf_trainer_base(bases) {
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
        let decorators: String = above
            .filter(|p| p.ty() == "decorated_definition")
            .map(|p| {
                let mut c = p.walk();
                p.named_children(&mut c)
                    .filter(|d| d.ty() == "decorator")
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
        let params = if is_class {
            Vec::new()
        } else {
            self.params_of(node)
        };
        if node.ty() != "lambda" {
            self.note_definition(node, Some(parent).filter(|_| !is_class));
        }
        self.program_scope(node, parent, class, name_node);
        self.scopes.push(Scope {
            name,
            class,
            parent: Some(parent),
            is_class,
            lightning,
            inference,
            params,
            assigned: Vec::new(),
        });
        let id = self.scopes.len() - 1;
        self.note_export_scope(node, parent, id);
        self.push(node, Frame::Scope(id));
    }

    /// apex's `with amp.scale_loss(loss, optimizer) as scaled_loss:`: the alias is the loss
    /// (apex multiplies by its loss scale and unscales before the step).
    fn scaled_loss_alias(&mut self, with: Node) {
        let mut c = with.walk();
        let Some(clause) = with.children(&mut c).find(|n| n.ty() == "with_clause") else {
            return;
        };
        let mut c = clause.walk();
        for item in clause.named_children(&mut c) {
            let Some(pattern) = item.field("value") else {
                continue;
            };
            if pattern.ty() != "as_pattern" {
                continue;
            }
            let (Some(call), Some(alias)) = (pattern.named_child(0), pattern.field("alias")) else {
                continue;
            };
            let is_scale_loss = call.ty() == "call"
                && call
                    .field("function")
                    .is_some_and(|f| last_segment(self.text(f)) == "scale_loss");
            let loss = call.field("arguments").and_then(|a| a.named_child(0));
            if let (true, Some(loss)) = (is_scale_loss, loss) {
                let prov = self.prov(loss, 0);
                let alias = self.text(alias).trim();
                self.define(alias, pattern.start_byte(), prov);
            }
        }
    }

    /// The parameter names of a function, without a leading `self`/`cls`.
    fn params_of(&self, node: Node) -> Vec<String> {
        let Some(params) = node.field("parameters") else {
            return Vec::new();
        };
        let mut c = params.walk();
        let mut names: Vec<String> = params
            .named_children(&mut c)
            .filter_map(|p| {
                let name = match p.ty() {
                    "identifier" => Some(p),
                    "typed_parameter" => p.named_child(0).filter(|n| n.ty() == "identifier"),
                    "default_parameter" | "typed_default_parameter" => p.field("name"),
                    _ => None,
                }?;
                Some(self.text(name).to_string())
            })
            .collect();
        if names.first().is_some_and(|n| n == "self" || n == "cls") {
            names.remove(0);
        }
        names
    }

    // ---- assembling loops ----------------------------------------------------------------------

    fn finish(mut self, tree: &Tree) -> (Facts, Option<Deferred>) {
        let deferred = self.value_or_defer();
        self.finish_hooks(tree.root_node());
        let (accelerate_divides, calls) = self.assemble_loops(tree);
        if self.loop_model {
            self.facts.exports = self.exports();
        }
        self.facts.custom_losses = self.custom_losses();
        // A `no_sync()` elsewhere in the file may hold the forward (a context of its own).
        // Read only when there is something to judge: most files have no `no_sync` block and
        // no DDP wrapper. The optimizer may step in another file (a helper that runs the
        // backward of a loss its caller computed).
        if !self.facts.no_sync_backward_only.is_empty() {
            let no_syncs = memchr::memmem::find_iter(self.src.as_bytes(), b"no_sync(").count();
            if no_syncs > self.no_sync_entered {
                self.facts.no_sync_backward_only.clear();
            }
        }
        if !self.facts.ddp_wraps.is_empty() && !self.sync_flags.is_empty() && loops::trains(&calls)
        {
            let backwards = sync_flag::backward_spans(&calls);
            self.facts.late_sync_flags =
                sync_flag::late_sync_flags(tree, self.src, &self.sync_flags, &backwards);
        }
        if !self.facts.ddp_wraps.is_empty() && !self.sync_choices.is_empty() {
            self.facts.no_sync_off_boundary = self.no_sync_off_boundary(&calls);
        }
        if !self.facts.ddp_wraps.is_empty() {
            self.facts.ddp_scopes = self.ddp_scopes();
            self.facts.controls_grad_sync = self.controls_grad_sync();
        } else if self.loop_model {
            self.facts.links.ddp_candidates = self.ddp_candidates();
        }
        // Under a default `Accelerator()`, only a DeepSpeed plugin that the run's launch
        // configures divides: the rule judges those against the run's DeepSpeed config.
        self.facts.manual_divisions.retain(|d| {
            d.framework != Framework::Accelerate || accelerate_divides || d.engine_config
        });
        self.facts.value_exports = self.value_exports();
        self.facts.scopes = self
            .scopes
            .iter()
            .map(|s| ScopeFacts {
                name: s.name.clone(),
                ..ScopeFacts::default()
            })
            .collect();
        if deferred.is_none() {
            deferred::scope_tests(&mut self.facts, &self.cond_spans, self.src);
        }
        (self.facts, deferred)
    }

    /// What a condition's text tests (its first 256 bytes: tests are short).
    fn topics(&self, span: &Range<usize>) -> Topics {
        topics_in(self.src, span)
    }

    /// What the conditions around the current statement test.
    fn guard(&self) -> Topics {
        self.stack
            .iter()
            .fold(Topics::default(), |t, (_, f)| match f {
                Frame::Branch(c, taken) => match self.cond_spans.get(*c) {
                    Some((_, span)) => {
                        let mut topics = self.topics(span);
                        topics.checkpointing = self
                            .conds
                            .get(*c)
                            .is_some_and(|cond| cond.checkpointing[usize::from(!taken)]);
                        t.union(topics)
                    }
                    None => t,
                },
                _ => t,
            })
    }
}

/// What the condition at `span` of `src` tests (its first 256 bytes: tests are short).
fn topics_in(src: &str, span: &Range<usize>) -> Topics {
    let text = src.get(span.clone()).unwrap_or("");
    Topics::of(&text[..crate::source::floor_char_boundary(text, text.len().min(256))])
}

fn unparen(mut node: Node) -> Node {
    while node.ty() == "parenthesized_expression" {
        match node.named_child(0) {
            Some(inner) => node = inner,
            None => break,
        }
    }
    node
}

/// The positional arguments of a call's argument list, in order (keywords and comments left out).
fn positionals(args: Option<Node>) -> Vec<Node> {
    let Some(args) = args else {
        return Vec::new();
    };
    let mut c = args.walk();
    args.named_children(&mut c)
        .filter(|n| !matches!(n.ty(), "keyword_argument" | "comment"))
        .collect()
}

/// The `i`th positional argument of a call's argument list, found without collecting them.
fn positional(args: Option<Node>, i: usize) -> Option<Node> {
    let args = args?;
    let mut c = args.walk();
    let found = args
        .named_children(&mut c)
        .filter(|n| !matches!(n.ty(), "keyword_argument" | "comment"))
        .nth(i);
    found
}

/// `a / b`, `a // b`, `a /= b` or `a //= b`.
fn is_division(node: Node) -> bool {
    let ops: &[&str] = match node.ty() {
        "binary_operator" => &["/", "//"],
        "augmented_assignment" => &["/=", "//="],
        _ => return false,
    };
    node.field("operator")
        .is_some_and(|o| ops.contains(&o.ty()))
}

fn last_segment(s: &str) -> &str {
    s.rsplit('.').next().unwrap_or(s)
}

/// A bare name or a dotted one (`cfg`, `args.train`): no call, no arithmetic.
fn plain_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
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

/// A divisor that is the accumulation factor (`args.gradient_accumulation_steps`, `self.accum`,
/// `gas`, `self.trainer.accumulate_grad_batches`).
fn names_accumulation(text: &str) -> bool {
    contains_word(text, "accum")
        || contains_word(text, "grad_acc")
        || text
            .split(['.', '_', '(', ')'])
            .any(|w| w.eq_ignore_ascii_case("gas"))
}

/// `text` holds `word` (lowercase ASCII), in any case, without allocating.
fn contains_word(text: &str, word: &str) -> bool {
    let (t, w) = (text.as_bytes(), word.as_bytes());
    let Some(&first) = w.first() else {
        return true;
    };
    memchr::memchr2_iter(first, first.to_ascii_uppercase(), t).any(|at| {
        t.get(at..at + w.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(w))
    })
}

/// A loop variable or bound that names micro-batches.
fn names_micro_batches(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    names_accumulation(text) || ["micro", "chunk"].iter().any(|w| t.contains(w))
}

/// A multiplier that normalises by counts (`loss * num_tokens`) rather than a constant weight.
fn is_count_like(text: &str) -> bool {
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
    .any(|w| contains_word(text, w))
        // `loss * bs`: a per-sample mean scaled back to a sum over the batch.
        || text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| ["bs", "nbs", "bsz"].iter().any(|b| w.eq_ignore_ascii_case(b)))
}

#[cfg(test)]
mod tests;
