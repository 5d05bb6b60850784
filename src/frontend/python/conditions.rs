//! What an `if` or a loop says about the accumulation window: `% N` tests, names holding one,
//! counters that are reset or kept modulo N, `continue` guards, micro-batch loops, and the names a
//! test reads (a test that reads nothing the micro-steps change takes the same arm on each).

use super::*;
use crate::frontend::fields::{PyField, PyKind};
use crate::frontend::loops::Pick;

impl<'s> Walker<'s> {
    /// The condition of an `if`/`elif`, registered once per node (both branches share it).
    pub(super) fn cond_of(&mut self, stmt: Node) -> Option<usize> {
        if stmt.ty() == "case_clause" {
            return self.case_cond(stmt);
        }
        if !matches!(stmt.ty(), "if_statement" | "elif_clause") {
            return None;
        }
        if let Some(&id) = self.cond_ids.get(&stmt.id()) {
            return Some(id);
        }
        let cond = stmt.field("condition")?;
        let reads = if self.loop_model {
            self.reads(cond)
        } else {
            None
        };
        // The same test again in the same scope is the same condition: its arms exclude each
        // other's (`if fp16: scaled backward` ... `if fp16: unscale else: clip`).
        let key = (self.scope(), self.text(cond));
        if reads.is_some() {
            if let Some(&id) = self.cond_texts.get(&key) {
                self.cond_ids.insert(stmt.id(), id);
                return Some(id);
            }
        }
        let accum = match self.accum_test(cond, true) {
            Some((factor, _, boundary_when_true)) => Some(AccumTest {
                factor,
                counter: None,
                boundary_when_true,
                phase: self.phase(cond, 0),
                pick: self.pick(cond, 0),
            }),
            None => self.counter_test(cond, stmt.field("consequence")?).map(
                |(factor, counter, boundary_when_true)| AccumTest {
                    factor,
                    counter: Some(counter),
                    boundary_when_true,
                    phase: None,
                    pick: None,
                },
            ),
        };
        let text = self.text(cond);
        self.conds.push(Cond {
            text: text[..crate::source::floor_char_boundary(text, text.len().min(200))].to_string(),
            scope: self.scope(),
            accum,
            above_one: self.above_one(cond, true, 0),
            sync: self.sync_test(cond),
            checkpointing: if self.value_model {
                [true, false].map(|taken| {
                    self.arm_holds(cond, taken, &|w, n| Topics::of(w.text(n)).checkpointing)
                        == Some(true)
                })
            } else {
                [false; 2]
            },
            reads,
            stages: None,
        });
        self.cond_reads_factor
            .push(names_accumulation(self.text(cond)));
        // What it tests is read only if a memory formula is written under it or in its scope.
        self.cond_spans.push((self.scope(), cond.byte_range()));
        let id = self.conds.len() - 1;
        self.cond_ids.insert(stmt.id(), id);
        if self.conds[id].reads.is_some() {
            self.cond_texts.insert(key, id);
        }
        Some(id)
    }

    /// An arm of `match` on a ZeRO stage (`case 2:`, `case 1 | 2:`): a test taken for those
    /// stages. Other arms test nothing memlint reads.
    fn case_cond(&mut self, clause: Node) -> Option<usize> {
        if let Some(&id) = self.cond_ids.get(&clause.id()) {
            return Some(id);
        }
        // `match` is rare: asking for the parents (a search from the root) costs little.
        let subject = clause
            .parent()?
            .parent()
            .filter(|m| m.ty() == "match_statement")?
            .field("subject")?;
        let on = self.text(subject);
        let mut c = clause.walk();
        let test = clause
            .children(&mut c)
            .filter(|p| p.ty() == "case_pattern")
            .flat_map(|p| self.text(p).split('|'))
            .map(|value| format!("{on} == {}", value.trim()))
            .collect::<Vec<_>>()
            .join(" or ");
        let stages = crate::facts::stage_mask(&test)?;
        self.conds.push(Cond {
            text: test,
            scope: self.scope(),
            stages: Some(stages),
            ..Cond::default()
        });
        self.cond_reads_factor.push(false);
        // What the arm tests is its subject's topic.
        self.cond_spans.push((self.scope(), subject.byte_range()));
        let id = self.conds.len() - 1;
        self.cond_ids.insert(clause.id(), id);
        Some(id)
    }

    /// The names and attributes a test reads, or `None` when it calls something: it may change
    /// between micro-steps. Whether what it reads changes is the loop model's to judge.
    pub(super) fn reads(&self, cond: Node) -> Option<Vec<String>> {
        // Read from the text: tests are short, and a scan costs less than visiting nodes.
        let text = self.text(cond);
        if text.len() > 256 {
            return None;
        }
        let bytes = text.as_bytes();
        let mut names = Vec::new();
        let mut i = 0;
        while let Some(&c) = bytes.get(i) {
            if c == b'"' || c == b'\'' {
                i += 1 + bytes[i + 1..]
                    .iter()
                    .position(|b| *b == c)
                    .unwrap_or(bytes.len());
                i += 1;
                continue;
            }
            if c == b':' && bytes.get(i + 1) == Some(&b'=') {
                return None;
            }
            if !(c.is_ascii_alphanumeric() || c == b'_') {
                i += 1;
                continue;
            }
            let start = i;
            while bytes
                .get(i)
                .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.')
            {
                i += 1;
            }
            let word = &text[start..i];
            if c.is_ascii_digit() {
                continue;
            }
            // A pure builtin reads its arguments; any other call may change between micro-steps.
            if text[i..].trim_start().starts_with('(') {
                if matches!(
                    word,
                    "hasattr"
                        | "isinstance"
                        | "getattr"
                        | "callable"
                        | "len"
                        | "int"
                        | "float"
                        | "bool"
                ) {
                    continue;
                }
                return None;
            }
            if matches!(word, "lambda" | "await") {
                return None;
            }
            if matches!(
                word,
                "and" | "or" | "not" | "is" | "in" | "None" | "True" | "False" | "if" | "else"
            ) {
                continue;
            }
            // `self.x` is read as a whole; `a.b` changes when `a` does.
            names.push(word.split('.').next().unwrap_or(word).to_string());
            if word.starts_with("self.") {
                names.push(word.to_string());
            }
        }
        Some(names)
    }

    /// `N > 1`, `N >= 2`, `N != 1`, `1 < N`, `N == 1`, `N <= 1`, `not ...`, or a name holding
    /// one: the expression compared with one, and whether the test is true when it is above one.
    pub(super) fn above_one(
        &self,
        cond: Node,
        polarity: bool,
        depth: usize,
    ) -> Option<(String, bool)> {
        let cond = unparen(cond);
        if depth > 4 {
            return None;
        }
        match cond.ty() {
            "not_operator" => self.above_one(cond.field("argument")?, !polarity, depth + 1),
            "identifier" | "attribute" => {
                let name = self.text(cond);
                let (expr, above) = self
                    .above_one_names
                    .get(&(self.scope(), name.to_string()))?;
                Some((expr.clone(), *above == polarity))
            }
            "comparison_operator" => {
                let mut cur = cond.walk();
                let kids: Vec<Node> = cond.children(&mut cur).collect();
                let [a, op, b] = kids.as_slice() else {
                    return None;
                };
                let number = |n: &Node| parse_number(self.text(*n));
                // Written with the number on the left: mirror the operator.
                let (expr, op, k) = match (number(a), number(b)) {
                    (None, Some(k)) => (*a, self.text(*op), k),
                    (Some(k), None) => (
                        *b,
                        match self.text(*op) {
                            "<" => ">",
                            ">" => "<",
                            "<=" => ">=",
                            ">=" => "<=",
                            o => o,
                        },
                        k,
                    ),
                    _ => return None,
                };
                if !matches!(unparen(expr).ty(), "identifier" | "attribute" | "subscript") {
                    return None;
                }
                let above = match (op, k) {
                    (">", 1.0) | (">=", 2.0) | ("!=", 1.0) => true,
                    ("==", 1.0) | ("<=", 1.0) | ("<", 2.0) => false,
                    _ => return None,
                };
                Some((self.text(unparen(expr)).to_string(), above == polarity))
            }
            _ => None,
        }
    }

    /// `accelerator.sync_gradients` (its negation, a conjunction holding it): whether the test
    /// is true on the iteration that syncs.
    pub(super) fn sync_test(&self, cond: Node) -> Option<bool> {
        self.arm_holds(cond, true, &Self::syncs)
    }

    /// `accelerator.sync_gradients`.
    pub(super) fn syncs(&self, n: Node) -> bool {
        n.ty() == "attribute" && self.text(n).ends_with(".sync_gradients")
    }

    /// On one arm of a test (`taken`: its body, else its `else:`), whether `leaf` is known to
    /// hold: through parentheses, `not`, a comparison with `True`, `False`, `None` or `0`, the
    /// body of `a and b` (both hold) and the `else:` of `a or b` (neither holds). `None`: the
    /// arm may run either way.
    pub(super) fn arm_holds(
        &self,
        cond: Node,
        taken: bool,
        leaf: &dyn Fn(&Self, Node) -> bool,
    ) -> Option<bool> {
        let cond = unparen(cond);
        match cond.ty() {
            "not_operator" => self.arm_holds(cond.field("argument")?, !taken, leaf),
            "boolean_operator" => {
                let both = match cond.field("operator").map(|o| self.text(o)) {
                    Some("and") => true,
                    Some("or") => false,
                    _ => return None,
                };
                if taken != both {
                    return None;
                }
                let left = self.arm_holds(cond.field("left")?, taken, leaf);
                left.or_else(|| self.arm_holds(cond.field("right")?, taken, leaf))
            }
            "comparison_operator" => match self.truth_compared(cond) {
                Some((operand, same)) => self.arm_holds(operand, taken == same, leaf),
                None => leaf(self, cond).then_some(taken),
            },
            _ => leaf(self, cond).then_some(taken),
        }
    }

    /// `x == False`, `x is None`, `x != True`: `x`, and whether the test is true when `x` is.
    fn truth_compared<'t>(&self, cmp: Node<'t>) -> Option<(Node<'t>, bool)> {
        let operand = cmp.named_child(0)?;
        let constant = cmp.named_child(1)?;
        if cmp.named_child_count() != 2 {
            return None;
        }
        let op = self
            .text(cmp)
            .get(operand.end_byte() - cmp.start_byte()..constant.start_byte() - cmp.start_byte())?;
        let equal = match op.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["=="] | ["is"] => true,
            ["!="] | ["is", "not"] => false,
            _ => return None,
        };
        let truthy = match self.text(constant) {
            "True" => true,
            "False" | "None" | "0" => false,
            _ => return None,
        };
        Some((operand, equal == truthy))
    }

    /// Names bound by an assignment target, a loop variable or a pattern: noted in the loops
    /// and the scope around them.
    pub(super) fn note_assigned_names(&mut self, target: Node) {
        let mut stack = vec![target];
        while let Some(n) = stack.pop() {
            match n.ty() {
                "identifier" | "attribute" | "subscript" => {
                    let text = self.text(n);
                    // `x.a = ...` and `x[i] = ...` change what `x` holds.
                    let root = text.split(['.', '[']).next().unwrap_or(text);
                    let mut names = vec![root.to_string()];
                    if text.starts_with("self.") && n.ty() == "attribute" {
                        names.push(text.to_string());
                    }
                    self.note_assigned(names);
                }
                _ => {
                    let mut c = n.walk();
                    stack.extend(n.named_children(&mut c));
                }
            }
        }
    }

    pub(super) fn note_assigned(&mut self, names: Vec<String>) {
        for (_, f) in self.stack.iter().rev() {
            match f {
                Frame::Loop(l) => {
                    if let Some(info) = self.loops.get_mut(*l) {
                        info.assigned.extend(names.iter().cloned());
                    }
                }
                Frame::Scope(s) => {
                    if let Some(sc) = self.scopes.get_mut(*s) {
                        sc.assigned.extend(names);
                    }
                    return;
                }
                _ => {}
            }
        }
        if let Some(sc) = self.scopes.get_mut(0) {
            sc.assigned.extend(names);
        }
    }

    /// Whether `cond` tests `i % N` (directly, negated, or through a name holding such a test).
    /// Returns N and whether the test is true on the boundary step.
    pub(super) fn accum_test(
        &self,
        cond: Node,
        polarity: bool,
    ) -> Option<(String, Range<usize>, bool)> {
        self.accum_test_at(unparen(cond), polarity, 0)
    }

    pub(super) fn accum_test_at(
        &self,
        cond: Node,
        polarity: bool,
        depth: usize,
    ) -> Option<(String, Range<usize>, bool)> {
        if depth > 8 {
            return None;
        }
        match cond.ty() {
            "parenthesized_expression" => self.accum_test_at(unparen(cond), polarity, depth + 1),
            "not_operator" => {
                self.accum_test_at(unparen(cond.field("argument")?), !polarity, depth + 1)
            }
            "boolean_operator" => {
                let op = cond.field("operator").map(|o| self.text(o));
                let l = self.accum_test_at(unparen(cond.field("left")?), polarity, depth + 1);
                let r = self.accum_test_at(unparen(cond.field("right")?), polarity, depth + 1);
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
                let m = self
                    .modulo(kids[0])
                    .or_else(|| self.modulo(kids[2]))
                    .or_else(|| self.wrapped_counter(kids[0], kids[2]))?;
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

    /// `acc == 0` where `acc` counts modulo N (`acc = (acc + 1) % N`): its factor.
    pub(super) fn wrapped_counter(&self, a: Node, b: Node) -> Option<(String, Range<usize>)> {
        let (name, zero) = match (unparen(a).ty(), unparen(b).ty()) {
            ("identifier" | "attribute", "integer") => (a, b),
            ("integer", "identifier" | "attribute") => (b, a),
            _ => return None,
        };
        if self.text(zero) != "0" {
            return None;
        }
        let name = self.text(unparen(name));
        self.modulo_names
            .get(&(scope_of_name(self, name), name.to_string()))
            .cloned()
    }

    /// `if seen >= N: ...; seen = 0`: a counter compared with N and reset in the branch. The
    /// comparison may be held in a name first (`full = seen == N` ... `if full:`).
    pub(super) fn counter_test(&self, cond: Node, body: Node) -> Option<(String, String, bool)> {
        let cond = unparen(cond);
        // `seen >= N or last_batch`: still steps when the window is full.
        if cond.ty() == "boolean_operator"
            && cond.field("operator").map(|o| self.text(o)) == Some("or")
        {
            return self
                .counter_test(cond.field("left")?, body)
                .or_else(|| self.counter_test(cond.field("right")?, body));
        }
        let held;
        let (name, reset, n) = match cond.ty() {
            "identifier" => {
                held = self
                    .counter_names
                    .get(&(self.scope(), self.text(cond).to_string()))?;
                (held.0.as_str(), held.1.as_str(), held.2.as_str())
            }
            _ => self.counter_comparison(cond)?,
        };
        let mut c = body.walk();
        let resets = body.named_children(&mut c).any(|st| {
            st.named_child(0).is_some_and(|a| {
                a.ty() == "assignment"
                    && a.field("left").map(|l| self.text(l)) == Some(name)
                    && a.field("right").map(|r| self.text(r)) == Some(reset)
            })
        });
        resets.then(|| (n.to_string(), name.to_string(), true))
    }

    /// `seen >= N` (or `==`, `>`, `N <= seen`) with N above 1: the counter, the value that resets
    /// it, and N. A window kept by hand, `now - last >= N`, is reset by `last = now`.
    pub(super) fn counter_comparison(&self, cond: Node) -> Option<(&'s str, &'s str, &'s str)> {
        let cond = unparen(cond);
        if cond.ty() != "comparison_operator" {
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
        if matches!(parse_number(self.text(n)), Some(v) if v <= 1.0) {
            return None;
        }
        let counter = unparen(counter);
        let (name, reset) = match counter.ty() {
            "identifier" | "attribute" => (self.text(counter), "0"),
            "binary_operator" if counter.field("operator").map(|o| self.text(o)) == Some("-") => {
                let now = counter.field("left")?;
                let last = counter.field("right")?;
                if !matches!(now.ty(), "identifier" | "attribute")
                    || !matches!(last.ty(), "identifier" | "attribute")
                {
                    return None;
                }
                (self.text(last), self.text(now))
            }
            _ => return None,
        };
        Some((name, reset, self.text(n)))
    }

    /// `N` of `for micro in range(N)` when the loop names micro-batches: the variable or `N` says
    /// so (`micro_step`, `accum_steps`, `chunk`). A loop over tasks or layers that happens to run
    /// backwards is not accumulation.
    pub(super) fn micro_factor(&self, node: Node) -> Option<String> {
        if node.ty() == "while_statement" {
            return self.counted_window(node);
        }
        if node.ty() != "for_statement" {
            return None;
        }
        let var = self.text(node.field("left")?);
        let iter = unparen(node.field("right")?);
        if iter.ty() != "call" || iter.field("function").map(|f| self.text(f)) != Some("range") {
            // A batch split into micro-batches (`batch.split(k)`, `torch.chunk(x, n)`, or a name
            // bound to one), or a collection named for them: one iteration per micro-batch.
            let it = self.text(iter);
            let split = |t: &str| {
                [".split(", ".chunk(", "tensor_split(", "array_split("]
                    .iter()
                    .any(|w| t.contains(w))
            };
            let bound = self.assigned_text.get(it).copied();
            let micro = split(it)
                || bound.is_some_and(split)
                || (matches!(iter.ty(), "identifier" | "attribute")
                    && (names_micro_batches(var) || names_micro_batches(it)));
            return micro.then(|| format!("len({it})"));
        }
        let args = iter.field("arguments")?;
        let mut c = args.walk();
        let args: Vec<Node> = args.named_children(&mut c).collect();
        let n_text = match args.as_slice() {
            [n] => self.text(*n).to_string(),
            [start, n] if self.text(*start) == "0" => self.text(*n).to_string(),
            // `range(1, N + 1)`
            [start, n] if self.text(*start) == "1" => {
                let n = self.text(*n);
                n.strip_suffix("+ 1")
                    .or_else(|| n.strip_suffix("+1"))?
                    .trim()
                    .to_string()
            }
            // `range(0, batch_size, micro_batch_size)`: chunks of one batch.
            [start, total, size] if self.text(*start) == "0" => {
                let size = self.text(*size);
                if !names_micro_batches(size) && !names_micro_batches(var) {
                    return None;
                }
                return Some(format!("{} // {size}", self.text(*total)));
            }
            _ => return None,
        };
        if matches!(parse_number(&n_text), Some(v) if v <= 1.0) {
            return None;
        }
        let named = names_micro_batches(var) || names_micro_batches(&n_text);
        (named || self.divides_by(node, &n_text)).then_some(n_text)
    }

    /// Whether the loop's body divides by `n` (`loss / n`, `loss /= n`, `loss.div(n)`): a loop
    /// of `n` passes whose losses are each scaled by `1/n` accumulates, whatever it is called.
    fn divides_by(&self, node: Node, n: &str) -> bool {
        let Some(body) = node.field("body") else {
            return false;
        };
        // Spaces dropped, line ends kept: what follows a divisor at the end of a line is not
        // part of it.
        let compact: String = self
            .text(body)
            .chars()
            .filter(|c| !matches!(c, ' ' | '\t'))
            .collect();
        ["/", "/=", ".div("].iter().any(|op| {
            let written = format!("{op}{n}");
            compact.match_indices(&written).any(|(at, _)| {
                // `// n` indexes; it does not scale.
                let floor = *op != ".div(" && compact[..at].ends_with('/');
                let after = compact[at + written.len()..].chars().next();
                !floor
                    && !after
                        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '(')
            })
        })
    }

    /// A `while` loop that adds up what each pass takes (`seen += batch`) and breaks once it
    /// reaches a total (`if seen >= total: break`): one pass per micro-batch, as many as
    /// `ceil(total / batch)`, written so that a fix may use it.
    fn counted_window(&self, node: Node) -> Option<String> {
        let body = node.field("body")?;
        let mut c = body.walk();
        let statements: Vec<Node> = body.named_children(&mut c).collect();
        let added = |name: &str| -> Option<String> {
            statements.iter().find_map(|st| {
                let a = st
                    .named_child(0)
                    .filter(|a| a.ty() == "augmented_assignment")?;
                let right = a.field("right")?;
                (self.text(a.field("left")?) == name
                    && a.field("operator").map(|o| self.text(o)) == Some("+="))
                .then(|| self.text(right).to_string())
            })
        };
        statements.iter().find_map(|st| {
            if st.ty() != "if_statement" {
                return None;
            }
            let consequence = st.field("consequence")?;
            let mut c = consequence.walk();
            let breaks = consequence
                .named_children(&mut c)
                .any(|n| n.ty() == "break_statement");
            let cond = unparen(st.field("condition")?);
            if !breaks || cond.ty() != "comparison_operator" {
                return None;
            }
            let mut cc = cond.walk();
            let kids: Vec<Node> = cond.children(&mut cc).collect();
            let [seen, op, total] = kids.as_slice() else {
                return None;
            };
            if !matches!(self.text(*op), ">=" | ">" | "==") {
                return None;
            }
            let step = added(self.text(*seen))?;
            let total = self.text(*total);
            Some(match step.trim() {
                "1" => total.to_string(),
                step => format!("-(-{total} // {step})"),
            })
        })
    }

    /// `if <true on micro-steps>: continue` as the loop's guard for the step that follows.
    pub(super) fn continue_guard(&mut self, node: Node) {
        if node.field("alternative").is_some() {
            return;
        }
        let Some(body) = node.field("consequence") else {
            return;
        };
        let mut c = body.walk();
        let last = body.named_children(&mut c).last();
        if last.is_none_or(|l| l.ty() != "continue_statement") {
            return;
        }
        let Some(cond) = self.cond_of(node) else {
            return;
        };
        let skips_micro_steps = self
            .conds
            .get(cond)
            .and_then(|t| t.accum.as_ref())
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

    /// The micro-step a plain remainder test picks (see `AccumTest::phase`): `A % N == K`,
    /// `A % N != K`, a bare `A % N` (`!= 0`), under any number of `not`s.
    fn phase(&self, cond: Node, depth: usize) -> Option<String> {
        let cond = unparen(cond);
        let squeeze = |n: Node| -> String {
            self.text(unparen(n))
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect()
        };
        match cond.ty() {
            "not_operator" if depth < 8 => self.phase(cond.field("argument")?, depth + 1),
            "binary_operator" => {
                self.modulo(cond)?;
                Some(format!("{}==0", squeeze(cond)))
            }
            "comparison_operator" => {
                let mut cur = cond.walk();
                let kids: Vec<Node> = cond.children(&mut cur).collect();
                let [a, op, b] = kids.as_slice() else {
                    return None;
                };
                if !matches!(self.text(*op), "==" | "!=") {
                    return None;
                }
                let (m, k) = match self.modulo(*a) {
                    Some(_) => (*a, *b),
                    None => {
                        self.modulo(*b)?;
                        (*b, *a)
                    }
                };
                Some(format!("{}=={}", squeeze(m), squeeze(k)))
            }
            _ => None,
        }
    }

    /// The micro-step a remainder test picks, by value (see [`Pick`]): `(i + c) % N == k`,
    /// `!=`, a bare `(i + c) % N`, `k` a number or `N - d`, under any number of `not`s.
    pub(super) fn pick(&self, cond: Node, depth: usize) -> Option<Pick> {
        let cond = unparen(cond);
        let int = |n: Node| parse_number(self.text(unparen(n))).filter(|v| v.fract() == 0.0);
        // `i`, `i + c`, `i - c`: the counter and its offset.
        let counter = |n: Node| -> Option<(String, i64)> {
            let n = unparen(n);
            if matches!(n.ty(), "identifier" | "attribute") {
                return Some((self.text(n).to_string(), 0));
            }
            let op = n.field("operator").map(|o| self.text(o))?;
            let (left, right) = (n.field("left")?, n.field("right")?);
            let c = int(right)? as i64;
            let left = unparen(left);
            if !matches!(left.ty(), "identifier" | "attribute") {
                return None;
            }
            let c = match op {
                "+" => c,
                "-" => -c,
                _ => return None,
            };
            Some((self.text(left).to_string(), c))
        };
        let of = |m: Node, k: i64, equal: bool| -> Option<Pick> {
            let m = unparen(m);
            let (factor, _) = self.modulo(m)?;
            let (counter, offset) = counter(m.field("left")?)?;
            Some(Pick {
                counter,
                factor,
                residue: k - offset,
                true_on_pick: equal,
            })
        };
        match cond.ty() {
            "not_operator" if depth < 8 => {
                let p = self.pick(cond.field("argument")?, depth + 1)?;
                Some(Pick {
                    true_on_pick: !p.true_on_pick,
                    ..p
                })
            }
            "binary_operator" => of(cond, 0, false),
            "identifier" => self
                .pick_names
                .get(&(self.scope(), self.text(cond).to_string()))
                .cloned(),
            "comparison_operator" => {
                let mut cur = cond.walk();
                let kids: Vec<Node> = cond.children(&mut cur).collect();
                let [a, op, b] = kids.as_slice() else {
                    return None;
                };
                let equal = match self.text(*op) {
                    "==" => true,
                    "!=" => false,
                    _ => return None,
                };
                let (m, k) = match self.modulo(*a) {
                    Some(_) => (*a, *b),
                    None => (*b, *a),
                };
                let (factor, _) = self.modulo(m)?;
                // `N - d`: the remainder -d.
                let k = unparen(k);
                let k = match int(k) {
                    Some(v) => v as i64,
                    None if k.ty() == "binary_operator"
                        && k.field("operator").map(|o| self.text(o)) == Some("-")
                        && k.field("left").map(|l| self.text(unparen(l))) == Some(&*factor) =>
                    {
                        -(int(k.field("right")?)? as i64)
                    }
                    None => return None,
                };
                of(m, k, equal)
            }
            _ => None,
        }
    }

    /// `x % N` → N.
    pub(super) fn modulo(&self, node: Node) -> Option<(String, Range<usize>)> {
        let node = unparen(node);
        if node.ty() != "binary_operator" {
            return None;
        }
        let op = node.field("operator")?;
        if self.text(op) != "%" {
            return None;
        }
        let right = unparen(node.field("right")?);
        let text = self.text(right).to_string();
        if parse_number(&text) == Some(1.0) || right.ty() == "string" {
            return None;
        }
        Some((text, right.byte_range()))
    }
}

/// Two positions in different arms of one `if` chain, read by indentation: every line between
/// them at the chain's indent or less is an `elif` or an `else` of it, both positions are
/// deeper, and the arm the first is in opens with `if` or `elif` (not a loop's `else`).
pub(super) fn other_arms(src: &str, a: usize, b: usize) -> bool {
    let (p, q) = (a.min(b), a.max(b));
    let line_start = |at: usize| src[..at].rfind('\n').map_or(0, |i| i + 1);
    let indent = |line: &str| line.len() - line.trim_start().len();
    let (lp, lq) = (line_start(p), line_start(q));
    if lp == lq {
        return false;
    }
    let first = src[lp..].lines().next().unwrap_or("");
    let last = src[lq..].lines().next().unwrap_or("");
    let deeper_than = indent(first).min(indent(last));
    // The lines between that are shallower than both: all one chain's `elif`s and `else`s.
    let mut chain: Option<usize> = None;
    for line in src[lp..lq].lines().skip(1) {
        let t = line.trim_start();
        let k = indent(line);
        if t.is_empty() || t.starts_with('#') || k >= deeper_than {
            continue;
        }
        let arm = t.starts_with("elif ")
            || (t.starts_with("else") && t[4..].trim_start().starts_with(':'));
        if !arm || chain.is_some_and(|c| c != k) {
            return false;
        }
        chain = Some(k);
    }
    let Some(k) = chain else {
        return false;
    };
    // The head of the first position's arm: the nearest line above it at the chain's indent.
    src[..lp]
        .lines()
        .rev()
        .find(|line| {
            let t = line.trim_start();
            !t.is_empty() && !t.starts_with('#') && indent(line) <= k
        })
        .is_some_and(|line| {
            let t = line.trim_start();
            indent(line) == k && (t.starts_with("if ") || t.starts_with("elif "))
        })
}

#[cfg(test)]
mod tests {
    use super::other_arms;

    fn at(src: &str, needle: &str) -> usize {
        src.find(needle).expect(needle)
    }

    #[test]
    fn arms_of_one_test_exclude_each_other() {
        let src = "def f(a):\n    if a.max_steps > 0:\n        t = a.max_steps\n        e = t // k\n    elif a.x:\n        t = 2\n    else:\n        t = len(dl) * e\n    return t\n";
        assert!(other_arms(src, at(src, "e = t"), at(src, "len(dl)")));
        assert!(other_arms(src, at(src, "t = 2"), at(src, "len(dl)")));
        assert!(!other_arms(src, at(src, "e = t"), at(src, "t = a.max")));
        // The test itself and what follows the chain run on every path.
        assert!(!other_arms(src, at(src, "if a.max"), at(src, "len(dl)")));
        assert!(!other_arms(src, at(src, "len(dl)"), at(src, "return t")));
        // A loop's `else` and a later `if` are not arms of the first position's test.
        let src = "for x in y:\n    a = 1\nelse:\n    b = 2\nif c:\n    d = 3\nelse:\n    e = 4\n";
        assert!(!other_arms(src, at(src, "a = 1"), at(src, "b = 2")));
        assert!(!other_arms(src, at(src, "a = 1"), at(src, "e = 4")));
        assert!(other_arms(src, at(src, "d = 3"), at(src, "e = 4")));
    }

    /// The conditions of `src`'s `if`s, read as the value model reads them.
    fn conds(src: &str) -> Vec<crate::frontend::loops::Cond> {
        let tree = crate::frontend::python::parse(src).expect("parses");
        let mut w = super::Walker::new(src);
        w.value_model = true;
        w.loop_model = true;
        w.walk(&tree);
        w.conds
    }

    #[test]
    fn checkpointing_is_on_in_the_arm_its_test_says() {
        let on = |test: &str| {
            let src = format!("if {test}:\n    a = 1\nelse:\n    b = 2\n");
            conds(&src)[0].checkpointing
        };
        assert_eq!(on("args.gradient_checkpointing"), [true, false]);
        assert_eq!(on("not use_checkpointing"), [false, true]);
        assert_eq!(on("(cfg.use_checkpointing and fits)"), [true, false]);
        // Either side of `or` may be what holds; its `else:` holds neither.
        assert_eq!(on("cfg.use_checkpointing or tiny"), [false, false]);
        assert_eq!(on("not cfg.checkpointing or tiny"), [false, true]);
        assert_eq!(on("use_checkpointing == False"), [false, true]);
        assert_eq!(on("cfg.recompute is not None"), [true, false]);
        assert_eq!(on("tiny"), [false, false]);
    }

    #[test]
    fn a_sync_test_is_read_through_negations_and_conjunctions() {
        let sync = |test: &str| conds(&format!("if {test}:\n    a = 1\n"))[0].sync;
        assert_eq!(sync("accelerator.sync_gradients"), Some(true));
        assert_eq!(sync("not accelerator.sync_gradients"), Some(false));
        assert_eq!(sync("clip and accelerator.sync_gradients"), Some(true));
        assert_eq!(sync("accelerator.sync_gradients == False"), Some(false));
        assert_eq!(sync("clip or accelerator.sync_gradients"), None);
    }
}
