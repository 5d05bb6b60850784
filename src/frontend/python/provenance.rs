//! Loss provenance: how the value that reaches a `backward()` was produced, under the policy
//! written on [`Prov`]: a loss is a per-micro-batch mean unless the code shows otherwise.
//!
//! While the file is read, a value may depend on a function of the same file ([`Prov::Local`],
//! defined anywhere in the file) or on a parameter of the function being read
//! ([`Prov::Param`]); once the whole file is read, [`Walker::resolve`] replaces both. Helpers
//! imported from other modules stay [`Prov::Imported`]: the pipeline judges them with the
//! project's files.

use super::{last_segment, names_accumulation, unparen, Walker};
use crate::facts::{Callee, Prov, Scaling};
use crate::frontend::fields::{PyField, PyKind};
use tree_sitter::Node;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// How deep an expression is followed, and how many helpers deep a value is followed.
const MAX_DEPTH: usize = 8;

/// Arguments of a call as the callee sees them: keyword or positional, with their provenance.
pub type Args = Vec<(Option<String>, Prov)>;

/// Calls that hand a value through unchanged (`loss.float()`, `torch.stack(losses)`).
const TRANSPARENT: &[&str] = &[
    "float",
    "double",
    "squeeze",
    "to",
    "clone",
    "contiguous",
    "view",
    "reshape",
    "flatten",
    "cuda",
    "stack",
    "cat",
    "tensor",
    "as_tensor",
    // A dict of losses (`sum(losses.values())`): what it holds.
    "values",
];

/// How many terms a sum adds (`a + b + c` → 3; anything else → 1).
fn terms(node: Node) -> usize {
    let node = unparen(node);
    match (node.ty(), node.field("operator").map(|o| o.kind())) {
        ("binary_operator", Some("+")) => {
            node.field("left").map_or(1, terms) + node.field("right").map_or(1, terms)
        }
        _ => 1,
    }
}

impl<'s> Walker<'s> {
    /// The provenance of an expression, with the names it reads followed to their assignments.
    pub(super) fn prov(&self, node: Node, depth: usize) -> Prov {
        let node = unparen(node);
        if depth > MAX_DEPTH {
            return Prov::UNKNOWN;
        }
        match node.ty() {
            "binary_operator" => {
                let op = node.field("operator").map(|o| self.text(o)).unwrap_or("");
                let (Some(left), Some(right)) = (node.field("left"), node.field("right")) else {
                    return Prov::UNKNOWN;
                };
                match op {
                    // A fractional constant is a weight (`(a + 0.1 * b) / 1.1`): no number of
                    // micro-steps is fractional.
                    "/" if matches!(super::parse_number(self.text(unparen(right))), Some(v) if v.fract() != 0.0) => {
                        self.prov(left, depth + 1)
                    }
                    // The mean of its parts (`(start + end) / 2`): a weight, not a window.
                    "/" if super::parse_number(self.text(unparen(right)))
                        .is_some_and(|v| v == terms(left) as f64) =>
                    {
                        self.prov(left, depth + 1)
                    }
                    // Divided by a count of this micro-step's own data: a mean over it, as a
                    // mean-reduced loss is; the window's division is still to come.
                    "/" if self.counts_data_here(right) => Prov::UNSCALED,
                    "/" | "//" => Prov::DividedBy(self.text(unparen(right)).to_string()),
                    // A per-micro-batch mean times the data-parallel size (undoing DDP's
                    // average over ranks) is still a per-micro-batch mean.
                    "*" if is_world_size(self.text(right))
                        && self.prov(left, depth + 1) == Prov::UNSCALED =>
                    {
                        Prov::UNSCALED
                    }
                    // `loss * num_tokens`: normalised by a count (the division comes elsewhere).
                    "*" if super::is_count_like(self.text(right))
                        || super::is_count_like(self.text(left)) =>
                    {
                        Prov::SCALED
                    }
                    _ => Prov::combined([self.prov(left, depth + 1), self.prov(right, depth + 1)]),
                }
            }
            "unary_operator" => node
                .field("argument")
                .map_or(Prov::UNKNOWN, |a| self.prov(a, depth + 1)),
            "conditional_expression" | "tuple" | "list" | "expression_list" => {
                let mut c = node.walk();
                let parts: Vec<Prov> = node
                    .named_children(&mut c)
                    .filter(|n| n.ty() != "comment")
                    .take(8)
                    .map(|n| self.prov(n, depth + 1))
                    .collect();
                Prov::combined(parts)
            }
            "generator_expression" | "list_comprehension" => {
                let body = node
                    .field("body")
                    .map_or(Prov::ASSUMED, |b| self.prov(b, depth + 1));
                // `[l.mean() for l in losses.values()]`: what the loop variable runs over.
                let mut c = node.walk();
                let over = node
                    .named_children(&mut c)
                    .find(|n| n.ty() == "for_in_clause")
                    .and_then(|f| f.field("right"));
                match over.map(|o| self.prov(o, depth + 1)) {
                    Some(p) if (p.divided() || matches!(p, Prov::Param(_))) && !body.divided() => p,
                    _ => body,
                }
            }
            "identifier" | "attribute" => {
                let text = self.text(node);
                if node.ty() == "attribute" && last_segment(text) == "loss" && text != "self.loss" {
                    // `outputs.loss`: a model output's mean loss, unless the model was handed a
                    // count to divide by.
                    let of = node
                        .field("object")
                        .map_or(Prov::ASSUMED, |o| self.prov(o, depth + 1));
                    return match of {
                        Prov::Known(Scaling::Unknown) => Prov::UNKNOWN,
                        _ => Prov::UNSCALED,
                    };
                }
                // `out.losses` of a parameter `out`: what the caller handed in.
                let root = root_name(text);
                let of_root = || {
                    (node.ty() == "attribute" && root != "self")
                        .then(|| {
                            self.loss_def(root, node.start_byte())
                                .filter(Prov::divided)
                                .or_else(|| self.param(root))
                        })
                        .flatten()
                };
                self.loss_def(text, node.start_byte())
                    .or_else(|| self.param(text))
                    .or_else(of_root)
                    .unwrap_or(Prov::ASSUMED)
            }
            // `outputs[0]`, `outputs[:2]`, `out["loss"]`: part of what produced the value.
            "subscript" => {
                let key = node.field("subscript").map(|k| self.text(k)).unwrap_or("");
                match node.field("value") {
                    Some(v) => match self.prov(v, depth + 1) {
                        Prov::Known(Scaling::AssumedMean)
                            if super::string_key(key) == "loss" && key != "loss" =>
                        {
                            Prov::UNSCALED
                        }
                        p => p,
                    },
                    None => Prov::ASSUMED,
                }
            }
            "call" => self.call_prov(node, depth),
            _ => Prov::ASSUMED,
        }
    }

    /// The divisor reads a count of the data taken in the same loop iteration (or, outside any
    /// loop, in the same function call): `loss.sum() / (n_valid + 1e-8)` with
    /// `n_valid = mask.sum()` counted just before.
    fn counts_data_here(&self, divisor: Node) -> bool {
        if self.local_counts.is_empty() {
            return false;
        }
        let scope = self.scope();
        let here = self.ctx(divisor.start_byte()).loops.last().copied();
        self.text(divisor)
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .filter(|w| w.chars().next().is_some_and(|c| !c.is_ascii_digit()))
            .any(|w| self.local_counts.get(&(scope, w.to_string())) == Some(&here))
    }

    fn call_prov(&self, node: Node, depth: usize) -> Prov {
        let Some(func) = node.field("function") else {
            return Prov::UNKNOWN;
        };
        let f = self.text(func);
        let last = last_segment(f);
        let lower = last.to_ascii_lowercase();
        let object = (func.ty() == "attribute")
            .then(|| func.field("object"))
            .flatten();
        let args = node.field("arguments");
        // Read on every call the walk values: found in place, nothing collected.
        let first_arg = super::positional(args, 0);
        let second_arg = super::positional(args, 1);
        // Reductions and conversions: what they are applied to.
        let inner = |of: Option<Node>| of.map_or(Prov::ASSUMED, |n| self.prov(n, depth + 1));
        match (last, object) {
            ("mean", Some(o)) => return Prov::Averaged(Box::new(inner(Some(o)))),
            ("sum", Some(o)) if f != "torch.sum" => return Prov::Summed(Box::new(inner(Some(o)))),
            ("mean", None) => return Prov::Averaged(Box::new(inner(first_arg))),
            // The builtin adds up a list of losses: what they are, added.
            ("sum", None) => return inner(first_arg),
            _ => {}
        }
        // `loss.div(n)`, or `torch.div(loss, n)` without a rounding mode: a division written
        // as a call.
        let division = self.divide_method(node).or_else(|| {
            let function_form = matches!(f, "torch.div" | "torch.divide" | "torch.true_divide");
            let kept = |a: Node| {
                let mut c = a.walk();
                let keywords = a
                    .named_children(&mut c)
                    .any(|k| k.ty() == "keyword_argument");
                !keywords
            };
            (function_form && args.is_some_and(kept))
                .then(|| Some((first_arg?, second_arg?)))
                .flatten()
        });
        if let Some((object, divisor)) = division {
            let divisor = unparen(divisor);
            let text = self.text(divisor);
            // As for `/`: a count of this micro-step's data makes a mean, a fraction a weight.
            if self.counts_data_here(divisor) {
                return Prov::UNSCALED;
            }
            if super::parse_number(text).is_some_and(|v| v.fract() != 0.0) {
                return self.prov(object, depth + 1);
            }
            return Prov::DividedBy(text.to_string());
        }
        // `loss.mul(1 / n)`, `torch.mul(loss, 1 / n)`: a product, read as `*` is.
        if matches!(last, "mul" | "multiply") {
            let factors = match object {
                Some(o) if !f.starts_with("torch.") => [Some(o), first_arg],
                _ => [first_arg, second_arg],
            };
            if let [Some(a), Some(b)] = factors {
                return Prov::combined([inner(Some(a)), inner(Some(b))]);
            }
        }
        if f == "torch.mean" {
            return Prov::Averaged(Box::new(inner(first_arg)));
        }
        if f == "torch.sum" {
            return Prov::Summed(Box::new(inner(first_arg)));
        }
        if TRANSPARENT.contains(&last) {
            return match object {
                Some(o) if !f.starts_with("torch.") => inner(Some(o)),
                _ => inner(first_arg),
            };
        }
        // A criterion built to sum (or to keep per-element losses) returns what it was built for.
        match self
            .instance(f)
            .and_then(|(_, r)| r)
            .map(super::string_key)
            .as_deref()
        {
            Some("sum") => return Prov::UNKNOWN,
            Some("none") => return Prov::PerElement,
            _ => {}
        }
        // A producer handed the accumulation factor or an item count may divide by it.
        // The arguments matter to a function of this file (its parameters stand for them).
        let callee = self.callee(func);
        let mut given: Args = Vec::new();
        // A function of this file is read with what it is handed; any other producer handed a
        // count may divide by it, unseen.
        let mut handed_count = false;
        if let Some(a) = args {
            let mut c = a.walk();
            for arg in a.named_children(&mut c) {
                // A count is handed as a name, a count's call (`mask.numel()`) or a short
                // keyword (`num_items_in_batch=n`); one read inside another argument
                // (`logits.view(-1, ntokens)`) is not handed.
                let t = self.text(arg);
                if t.len() <= 80 && self.hands_count(arg) {
                    // Only a function the file has defined by now is read.
                    let defined = callee.as_ref().is_some_and(|c| {
                        !c.instance && self.def_texts.contains_key(c.name.as_str())
                    });
                    if !defined {
                        return Prov::UNKNOWN;
                    }
                    handed_count = true;
                }
                match arg.ty() {
                    "keyword_argument" => {
                        let k = arg.field("name").map(|n| self.text(n));
                        let v = arg.field("value");
                        if k == Some("reduction") {
                            match v.map(|v| super::string_key(self.text(v))).as_deref() {
                                // A sum adds up across micro-batches as a full batch would.
                                Some("sum") => return Prov::UNKNOWN,
                                Some("none") => return Prov::PerElement,
                                _ => {}
                            }
                        }
                        if let (Some(k), Some(v), Some(_)) = (k, v, &callee) {
                            given.push((Some(k.to_string()), self.prov(v, depth + 1)));
                        }
                    }
                    "comment" => {}
                    _ if callee.is_none() => {}
                    "list_splat" | "dictionary_splat" => given.push((None, Prov::ASSUMED)),
                    _ => given.push((None, self.prov(arg, depth + 1))),
                }
            }
        }
        // A loss over data gathered across the window's micro-steps (each micro-batch run
        // again at the boundary against the cached rest of the window) covers the whole window:
        // the backwards add up to the full batch's gradient, as its parts.
        if args.is_some_and(|a| self.reads_gathered(a)) {
            return Prov::SCALED;
        }
        let known_loss = lower.contains("criterion")
            || lower.contains("loss_fn")
            || lower.contains("loss_func")
            || lower.ends_with("loss")
            || lower.contains("cross_entropy")
            || f.starts_with("F.")
            || f.starts_with("nn.functional.")
            || f.starts_with("torch.nn.functional.");
        // What the call returns when the file defines no such function: a torch loss or a
        // criterion is a mean; a helper imported from the project is judged with its module; a
        // model or anything else returns a mean by the policy.
        let otherwise = match self.imported(f) {
            _ if handed_count => Prov::UNKNOWN,
            // torch's own losses are means; a helper of the project is judged with its module.
            Some((module, _)) if known_loss && module.starts_with("torch") => Prov::UNSCALED,
            Some((module, name)) => Prov::Imported { module, name },
            None if known_loss => Prov::UNSCALED,
            None => Prov::ASSUMED,
        };
        match callee {
            Some(callee) => Prov::Local {
                callee,
                args: given,
                otherwise: Box::new(otherwise),
                pick: None,
            },
            None => otherwise,
        }
    }

    /// Whether the arguments read data the window gathers ([`Walker::window_lists`]), followed
    /// through up to four assignments within the outermost loop around them (at most 64 texts
    /// a level: a name assigned on many lines is followed no further).
    fn reads_gathered(&self, args: Node) -> bool {
        if self.window_lists.is_empty() {
            return false;
        }
        let Some(within) = self
            .ctx(args.start_byte())
            .loops
            .first()
            .and_then(|&l| self.loops.get(l))
            .map(|l| l.span.clone())
        else {
            return false;
        };
        // Indexed once per loop: every call in a loop asks about the same lines.
        let mut cached = self.loop_assignments.borrow_mut();
        if cached
            .as_ref()
            .is_none_or(|(start, _)| *start != within.start)
        {
            *cached = Some((within.start, assignments(&self.src[within])));
        }
        let Some((_, assigned)) = cached.as_ref() else {
            return false;
        };
        let mut texts = vec![self.text(args)];
        for _ in 0..4 {
            let mut next: Vec<&str> = Vec::new();
            for text in &texts {
                for word in text
                    .split(|c: char| !is_word(c))
                    .filter(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
                {
                    if self.window_lists.iter().any(|n| n == word) {
                        return true;
                    }
                    next.extend(assigned.get(word).into_iter().flatten());
                }
            }
            if next.is_empty() {
                return false;
            }
            next.truncate(64);
            texts = next;
        }
        false
    }

    /// The function of this file a call may name: `f(...)`, `self.f(...)`, or an instance
    /// `crit(...)` of a class built in the same scope (`crit = MyLoss()`).
    pub(super) fn callee(&self, func: Node) -> Option<Callee> {
        match func.ty() {
            "identifier" => {
                let name = self.text(func);
                if let Some(class) = self.instance_of(name) {
                    return Some(Callee {
                        name: class,
                        class: None,
                        instance: true,
                    });
                }
                Some(Callee {
                    name: name.to_string(),
                    class: None,
                    instance: false,
                })
            }
            "attribute" => {
                let object = func.field("object")?;
                let attr = func.field("attribute")?;
                if self.text(object) != "self" {
                    // `self.crit(x)` where `self.crit = MyLoss()`.
                    let name = self.text(func);
                    if let Some(class) = self.instance_of(name) {
                        return Some(Callee {
                            name: class,
                            class: None,
                            instance: true,
                        });
                    }
                    // `cb.on_batch_end(i)` where `cb = Callbacks(...)`, a class of this file:
                    // its method.
                    let class = self.instance_of(self.text(object))?;
                    let scope = self
                        .scopes
                        .iter()
                        .position(|s| s.is_class && s.name == class)?;
                    return Some(Callee {
                        name: self.text(attr).to_string(),
                        class: Some(scope),
                        instance: false,
                    });
                }
                if let Some(class) = self.instance_of(self.text(func)) {
                    return Some(Callee {
                        name: class,
                        class: None,
                        instance: true,
                    });
                }
                let class = self.scopes.get(self.scope()).and_then(|s| s.class)?;
                Some(Callee {
                    name: self.text(attr).to_string(),
                    class: Some(class),
                    instance: false,
                })
            }
            _ => None,
        }
    }

    /// The class a name was built from (`crit = MyLoss()`, `self.crit = MyLoss()`).
    fn instance_of(&self, name: &str) -> Option<String> {
        self.instance(name).map(|(class, _)| class.to_string())
    }

    /// The class a name was built from in the nearest enclosing scope, and the `reduction=` it
    /// was given (`crit = nn.MSELoss(reduction="sum")`).
    fn instance(&self, name: &str) -> Option<(&'s str, Option<&'s str>)> {
        let built = self.instances.get(name)?;
        let mut scope = Some(super::scope_of_name(self, name));
        while let Some(s) = scope {
            if let Some((_, class, reduction)) =
                built.iter().rev().find(|(in_scope, ..)| *in_scope == s)
            {
                return Some((class, *reduction));
            }
            scope = self.scopes.get(s).and_then(|sc| sc.parent);
        }
        None
    }

    /// `name` or `alias.name` imported from another module: the module and the name in it.
    /// An instance of an imported class is called through the class (`Class()`).
    pub(super) fn imported(&self, callee: &str) -> Option<(String, String)> {
        if let Some(class) = self.instance_of(callee) {
            return self
                .imports
                .get(&class)
                .map(|(m, n)| (m.clone(), format!("{}()", n.as_deref().unwrap_or(&class))));
        }
        if let Some((m, n)) = self.imports.get(callee) {
            return Some((m.clone(), n.clone().unwrap_or_default()));
        }
        // `losses.compute(...)`, `import my.losses as L; L.compute(...)`.
        let (alias, name) = callee.rsplit_once('.')?;
        let (module, sub) = self.imports.get(alias)?;
        let module = match sub {
            Some(sub) => crate::expr::imports::submodule(module, sub),
            None => module.clone(),
        };
        Some((module, name.to_string()))
    }

    /// The latest definition of `name` in scope before `before`.
    pub(super) fn loss_def(&self, name: &str, before: usize) -> Option<Prov> {
        let defs = self.loss_defs.get(name);
        let mut scope = Some(self.scope());
        while let Some(s) = scope {
            // Any scaling of the name before the use counts (`loss /= n` after `loss = f(x)`),
            // unless the last binding is its alternative, on the other arm of the same test
            // (`out = loss / n` under `if c:`, `out = loss` under `else:`).
            let mut prior = defs
                .into_iter()
                .flatten()
                .filter(|d| d.scope == s && d.at < before);
            if let Some(last) = prior.next_back() {
                let divided = std::iter::once(last)
                    .chain(prior.rev())
                    .find(|d| d.prov.divided())
                    .filter(|d| match (d.arm, last.arm) {
                        (Some((c, t)), Some((lc, lt))) => c != lc || t == lt,
                        _ => true,
                    });
                return Some(divided.unwrap_or(last).prov.clone());
            }
            // A parameter shadows the names around its function.
            if self
                .scopes
                .get(s)
                .is_some_and(|sc| sc.params.iter().any(|p| p == name))
            {
                return None;
            }
            scope = self.scopes.get(s).and_then(|sc| sc.parent);
        }
        None
    }

    /// `name` is a parameter of the function being read.
    fn param(&self, name: &str) -> Option<Prov> {
        let mut scope = Some(self.scope());
        while let Some(s) = scope {
            let sc = self.scopes.get(s)?;
            if sc.params.iter().any(|p| p == name) {
                return Some(Prov::Param(name.to_string()));
            }
            if sc.is_class {
                return None;
            }
            scope = sc.parent;
        }
        None
    }

    /// Remember what `target` now holds.
    pub(super) fn define(&mut self, target: &'s str, at: usize, prov: Prov) {
        let scope = self.scope();
        let arm = self
            .stack
            .iter()
            .rev()
            .find_map(|(_, f)| match f {
                super::Frame::Branch(c, b) => Some(Some((*c, *b))),
                super::Frame::Scope(_) => Some(None),
                _ => None,
            })
            .flatten();
        // `if not args.deepspeed: loss = loss / n`: divided for the plain optimizer only.
        if let (Some((c, taken)), Prov::DividedBy(divisor)) = (arm, &prov) {
            let test = self.conds.get(c).map(|c| c.text.trim());
            let flag = |t: &str| super::last_segment(t.trim()) == "deepspeed";
            let off_engine = test.is_some_and(|t| match t.strip_prefix("not ") {
                Some(negated) => taken && flag(negated),
                None => !taken && flag(t),
            });
            if off_engine {
                self.divided_off_engine.push(divisor.clone());
            }
        }
        self.loss_defs
            .entry(target)
            .or_default()
            .push(super::LossDef {
                scope,
                at,
                prov,
                arm,
            });
    }

    /// `a, b = rhs`: each name gets its element when the right side is written as a tuple of
    /// the same length, else what the whole right side is (`logits, loss = model(x, y)`).
    pub(super) fn define_pattern(&mut self, left: Node, right: Node, at: usize) {
        let mut c = left.walk();
        let targets: Vec<Node> = left.named_children(&mut c).collect();
        let right = unparen(right);
        let mut rc = right.walk();
        let elements: Vec<Node> = match right.ty() {
            "expression_list" | "tuple" | "list" => right.named_children(&mut rc).collect(),
            _ => Vec::new(),
        };
        let whole = (elements.len() != targets.len()).then(|| self.prov(right, 0));
        for (i, t) in targets.iter().enumerate() {
            let t = if t.ty() == "list_splat_pattern" {
                match t.named_child(0) {
                    Some(n) => n,
                    None => continue,
                }
            } else {
                *t
            };
            if !matches!(t.ty(), "identifier" | "attribute") {
                continue;
            }
            let prov = match (&whole, elements.get(i)) {
                (Some(p), _) => p.clone().element(i, targets.len()),
                (None, Some(e)) => self.prov(*e, 0),
                (None, None) => continue,
            };
            let name = self.text(t);
            self.define(name, at, prov);
        }
    }

    /// Replace the file's own helpers and the parameters of the function being read by what
    /// they stand for. `env` holds the arguments a call site gave the function whose values
    /// are being resolved, with its parameter names.
    pub(super) fn resolve(&self, p: &Prov, env: Option<(&[String], &Args)>, depth: usize) -> Prov {
        if depth > MAX_DEPTH {
            return Prov::UNKNOWN;
        }
        match p {
            Prov::Known(_) | Prov::PerElement | Prov::Imported { .. } | Prov::DividedBy(_) => {
                p.clone()
            }
            Prov::Summed(inner) => Prov::Summed(Box::new(self.resolve(inner, env, depth + 1))),
            Prov::Averaged(inner) => Prov::Averaged(Box::new(self.resolve(inner, env, depth + 1))),
            Prov::Combined(parts) | Prov::Tuple(parts) => {
                Prov::combined(parts.iter().map(|q| self.resolve(q, env, depth + 1)))
            }
            Prov::Param(name) => env
                .and_then(|(params, args)| argument(params, args, name))
                .unwrap_or(Prov::ASSUMED),
            Prov::Local {
                callee,
                args,
                otherwise,
                pick,
            } => {
                let Some(scope) = self.function(callee) else {
                    return self.resolve(otherwise, env, depth + 1);
                };
                let given: Args = args
                    .iter()
                    .map(|(k, v)| (k.clone(), self.resolve(v, env, depth + 1)))
                    .collect();
                let params = &self.scopes[scope].params;
                let returns = self.returns.get(&scope).map_or(&[][..], |r| r.as_slice());
                if returns.is_empty() {
                    // A function that returns nothing gives no loss to judge.
                    return Prov::UNKNOWN;
                }
                // Unpacked (`out, logs = step(...)`): the element of each tuple returned whole.
                Prov::combined(
                    returns
                        .iter()
                        .map(|r| match (r, pick) {
                            (Prov::Tuple(parts), Some((i, n))) if parts.len() == *n => {
                                parts.get(*i).unwrap_or(r)
                            }
                            _ => r,
                        })
                        .map(|r| self.resolve(r, Some((params, &given)), depth + 1))
                        .collect::<Vec<_>>(),
                )
            }
        }
    }

    /// The function scope a call names: a method of the class, a function of the file, or the
    /// `__call__`/`forward` of a class of the file.
    pub(super) fn function(&self, callee: &Callee) -> Option<usize> {
        let index = self.functions.get_or_init(|| self.index_functions());
        if callee.instance {
            let class = *index.classes.get(callee.name.as_str())?;
            return ["__call__", "forward"]
                .iter()
                .find_map(|m| index.methods.get(&class)?.get(*m).copied());
        }
        match callee.class {
            Some(class) => index
                .methods
                .get(&class)?
                .get(callee.name.as_str())
                .copied(),
            None => index.functions.get(callee.name.as_str()).copied(),
        }
    }

    /// The file's functions, methods and classes by name (the first of each name), once the
    /// whole file is read.
    fn index_functions(&self) -> FunctionIndex {
        let mut index = FunctionIndex::default();
        for (id, s) in self.scopes.iter().enumerate() {
            let Some(parent) = s.parent else {
                continue;
            };
            let in_class = self.scopes.get(parent).is_some_and(|p| p.is_class);
            if s.is_class {
                index.classes.entry(s.name.clone()).or_insert(id);
            } else if in_class {
                index
                    .methods
                    .entry(parent)
                    .or_default()
                    .entry(s.name.clone())
                    .or_insert(id);
            } else {
                index.functions.entry(s.name.clone()).or_insert(id);
            }
        }
        index
    }

    /// What each module-level function, and each class when called, returns: for the files that
    /// import them.
    pub(super) fn exports(&self) -> Vec<(String, Prov)> {
        let mut out = Vec::new();
        for (id, s) in self.scopes.iter().enumerate() {
            if s.parent != Some(0) {
                continue;
            }
            // A function returns what it returns; a class, what its `__call__`/`forward` does.
            let scope = if s.is_class {
                let callee = Callee {
                    name: s.name.clone(),
                    class: None,
                    instance: true,
                };
                match self.function(&callee) {
                    Some(scope) => scope,
                    None => continue,
                }
            } else {
                id
            };
            let Some(returns) = self.returns.get(&scope) else {
                continue;
            };
            let resolved = Prov::combined(returns.iter().map(|r| self.resolve(r, None, 0)));
            let name = if s.is_class {
                format!("{}()", s.name)
            } else {
                s.name.clone()
            };
            out.push((name, resolved));
        }
        out
    }
}

impl Walker<'_> {
    /// Whether the argument is a count to normalise by, as itself: a name, a count's call, a
    /// keyword named for one or given one by name ([`names_count`]).
    fn hands_count(&self, arg: Node) -> bool {
        let plain =
            |n: Node| matches!(n.ty(), "identifier" | "attribute") && names_count(self.text(n));
        match arg.ty() {
            "identifier" | "attribute" => plain(arg),
            "call" => arg
                .field("function")
                .is_some_and(|f| names_count(self.text(f))),
            "keyword_argument" => {
                arg.field("name").is_some_and(|k| names_count(self.text(k)))
                    || arg.field("value").is_some_and(|v| self.hands_count(v))
            }
            _ => false,
        }
    }
}

/// An argument that hands a producer the accumulation factor or a count to normalise by
/// (`num_items_in_batch=n`, `n_tokens`, `accum_steps`); the tokens themselves are no count.
fn names_count(text: &str) -> bool {
    names_accumulation(text)
        || [
            "num_items",
            "n_items",
            "num_tokens",
            "n_tokens",
            "ntokens",
            "token_count",
            "tokens_count",
            "count",
            "numel",
            "normali",
            "num_valid",
            "n_valid",
            "denom",
        ]
        .iter()
        .any(|w| super::contains_word(text, w))
}

/// Functions, methods (by class scope) and classes of a file, by name.
#[derive(Debug, Default)]
pub(super) struct FunctionIndex {
    functions: std::collections::HashMap<String, usize>,
    methods: std::collections::HashMap<usize, std::collections::HashMap<String, usize>>,
    classes: std::collections::HashMap<String, usize>,
}

/// The argument a call gave for parameter `name`.
fn argument(params: &[String], args: &Args, name: &str) -> Option<Prov> {
    given_for(params, args, |(k, _)| k.as_deref(), name).map(|(_, v)| v.clone())
}

/// The argument given for parameter `name`: by keyword, else by its position among the
/// positional ones. `keyword` reads an argument's keyword.
pub(super) fn given_for<'a, A>(
    params: &[String],
    args: &'a [A],
    keyword: impl Fn(&A) -> Option<&str>,
    name: &str,
) -> Option<&'a A> {
    if let Some(a) = args.iter().find(|a| keyword(a) == Some(name)) {
        return Some(a);
    }
    let index = params.iter().position(|p| p == name)?;
    args.iter().filter(|a| keyword(a).is_none()).nth(index)
}

/// A number of data-parallel ranks: `world_size`, `dp_size`, `num_processes`.
fn is_world_size(text: &str) -> bool {
    ["world_size", "dp_size", "num_processes", "get_world_size"]
        .iter()
        .any(|w| text.contains(w))
}

/// What the lines of a loop assign, by name, as written: the right side of each line that starts
/// with the name (`name = ...`, `name[key] = ...`), at most eight a name.
pub(super) type Assignments<'s> = HashMap<&'s str, Vec<&'s str>>;

fn assignments(body: &str) -> Assignments<'_> {
    let mut out = Assignments::default();
    for line in body.lines() {
        let line = line.trim_start();
        let (name, rest) = line.split_at(line.find(|c: char| !is_word(c)).unwrap_or(line.len()));
        if name.is_empty() {
            continue;
        }
        let rest = match rest.strip_prefix('[') {
            Some(r) => r.split_once(']').map_or("", |(_, after)| after),
            None => rest,
        };
        let Some(value) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let values = out.entry(name).or_default();
        if !value.starts_with('=') && values.len() < 8 {
            values.push(value);
        }
    }
    out
}

/// A character of a name or a dotted path, as [`Walker::reads_gathered`] reads them.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '.'
}

/// The name an expression hangs from: `out` of `out.losses.values()` or `out["loss"]`.
pub(super) fn root_name(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}
