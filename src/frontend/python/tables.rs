//! Tables of numbers keyed by a dtype or an optimizer name, in every form they are written in
//! besides a dict literal (`arithmetic.rs`): `dict(bf16=2, ...)`, lists and tuples of pairs,
//! `.get("bf16", 2)` with a literal key, keyword pairs (`estimate(dtype="bf16",
//! bytes_per_param=2)`), and the arms of `if`/`elif` chains and `match` statements that assign or
//! return a number per key. What a table means is the rules' to judge from its rows; the name
//! it is bound to is recorded as one more hint.

use super::*;
use crate::knowledge::knowledge;

/// A key a rule may read: a dtype or an optimizer the knowledge tables know.
fn known_key(key: &str) -> bool {
    let k = knowledge();
    k.dtype(key).is_some() || k.optimizer(key).is_some()
}

/// Keyword names that carry the dtype or the optimizer in a keyword pair.
fn names_choice(keyword: &str) -> bool {
    let k = keyword.to_ascii_lowercase();
    k.contains("dtype")
        || k.contains("precision")
        || k.starts_with("optim")
        || k == "opt"
        || k.ends_with("_optimizer")
        || k.ends_with("_optim")
}

/// Keyword names that carry bytes or a multiplier in a keyword pair.
fn names_amount(keyword: &str) -> bool {
    let k = keyword.to_ascii_lowercase();
    k.contains("byte") || k.contains("multiplier") || k.contains("factor") && k.contains("state")
}

impl<'s> Walker<'s> {
    fn push_table(&mut self, name: Option<String>, entries: Vec<TableEntry>, arms: bool) {
        if entries.is_empty() {
            return;
        }
        self.facts.tables.push(Table {
            name,
            entries,
            arms,
            returned: false,
        });
    }

    /// The name a value is bound to: `X = value`, or `X = dict(value)` / `X = OrderedDict(...)`.
    fn bound_name(&self, node: Node) -> Option<String> {
        let mut at = node;
        for _ in 0..3 {
            let parent = at.parent()?;
            match parent.ty() {
                "assignment" => {
                    return (parent.field("right").map(|r| r.id()) == Some(at.id()))
                        .then(|| parent.field("left"))
                        .flatten()
                        .map(|l| self.text(l).to_string());
                }
                "argument_list" | "call" => at = parent,
                _ => return None,
            }
        }
        None
    }

    /// `dict(bf16=2, fp32=4)`, `X.get("bf16", 2)` and keyword pairs in a call's arguments.
    pub(super) fn call_table(&mut self, node: Node) {
        let (Some(f), Some(args)) = (node.field("function"), node.field("arguments")) else {
            return;
        };
        if args.ty() != "argument_list" {
            return;
        }
        let callee = self.text(f);
        let last = last_segment(callee);
        let mut c = args.walk();
        let kids: Vec<Node> = args.named_children(&mut c).collect();
        if matches!(last, "dict" | "OrderedDict") {
            let entries: Vec<TableEntry> = kids
                .iter()
                .filter(|k| k.ty() == "keyword_argument")
                .filter_map(|k| {
                    let key = self.text(k.field("name")?);
                    let v = k.field("value")?;
                    Some(TableEntry {
                        key: key.to_string(),
                        value: self.number(v)?,
                        value_span: v.byte_range(),
                    })
                })
                .collect();
            if entries.len() >= 2 && entries.iter().any(|e| known_key(&e.key)) {
                let name = self.bound_name(node);
                self.push_table(name, entries, false);
            }
            return;
        }
        // `DTYPE_BYTES.get("bf16", 4)`: the default is what the code uses for that key.
        if last == "get" && f.ty() == "attribute" {
            if let [key, default] = kids.as_slice() {
                if key.ty() == "string" {
                    let k = string_key(self.text(*key));
                    if let (true, Some(value)) = (known_key(&k), self.number(*default)) {
                        // Named by what it is bound to when that says bytes
                        // (`bytes_per_elem = sizes.get("bf16", 4)`), else by the dict.
                        let bound = self
                            .bound_name(node)
                            .filter(|n| n.to_ascii_lowercase().contains("byte"));
                        let base =
                            bound.or_else(|| f.field("object").map(|o| self.text(o).to_string()));
                        let entry = TableEntry {
                            key: k,
                            value,
                            value_span: default.byte_range(),
                        };
                        self.push_table(base, vec![entry], false);
                    }
                }
            }
            return;
        }
        self.keyword_pair(&kids);
    }

    /// `dtype="bf16", bytes_per_param=4` among a call's keywords or a function's defaults: one
    /// entry, named by the keyword that holds the number.
    pub(super) fn keyword_pair<'t>(&mut self, kids: &[Node<'t>]) {
        let pair = |n: &Node<'t>| -> Option<(&'s str, Node<'t>)> {
            match n.ty() {
                "keyword_argument" => Some((self.text(n.field("name")?), n.field("value")?)),
                "default_parameter" | "typed_default_parameter" => {
                    Some((self.text(n.field("name")?), n.field("value")?))
                }
                _ => None,
            }
        };
        let pairs: Vec<(&str, Node)> = kids.iter().filter_map(pair).collect();
        if pairs.len() < 2 {
            return;
        }
        let choices: Vec<(&str, String)> = pairs
            .iter()
            .filter_map(|(k, v)| {
                (names_choice(k) && v.ty() == "string")
                    .then(|| string_key(self.text(*v)))
                    .filter(|s| known_key(s))
                    .map(|s| (*k, s))
            })
            .collect();
        let amounts: Vec<&(&str, Node)> = pairs.iter().filter(|(k, _)| names_amount(k)).collect();
        let [(_, first), ..] = choices.as_slice() else {
            return;
        };
        for (k, v) in amounts.iter().copied() {
            // One dtype and one amount go together; among several, an amount goes with the
            // dtype of its own qualifier (`ckpt_bytes` with `ckpt_dtype`, not `act_bytes`).
            // A lone amount about what is kept in another dtype (`bytes_per_logit = 4` beside
            // `dtype="bf16"`: logits are upcast; master weights and states stay fp32) is no
            // row of the dtype.
            let elsewhere = || {
                qualifier(k).iter().any(|w| {
                    matches!(
                        w.as_str(),
                        "logit"
                            | "logits"
                            | "loss"
                            | "act"
                            | "acts"
                            | "activation"
                            | "activations"
                            | "master"
                            | "optim"
                            | "optimizer"
                            | "state"
                            | "states"
                            | "grad"
                            | "grads"
                            | "accum"
                    )
                })
            };
            let key = if choices.len() == 1 && amounts.len() == 1 {
                if elsewhere() && qualifier(k) != qualifier(choices[0].0) {
                    continue;
                }
                first.clone()
            } else {
                match choices.iter().find(|(c, _)| qualifier(c) == qualifier(k)) {
                    Some((_, key)) => key.clone(),
                    None => continue,
                }
            };
            if let Some(value) = self.number(*v) {
                let entry = TableEntry {
                    key: key.clone(),
                    value,
                    value_span: v.byte_range(),
                };
                self.push_table(Some(k.to_string()), vec![entry], false);
            }
        }
    }

    /// `[("bf16", 2), ("fp32", 4)]` (also as tuples, and inside `dict(...)`).
    pub(super) fn pair_table(&mut self, node: Node) {
        let mut c = node.walk();
        let mut entries = Vec::new();
        for item in node.named_children(&mut c) {
            if item.ty() == "comment" {
                continue;
            }
            if item.ty() != "tuple" {
                return;
            }
            let mut ic = item.walk();
            let parts: Vec<Node> = item.named_children(&mut ic).collect();
            let [k, v] = parts.as_slice() else { return };
            let key = match k.ty() {
                "string" => string_key(self.text(*k)),
                "attribute" => self.text(*k).to_string(),
                _ => return,
            };
            let Some(value) = self.number(*v) else { return };
            entries.push(TableEntry {
                key,
                value,
                value_span: v.byte_range(),
            });
        }
        if entries.len() >= 2 && entries.iter().any(|e| known_key(&e.key)) {
            let name = self.bound_name(node);
            self.push_table(name, entries, false);
        }
    }

    /// The keys a test picks, and whether it picks them when false (`dtype != "fp32"`).
    pub(super) fn test_keys(&self, cond: Node) -> (Vec<String>, bool) {
        let cond = unparen(cond);
        match cond.ty() {
            "not_operator" => match cond.field("argument") {
                Some(a) => {
                    let (keys, negated) = self.test_keys(a);
                    (keys, !negated)
                }
                None => (Vec::new(), false),
            },
            "boolean_operator" if cond.field("operator").map(|o| self.text(o)) == Some("or") => {
                let mut keys = Vec::new();
                for side in ["left", "right"] {
                    match cond.field(side).map(|n| self.test_keys(n)) {
                        Some((k, false)) => keys.extend(k),
                        _ => return (Vec::new(), false),
                    }
                }
                (keys, false)
            }
            "comparison_operator" => {
                let mut c = cond.walk();
                let kids: Vec<Node> = cond.children(&mut c).collect();
                let op = kids
                    .iter()
                    .filter(|k| !k.is_named())
                    .map(|k| self.text(*k))
                    .collect::<Vec<_>>()
                    .join(" ");
                let (negated, op_ok) = match op.as_str() {
                    "==" | "in" | "is" => (false, true),
                    "!=" | "not in" | "is not" => (true, true),
                    _ => (false, false),
                };
                let named: Vec<Node> = kids.iter().filter(|k| k.is_named()).copied().collect();
                let [a, b] = named.as_slice() else {
                    return (Vec::new(), false);
                };
                if !op_ok {
                    return (Vec::new(), false);
                }
                let mut keys = self.keys_in(*b);
                if keys.is_empty() {
                    keys = self.keys_in(*a);
                }
                (keys, negated)
            }
            // `dtype.startswith("bf16")`, `name.lower().endswith("adamw")`
            "call" => {
                let callee = cond.field("function").map(|f| self.text(f)).unwrap_or("");
                if !matches!(last_segment(callee), "startswith" | "endswith") {
                    return (Vec::new(), false);
                }
                let keys = cond
                    .field("arguments")
                    .and_then(|a| a.named_child(0))
                    .map(|a| self.keys_in(a))
                    .unwrap_or_default();
                (keys, false)
            }
            _ => (Vec::new(), false),
        }
    }

    /// The keys written in one operand: a string, a known attribute (`torch.bfloat16`), or a
    /// tuple, list or set of them.
    fn keys_in(&self, n: Node) -> Vec<String> {
        let n = unparen(n);
        let one = |k: Node| -> Option<String> {
            match k.ty() {
                "string" => Some(string_key(self.text(k))),
                "attribute" => {
                    let t = self.text(k);
                    known_key(t).then(|| t.to_string())
                }
                _ => None,
            }
        };
        match n.ty() {
            "tuple" | "list" | "set" => {
                let mut c = n.walk();
                n.named_children(&mut c).filter_map(one).collect()
            }
            _ => one(n).into_iter().collect(),
        }
    }

    /// An `if`/`elif`/`else` chain: each arm's keys, and the numbers its block assigns to names
    /// or returns.
    pub(super) fn chain_table(&mut self, node: Node) {
        let Some(cond) = node.field("condition") else {
            return;
        };
        let mut arms: Vec<(Vec<String>, Node)> = Vec::new();
        let (keys, negated) = self.test_keys(cond);
        let body = node.field("consequence");
        let mut c = node.walk();
        let alternatives: Vec<Node> = node.children_by_field_name("alternative", &mut c).collect();
        if negated {
            // `if dtype != "fp32": ... else: ...`: the `else` is the key's arm.
            if let [alt] = alternatives.as_slice() {
                if alt.ty() == "else_clause" {
                    if let Some(b) = alt.field("body") {
                        arms.push((keys, b));
                    }
                }
            }
        } else if let Some(b) = body {
            arms.push((keys, b));
        }
        if !negated {
            for alt in &alternatives {
                if alt.ty() != "elif_clause" {
                    continue;
                }
                let (Some(cond), Some(b)) = (alt.field("condition"), alt.field("consequence"))
                else {
                    continue;
                };
                let (keys, negated) = self.test_keys(cond);
                if !negated {
                    arms.push((keys, b));
                }
            }
        }
        for (keys, block) in &arms {
            self.arm_entries(keys, *block);
        }
        let subject = tested_operand(cond).map(|n| self.text(n).to_string());
        self.copied_arms(node, subject, &arms);
    }

    /// `match dtype: case "bf16" | "fp16": return 2`.
    pub(super) fn match_table(&mut self, node: Node) {
        let Some(body) = node.field("body") else {
            return;
        };
        let mut c = body.walk();
        let clauses: Vec<Node> = body
            .named_children(&mut c)
            .filter(|n| n.ty() == "case_clause")
            .collect();
        let mut arms = Vec::new();
        for clause in clauses {
            let mut keys = Vec::new();
            let mut cc = clause.walk();
            for pattern in clause.named_children(&mut cc) {
                if pattern.ty() == "case_pattern" {
                    collect_strings(pattern, self.src, &mut keys, 0);
                }
            }
            if let Some(block) = clause.field("consequence") {
                self.arm_entries(&keys, block);
                arms.push((keys, block));
            }
        }
        let subject = node.field("subject").map(|n| self.text(n).to_string());
        self.copied_arms(node, subject, &arms);
    }

    /// Arms that choose an optimizer's states (`opt_mem = params * 4 * 2` under `optimizer ==
    /// "adam"`, `params * 4` under `"sgd"`, `0` otherwise), and the values of the enclosing
    /// function that repeat one arm's as a term of a sum (or a part of a dict or a call's
    /// keywords) outside the arms, where the sum does not read the name the arms assign and no
    /// test picks that arm's optimizer.
    fn copied_arms(&mut self, chain: Node, subject: Option<String>, arms: &[(Vec<String>, Node)]) {
        let k = knowledge();
        let scope = self.scope();
        if arms
            .iter()
            .flat_map(|(keys, _)| keys)
            .any(|key| k.optimizer(key).is_some())
            && !self.facts.optimizer_tests.contains(&scope)
        {
            self.facts.optimizer_tests.push(scope);
        }
        // Every assignment of the chain's blocks, keyed arms or not: (keys, target, value).
        let mut assigned: Vec<(Vec<String>, String, String, Node)> = Vec::new();
        let mut blocks: Vec<(Vec<String>, Node)> = arms.to_vec();
        let mut c = chain.walk();
        for alt in chain.children_by_field_name("alternative", &mut c) {
            if let Some(b) = alt.field("body").or_else(|| alt.field("consequence")) {
                if !blocks.iter().any(|(_, x)| x.id() == b.id()) {
                    blocks.push((Vec::new(), b));
                }
            }
        }
        for (keys, block) in &blocks {
            let keys: Vec<String> = keys
                .iter()
                .filter(|k2| k.optimizer(k2).is_some())
                .cloned()
                .collect();
            let mut c = block.walk();
            for s in block.named_children(&mut c) {
                let Some(a) = s.named_child(0).filter(|a| a.ty() == "assignment") else {
                    continue;
                };
                let (Some(l), Some(r)) = (a.field("left"), a.field("right")) else {
                    continue;
                };
                let value = self
                    .product_key(r)
                    .unwrap_or_else(|| self.text(r).split_whitespace().collect());
                assigned.push((keys.clone(), self.text(l).to_string(), value, unparen(r)));
            }
        }
        // An optimizer's arm whose value no other arm of the same name takes.
        let chosen: Vec<_> = assigned
            .iter()
            .filter(|(keys, target, value, written)| {
                !keys.is_empty()
                    && (value.contains('*') || self.number(*written).is_some())
                    && assigned
                        .iter()
                        .any(|(_, t2, v2, _)| t2 == target && v2 != value)
                    && !assigned
                        .iter()
                        .any(|(k2, t2, v2, _)| t2 == target && v2 == value && k2 != keys)
            })
            .collect();
        if chosen.is_empty() {
            return;
        }
        let mut function = chain;
        while let Some(p) = function.parent() {
            function = p;
            if function.ty() == "function_definition" {
                break;
            }
        }
        let mut stack = vec![function];
        let mut found = Vec::new();
        while let Some(n) = stack.pop() {
            if n.start_byte() >= chain.start_byte() && n.end_byte() <= chain.end_byte() {
                continue;
            }
            // Nested functions are judged with their own chains.
            if n.ty() == "function_definition" && n.id() != function.id() {
                continue;
            }
            if matches!(n.ty(), "binary_operator" | "integer" | "float") {
                let key = match n.ty() {
                    "binary_operator" => self.product_key(n),
                    _ => Some(self.text(n).to_string()),
                };
                let same: Vec<_> = chosen
                    .iter()
                    .filter(|c| Some(&c.2) == key.as_ref())
                    .collect();
                if let [(keys, target, _, arm)] = same.as_slice() {
                    let literal = n.ty() != "binary_operator";
                    if self.a_part(n, target, literal) && !self.picked_by(n, function, keys) {
                        found.push(CopiedArm {
                            span: n.byte_range(),
                            keys: keys.clone(),
                            arm: arm.byte_range(),
                            target: target.clone(),
                            subject: subject.clone().unwrap_or_default(),
                        });
                        continue;
                    }
                }
            }
            let mut c = n.walk();
            stack.extend(n.named_children(&mut c));
        }
        found.sort_by_key(|f| f.span.start);
        self.facts.copied_arms.extend(found);
    }

    /// A product of names and numbers, its factors sorted (`params * 4 * 2` and `2 * 4 *
    /// params` are one value); `None` for anything else or a product of numbers alone.
    fn product_key(&self, n: Node) -> Option<String> {
        let mut factors = Vec::new();
        let mut stack = vec![unparen(n)];
        while let Some(n) = stack.pop() {
            match n.ty() {
                "binary_operator" if n.field("operator").map(|o| self.text(o)) == Some("*") => {
                    stack.extend(n.field("left").map(unparen));
                    stack.extend(n.field("right").map(unparen));
                }
                "identifier" | "attribute" => factors.push(self.text(n).to_string()),
                "integer" | "float" => {
                    let v = crate::config::parse_number(self.text(n))?;
                    factors.push(format!("{v}"));
                }
                _ => return None,
            }
        }
        let named = factors
            .iter()
            .any(|f| f.starts_with(|c: char| !c.is_ascii_digit()));
        (factors.len() >= 2 && named).then(|| {
            factors.sort();
            factors.join("*")
        })
    }

    /// A whole value (not a factor of a product) that is one part of a total that does not
    /// read `target`: a term of a sum (possibly converted to a unit first: `(w + n * 8) /
    /// 1e9`), or a value of a dict or of a call's keywords beside other parts. A bare number
    /// counts only in a sum of three terms or more (`W + G + 8`).
    fn a_part(&self, n: Node, target: &str, literal: bool) -> bool {
        let op = |p: Node| p.field("operator").map(|o| self.text(o));
        let Some(mut parent) = n.parent() else {
            return false;
        };
        if parent.ty() == "binary_operator" && !matches!(op(parent), Some("+" | "-")) && literal {
            return false;
        }
        if parent.ty() == "binary_operator" && op(parent) == Some("*") {
            return false;
        }
        let reads = |whole: Node| {
            let mut c = whole.walk();
            let mut stack = vec![whole];
            while let Some(x) = stack.pop() {
                if matches!(x.ty(), "identifier" | "attribute") && self.text(x) == target {
                    return true;
                }
                stack.extend(x.named_children(&mut c));
            }
            false
        };
        let mut at = n;
        loop {
            match parent.ty() {
                "parenthesized_expression" => {}
                "binary_operator"
                    if !literal
                        && matches!(op(parent), Some("/" | "//"))
                        && parent.field("left").map(|l| l.id()) == Some(at.id()) => {}
                "binary_operator" if matches!(op(parent), Some("+" | "-")) => {
                    // The whole sum, and how many terms it adds.
                    let sum = |p: &Node| {
                        p.ty() == "parenthesized_expression"
                            || (p.ty() == "binary_operator" && matches!(op(*p), Some("+" | "-")))
                    };
                    let mut top = parent;
                    while let Some(p) = top.parent().filter(sum) {
                        top = p;
                    }
                    let (mut terms, mut stack) = (0, vec![top]);
                    while let Some(x) = stack.pop() {
                        match x.ty() {
                            "parenthesized_expression" => stack.extend(x.named_child(0)),
                            "binary_operator" if sum(&x) => {
                                stack.extend(x.field("left"));
                                stack.extend(x.field("right"));
                            }
                            _ => terms += 1,
                        }
                    }
                    // A bare number is read only in a total that is returned or assigned.
                    let total = top
                        .parent()
                        .is_some_and(|p| matches!(p.ty(), "return_statement" | "assignment"));
                    return (!literal || (terms >= 3 && total)) && !reads(top);
                }
                "pair" | "keyword_argument" if !literal => {
                    let Some(container) = parent.parent() else {
                        return false;
                    };
                    let mut c = container.walk();
                    let parts = container
                        .named_children(&mut c)
                        .filter(|x| x.ty() == parent.ty())
                        .count();
                    return parts >= 3 && !reads(container);
                }
                _ => return false,
            }
            at = parent;
            match parent.parent() {
                Some(p) => parent = p,
                None => return false,
            }
        }
    }

    /// Whether `n` is written under a test that picks one of `keys` (`if opt == "adam":`, an
    /// `elif`, a `case "adam":`, `x if opt == "adam" else y`), below `function`.
    fn picked_by(&self, n: Node, function: Node, keys: &[String]) -> bool {
        let picks = |cond: Option<Node>| {
            cond.is_some_and(|c| {
                let (picked, negated) = self.test_keys(c);
                !negated && picked.iter().any(|p| keys.contains(p))
            })
        };
        let mut at = n;
        while let Some(p) = at.parent() {
            if p.id() == function.id() {
                break;
            }
            let inside = |field: &str| p.field(field).map(|b| b.id()) == Some(at.id());
            let picked = match p.ty() {
                "if_statement" | "elif_clause" => {
                    inside("consequence") && picks(p.field("condition"))
                }
                "conditional_expression" => {
                    p.named_child(0).map(|b| b.id()) == Some(at.id()) && picks(p.named_child(1))
                }
                "case_clause" => {
                    let mut strings = Vec::new();
                    let mut c = p.walk();
                    for pattern in p.named_children(&mut c) {
                        if pattern.ty() == "case_pattern" {
                            collect_strings(pattern, self.src, &mut strings, 0);
                        }
                    }
                    strings.iter().any(|s| keys.contains(s))
                }
                _ => false,
            };
            if picked {
                return true;
            }
            at = p;
        }
        false
    }

    /// The numbers one arm's block assigns to simple names or returns, under each key.
    fn arm_entries(&mut self, keys: &[String], block: Node) {
        let keys: Vec<&String> = keys.iter().filter(|k| known_key(k)).collect();
        if keys.is_empty() {
            return;
        }
        let mut c = block.walk();
        let statements: Vec<Node> = block.named_children(&mut c).collect();
        for s in statements {
            let (target, value, returned) = match s.ty() {
                "expression_statement" => {
                    let Some(a) = s.named_child(0).filter(|a| a.ty() == "assignment") else {
                        continue;
                    };
                    let (Some(l), Some(r)) = (a.field("left"), a.field("right")) else {
                        continue;
                    };
                    if !matches!(l.ty(), "identifier" | "attribute") {
                        continue;
                    }
                    (self.text(l).to_string(), r, false)
                }
                "return_statement" => {
                    let Some(v) = s.named_child(0) else { continue };
                    let function = self
                        .scopes
                        .get(self.scope())
                        .map(|s| s.name.clone())
                        .unwrap_or_default();
                    if function.is_empty() {
                        continue;
                    }
                    (function, v, true)
                }
                _ => continue,
            };
            let Some(number) = self.number(value) else {
                continue;
            };
            let found: Vec<(String, f64, Range<usize>)> = keys
                .iter()
                .map(|k| ((*k).clone(), number, value.byte_range()))
                .collect();
            self.arm_table(&target, returned, found);
        }
    }
}

/// The operand a comparison tests against its keys (`optimizer` in `optimizer == "adam"`).
fn tested_operand(cond: Node) -> Option<Node> {
    let cond = unparen(cond);
    match cond.ty() {
        "comparison_operator" => {
            let mut c = cond.walk();
            let named: Vec<Node> = cond.named_children(&mut c).collect();
            named
                .into_iter()
                .find(|n| !matches!(n.ty(), "string" | "tuple" | "list" | "set"))
        }
        "boolean_operator" | "not_operator" => cond
            .field("left")
            .or_else(|| cond.field("argument"))
            .and_then(tested_operand),
        "call" => cond
            .field("function")
            .and_then(|f| f.field("object"))
            .map(unparen),
        _ => None,
    }
}

/// Strings in a `case` pattern (`"bf16" | "fp16"`), not descending into guards.
fn collect_strings(n: Node, src: &str, out: &mut Vec<String>, depth: usize) {
    if depth > 8 {
        return;
    }
    if n.ty() == "string" {
        out.push(string_key(src.get(n.byte_range()).unwrap_or("")));
        return;
    }
    let mut c = n.walk();
    for k in n.named_children(&mut c) {
        collect_strings(k, src, out, depth + 1);
    }
}

/// What a dtype or byte-count name is about, without the words that say it is one
/// (`ckpt_dtype` and `ckpt_bytes` are both about `ckpt`).
fn qualifier(name: &str) -> Vec<String> {
    const WORDS: &[&str] = &[
        "dtype",
        "type",
        "precision",
        "bytes",
        "byte",
        "nbytes",
        "num",
        "n",
        "size",
        "per",
        "elem",
        "element",
        "width",
    ];
    name.to_ascii_lowercase()
        .split('_')
        .filter(|s| !s.is_empty() && !WORDS.contains(s))
        .map(str::to_string)
        .collect()
}
