//! GA009's control of DDP's gradient sync. The late sync flag: `model.require_backward_grad_sync
//! = ...` set on a micro-step after the forward it governs and before the backward. DDP reads the
//! flag in `forward`, where it prepares the reduction of the backward that follows, so a value
//! set after the forward only takes effect on the next micro-step. The same holds for a
//! `no_sync()` block that holds only the backward.

use crate::frontend::fields::{PyField, PyKind};
use crate::frontend::loops::CallEvent;
use std::ops::Range;
use tree_sitter::{Node, Tree};

/// The flag assignments (`statements`) set between a micro-step's forward of the same model
/// and its backward, each with that forward. `backwards` are the file's backward calls.
pub(super) fn late_sync_flags(
    tree: &Tree,
    src: &str,
    statements: &[Range<usize>],
    backwards: &[Range<usize>],
) -> Vec<(Range<usize>, Range<usize>)> {
    let root = tree.root_node();
    let text = |n: Node| src.get(n.byte_range()).unwrap_or("");
    let sets: Vec<(Node, &str, &str)> = statements
        .iter()
        .filter_map(|at| {
            let set = root
                .descendant_for_byte_range(at.start, at.end)
                .filter(|n| n.ty() == "assignment")?;
            let model = set.field("left")?.field("object").map(text)?;
            Some((set, model, text(set.field("right")?)))
        })
        .collect();
    // A wrapper of the file's own (`self.require_backward_grad_sync = True` in its class) may
    // read the flag anywhere, in a hook of its own.
    if sets.iter().any(|(_, model, _)| *model == "self") {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (set, model, value) in sets {
        // A constant `True` syncs every micro-step anyway.
        if value == "True" {
            continue;
        }
        let Some(body) = enclosing_loop(set) else {
            continue;
        };
        let forwards = calls_of(body, src, model);
        let forward = forwards
            .iter()
            .rev()
            .find(|f| f.end_byte() <= set.start_byte() && runs_with(**f, set));
        let Some(forward) = forward else {
            continue;
        };
        // The backward of the same micro-step, with no forward of the model in between.
        let next_forward = forwards
            .iter()
            .find(|f| f.start_byte() > set.end_byte())
            .map_or(usize::MAX, |f| f.start_byte());
        let backward = backwards.iter().any(|b| {
            b.start > set.end_byte()
                && b.start < next_forward
                && b.end <= body.end_byte()
                && root
                    .descendant_for_byte_range(b.start, b.end)
                    .is_some_and(|n| may_run_after(n, set))
        });
        if backward {
            out.push((set.byte_range(), forward.byte_range()));
        }
    }
    out
}

/// The backward calls the walk recorded.
pub(super) fn backward_spans(calls: &[CallEvent]) -> Vec<Range<usize>> {
    calls
        .iter()
        .filter(|c| !c.inlined && c.kind.is_backward())
        .map(|c| c.call.span.clone())
        .collect()
}

/// The body of the innermost loop around `node`, within its function.
fn enclosing_loop(node: Node) -> Option<Node> {
    let mut n = node.parent()?;
    loop {
        match n.ty() {
            "for_statement" | "while_statement" => return n.field("body"),
            "function_definition" | "class_definition" | "lambda" => return None,
            _ => n = n.parent()?,
        }
    }
}

/// The calls of `model` itself (`model(x)`, `model.forward(x)`) in `body`.
fn calls_of<'t>(body: Node<'t>, src: &str, model: &str) -> Vec<Node<'t>> {
    let mut out = Vec::new();
    let mut cursor = body.walk();
    let mut stack = vec![body];
    while let Some(n) = stack.pop() {
        if n.ty() == "call" {
            let callee = n.field("function").and_then(|f| src.get(f.byte_range()));
            if callee.is_some_and(|c| c == model || c.strip_suffix(".forward") == Some(model)) {
                out.push(n);
            }
        }
        stack.extend(n.named_children(&mut cursor));
    }
    out.sort_by_key(|n| n.start_byte());
    out
}

/// The arms of a test: of two statements in different arms, one runs without the other.
const ARMS: [&str; 7] = [
    "if_statement",
    "elif_clause",
    "else_clause",
    "try_statement",
    "except_clause",
    "match_statement",
    "case_clause",
];

/// What runs apart from the statements around it: a function, or an expression that may not
/// evaluate all its parts.
const APART: [&str; 9] = [
    "function_definition",
    "lambda",
    "class_definition",
    "conditional_expression",
    "boolean_operator",
    "list_comprehension",
    "generator_expression",
    "dictionary_comprehension",
    "set_comprehension",
];

/// The innermost ancestor of `node` that holds `set` too, if no ancestor in between is `stop`.
fn common_ancestor<'t>(node: Node<'t>, set: Node, stop: impl Fn(&str) -> bool) -> Option<Node<'t>> {
    let mut n = node;
    while let Some(p) = n.parent() {
        if p.start_byte() <= set.start_byte() && set.end_byte() <= p.end_byte() {
            return Some(p);
        }
        if stop(p.ty()) {
            return None;
        }
        n = p;
    }
    None
}

/// `node` runs on every pass through the statement `set` runs on: between it and their common
/// ancestor there is no branch, loop or function of its own.
fn runs_with(node: Node, set: Node) -> bool {
    let branches = |ty: &str| {
        ARMS.contains(&ty)
            || APART.contains(&ty)
            || matches!(ty, "for_statement" | "while_statement")
    };
    common_ancestor(node, set, branches).is_some()
}

/// `node` may run after the statement `set` on the same pass: under a test of its own (`if not
/// args.inference_only: loss.backward()` runs on the path where the test holds), but not in
/// another arm of a test `set` is in, nor in a function of its own.
fn may_run_after(node: Node, set: Node) -> bool {
    common_ancestor(node, set, |ty| APART.contains(&ty)).is_some_and(|a| !ARMS.contains(&a.ty()))
}

/// A `with` block whose statements are all backwards (`loss.backward()`,
/// `scaler.scale(loss).backward()`): what it computes was computed before it.
pub(super) fn backward_only(with: Node, src: &str) -> bool {
    with.field("body")
        .is_some_and(|body| only_backwards(body, src))
}

/// A block whose statements are all backwards: calls of `backward(`, or tests and `with` blocks
/// (`amp.scale_loss(...)`, a GradScaler's arm) whose every arm holds backwards only.
fn only_backwards(block: Node, src: &str) -> bool {
    let mut c = block.walk();
    let mut statements = block
        .named_children(&mut c)
        .filter(|n| n.ty() != "comment")
        .peekable();
    statements.peek().is_some()
        && statements.all(|n| match n.ty() {
            "expression_statement" => is_backward(n, src),
            "with_statement" => backward_only(n, src),
            "if_statement" => {
                let mut c = n.walk();
                let arms = n
                    .children_by_field_name("alternative", &mut c)
                    .filter_map(|arm| arm.field("body").or_else(|| arm.field("consequence")));
                n.field("consequence")
                    .into_iter()
                    // Collected: the arms borrow the cursor.
                    .chain(arms.collect::<Vec<_>>())
                    .all(|arm| only_backwards(arm, src))
            }
            _ => false,
        })
}

/// A statement that calls a backward: `loss.backward()`, `scaler.scale(loss).backward()`,
/// `accelerator.backward(loss)`, `self.manual_backward(loss)`, or a function of the file whose
/// body holds only backwards (`run_backward()`). A helper merely named for one
/// (`self._forward_backward(batch)`) may run the forward as well.
fn is_backward(statement: Node, src: &str) -> bool {
    let Some(function) = statement
        .named_child(0)
        .filter(|c| c.ty() == "call")
        .and_then(|c| c.field("function"))
    else {
        return false;
    };
    let callee = src.get(function.byte_range()).unwrap_or("");
    match function.ty() {
        "attribute" => matches!(super::last_segment(callee), "backward" | "manual_backward"),
        "identifier" => {
            let mut root = statement;
            while let Some(p) = root.parent() {
                root = p;
            }
            defined_backward_only(root, callee, src)
        }
        _ => false,
    }
}

/// Whether `scope` defines a function `name` (at any depth) whose body holds only backwards.
fn defined_backward_only(scope: Node, name: &str, src: &str) -> bool {
    let mut c = scope.walk();
    let children: Vec<Node> = scope.named_children(&mut c).collect();
    children.into_iter().any(|n| match n.ty() {
        "function_definition" => {
            let named = n.field("name").and_then(|d| src.get(d.byte_range())) == Some(name);
            let body = n.field("body");
            // A function that calls itself is not followed.
            (named
                && body.is_some_and(|b| {
                    !super::contains_word(src.get(b.byte_range()).unwrap_or(""), name)
                        && only_backwards(b, src)
                }))
                || body.is_some_and(|b| defined_backward_only(b, name, src))
        }
        "block"
        | "class_definition"
        | "decorated_definition"
        | "if_statement"
        | "for_statement"
        | "while_statement"
        | "with_statement"
        | "try_statement" => defined_backward_only(n, name, src),
        _ => n
            .field("body")
            .is_some_and(|b| defined_backward_only(b, name, src)),
    })
}

/// A call of this name (its last segment) wraps a model in `DistributedDataParallel`.
pub(super) fn wraps_in_ddp(callee: &str) -> bool {
    callee == "DistributedDataParallel" || callee.ends_with("DDP")
}

/// Whether `text` enters DDP's `no_sync()`: the model's own (`model.no_sync()`), or a framework's
/// that calls it for the model it is given (`accelerator.no_sync(model)`). A plugin's `no_sync`
/// handed the optimizer as well (ColossalAI's `booster.no_sync(model, optimizer)`) is DDP's under
/// `TorchDDPPlugin` (`torch_ddp`: the file names it) and otherwise the ZeRO optimizer's own,
/// which holds back the reduction in the backward alone.
pub(super) fn ddp_no_sync(text: &str, torch_ddp: impl Fn() -> bool) -> bool {
    text.match_indices("no_sync(").any(|(at, call)| {
        let mut depth = 0;
        for c in text[at + call.len()..].chars() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' if depth == 0 => return true,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => return torch_ddp(),
                _ => {}
            }
        }
        true
    })
}

impl super::Walker<'_> {
    /// The functions that may run a model wrapped in `DistributedDataParallel` (see
    /// [`Facts::ddp_scopes`](crate::facts::Facts::ddp_scopes)): a wrapping function (with the
    /// other methods of its class), the functions that call it (they get the model back) and,
    /// from those, every function they call (handed the model, or reading it from an object)
    /// and every method of an object they build.
    /// The file enters `no_sync()` or sets `require_backward_grad_sync`, in code, not only in a
    /// comment the walk saw (`# TODO: use no_sync()`).
    pub(super) fn controls_grad_sync(&self) -> bool {
        let comments = &self.facts.comments;
        let in_code = |at: usize| !comments.iter().any(|c| c.range.contains(&at));
        ["no_sync", "require_backward_grad_sync"]
            .iter()
            .any(|w| memchr::memmem::find_iter(self.src.as_bytes(), w.as_bytes()).any(in_code))
    }

    pub(super) fn ddp_scopes(&self) -> Vec<usize> {
        self.model_reach(&self.ddp_wrap_scopes, true)
    }

    /// The functions that may run a model the functions `wraps` get (they wrap it, or a call
    /// returns it to them): see [`Self::ddp_scopes`]. Their callers count when `returned`: a
    /// function that wraps a model is read as one that returns it.
    pub(super) fn model_reach(&self, wraps: &[usize], returned: bool) -> Vec<usize> {
        if wraps.contains(&0) {
            return (0..self.scopes.len()).collect();
        }
        let calls: Vec<(usize, usize)> = self
            .invokes
            .iter()
            .filter_map(|i| Some((i.ctx.scope, self.function(&i.callee)?)))
            .collect();
        // An object built from a class of this file (`cb = Callback(opt)`), whose methods run
        // wherever the object goes: the builder reaches every method of the class.
        let builds: Vec<(usize, usize)> = self
            .invokes
            .iter()
            .filter(|i| i.callee.class.is_none() && !i.callee.instance)
            .filter_map(|i| {
                let class = self
                    .scopes
                    .iter()
                    .position(|s| s.is_class && s.name == i.callee.name)?;
                Some((i.ctx.scope, class))
            })
            .collect();
        // A method's model is the object's (`self.model = DDP(...)`): every method of its class.
        let classes: Vec<usize> = wraps
            .iter()
            .filter_map(|s| self.scopes.get(*s)?.class)
            .collect();
        let mut reach: Vec<usize> = (0..self.scopes.len())
            .filter(|s| {
                wraps.contains(s) || self.scopes[*s].class.is_some_and(|c| classes.contains(&c))
            })
            .collect();
        for (caller, callee) in calls.iter().filter(|_| returned) {
            if reach.contains(callee) && !reach.contains(caller) {
                reach.push(*caller);
            }
        }
        loop {
            let before = reach.len();
            for (caller, callee) in &calls {
                if reach.contains(caller) && !reach.contains(callee) {
                    reach.push(*callee);
                }
            }
            for (builder, class) in &builds {
                if reach.contains(builder) {
                    let methods = (0..self.scopes.len())
                        .filter(|m| self.scopes[*m].class == Some(*class) && !reach.contains(m));
                    let methods: Vec<usize> = methods.collect();
                    reach.extend(methods);
                }
            }
            if reach.len() == before {
                break;
            }
        }
        reach.sort_unstable();
        reach
    }
}

impl<'s> super::Walker<'s> {
    /// `ctx = model.no_sync() if i % N != 0 else nullcontext()`, or `ctx = model.no_sync()` in an
    /// arm of `if i % N != 0:`: the micro-step that syncs, when it is one remainder of the
    /// window.
    pub(super) fn note_sync_choice(&mut self, value: Node, at: Range<usize>) {
        let value = super::unparen(value);
        let (cond, no_sync_when) = if value.ty() == "conditional_expression" {
            let mut c = value.walk();
            let parts: Vec<Node> = value.named_children(&mut c).collect();
            let [then, cond, otherwise] = parts.as_slice() else {
                return;
            };
            let held = |n: &Node| self.text(*n).contains("no_sync");
            match (held(then), held(otherwise)) {
                (true, false) => (*cond, true),
                (false, true) => (*cond, false),
                _ => return,
            }
        } else {
            // In an arm: the innermost test around it, written in this function.
            let Some(b) = self.ctx(at.start).branches.last().copied() else {
                return;
            };
            let Some(pick) = self
                .conds
                .get(b.cond)
                .filter(|c| c.scope == self.scope())
                .and_then(|c| c.accum.as_ref()?.pick.clone())
            else {
                return;
            };
            if b.taken != pick.true_on_pick {
                self.sync_choices.push((at, self.scope(), pick));
            }
            return;
        };
        let Some(pick) = self.pick(cond, 0) else {
            return;
        };
        // It syncs where the test is not `no_sync_when`: one remainder only when that is where
        // the test is true alone, or false alone.
        if no_sync_when != pick.true_on_pick {
            self.sync_choices.push((at, self.scope(), pick));
        }
    }

    /// A `with` whose item chooses `no_sync()` itself (`with (m.no_sync() if ... else
    /// nullcontext()):`), or enters it in an arm of a remainder test.
    pub(super) fn note_sync_choice_in(&mut self, with: Node) {
        let line = with.start_byte()..super::line_end(self.src, with.start_byte());
        let mut c = with.walk();
        let Some(clause) = with.children(&mut c).find(|n| n.ty() == "with_clause") else {
            return;
        };
        let mut ic = clause.walk();
        let items: Vec<Node> = clause
            .named_children(&mut ic)
            .filter_map(|i| i.field("value"))
            .filter(|v| self.text(*v).contains("no_sync"))
            .collect();
        for value in items {
            self.note_sync_choice(value, line.clone());
        }
    }

    /// The sync choices whose synced micro-step is not the one the optimizer steps at, in the
    /// same function: the step runs under a remainder test of the same counter and factor
    /// that picks another remainder.
    pub(super) fn no_sync_off_boundary(
        &self,
        calls: &[CallEvent],
    ) -> Vec<crate::facts::OffBoundarySync> {
        let same = |a: &str, b: &str| {
            a == b
                || self.assigned_text.get(a).is_some_and(|t| t.trim() == b)
                || self.assigned_text.get(b).is_some_and(|t| t.trim() == a)
        };
        // A helper's counter read from what the loop hands it, under the counter's own key
        // (`idx = state["idx"]` in the helper, `state = {"idx": idx, ...}` in the loop).
        let handed = |helper: usize, inner: &str, outer_scope: usize, outer: &str| {
            let squeeze = |t: &str| -> String { t.split_whitespace().collect() };
            let Some(read) = self.scope_text.get(&(helper, inner.to_string())) else {
                return false;
            };
            let read = squeeze(read);
            let Some((holder, key)) = read.split_once('[') else {
                return false;
            };
            let key = key.trim_end_matches(']').trim_matches(['"', '\'']);
            let dict = self.scope_text.get(&(outer_scope, holder.to_string()));
            key == inner
                && dict.is_some_and(|d| {
                    let d = squeeze(d);
                    ['"', '\''].iter().any(|q| {
                        [',', '}']
                            .iter()
                            .any(|end| d.contains(&format!("{q}{key}{q}:{outer}{end}")))
                    })
                })
        };
        let mut out = Vec::new();
        for (at, scope, sync) in &self.sync_choices {
            let found = calls.iter().find_map(|ev| {
                if ev.ctx.scope != *scope
                    || !matches!(ev.kind, crate::frontend::loops::CallKind::Step { .. })
                {
                    return None;
                }
                ev.ctx.branches.iter().find_map(|b| {
                    let cond = self.conds.get(b.cond)?;
                    let step = cond.accum.as_ref()?.pick.as_ref()?;
                    // In the loop's own function, or in a helper it calls that reads the
                    // loop's counter from what it is handed.
                    let counter = match cond.scope == *scope {
                        true => same(&step.counter, &sync.counter),
                        false => {
                            ev.inlined && handed(cond.scope, &step.counter, *scope, &sync.counter)
                        }
                    };
                    (counter
                        && b.taken == step.true_on_pick
                        && same(&step.factor, &sync.factor)
                        && step.residue != sync.residue)
                        .then(|| (cond.text.clone(), ev.call.span.clone()))
                })
            });
            if let Some((step_test, step)) = found {
                let r = sync.residue;
                let residue = match r {
                    0 => "0".to_string(),
                    r if r < 0 => format!("{} - {}", sync.factor, -r),
                    r => r.to_string(),
                };
                out.push(crate::facts::OffBoundarySync {
                    choice: at.clone(),
                    syncs_on: format!("{} % {} == {residue}", sync.counter, sync.factor),
                    step_test,
                    step,
                });
            }
        }
        out
    }
}
