//! Python expressions into the program of [`crate::expr::program`]: what each expression is made
//! of, which calls say what their value is (a `numel()` sum, the device's memory, a world size),
//! and the statements that bind names. The formulas memory rules read are valued in
//! [`Walker::value_formulas`], once the whole file is known.

use super::*;
use crate::expr::program::{Id, Key, Node as V, ScopeDef, Source};
use crate::expr::{sizes_memory, DeviceCount};
use crate::frontend::fields::{PyField, PyKind};

/// How many items of a dict, tuple or list are read: larger ones are data, not arithmetic.
const MAX_ITEMS: usize = 64;

/// A formula to value once the file is read.
pub(super) struct Pending {
    pub kind: PendingKind,
    pub value: Id,
    pub span: Range<usize>,
    pub scope: usize,
    pub guard: Topics,
    pub stages: Option<(u8, Range<usize>)>,
    pub inference: bool,
}

pub(super) enum PendingKind {
    Assign {
        target: String,
    },
    Return {
        function: String,
    },
    /// One side of a comparison, the other side, and the whole comparison.
    Compare {
        other: Id,
        whole: Range<usize>,
    },
    /// The figures of one f-string, each with the unit its label states (MEM004 only).
    Printed {
        figures: Vec<(Id, Option<crate::facts::Unit>, Range<usize>)>,
    },
    Expr,
    /// A memory value set in the branch taken when checkpointing is on (see
    /// [`CheckpointedValue`]).
    Checkpointed {
        target: String,
        factor: Option<f64>,
        offloaded: bool,
        returned: bool,
    },
    /// `name = value`, kept when the value is a number the name says is a parameter count or
    /// the GPU's memory.
    Constant {
        name: String,
    },
}

impl<'s> Walker<'s> {
    /// The program node of an expression.
    pub(super) fn value_of(&mut self, node: Node, depth: usize) -> Id {
        // Nothing is valued without the value model: what it would build is never read.
        if !self.value_model {
            return 0;
        }
        if depth == 0 {
            self.program_path();
        }
        let scope = self.scope();
        let span = node.byte_range();
        if depth > MAX_EXPR_DEPTH {
            return self.program.add(V::Opaque, span, scope);
        }
        let v = match node.ty() {
            "integer" | "float" => match parse_number(self.text(node)) {
                Some(v) => V::Num(v),
                None => V::Opaque,
            },
            "parenthesized_expression" => match node.named_child(0) {
                Some(inner) => return self.value_of(inner, depth + 1),
                None => V::Opaque,
            },
            "identifier" => V::Name(self.text(node)),
            // A plain string literal (no prefix, so no f-string): a key tables are indexed by.
            "string" => match self.text(node) {
                t if t.starts_with(['"', '\'']) => V::Str(t.trim_matches(['"', '\''])),
                _ => V::Opaque,
            },
            "attribute" => {
                let text = self.text(node);
                if reads_device_memory(text) && text.contains('(') {
                    V::Source(Source::DeviceMemory)
                } else if node.field("object").is_some_and(|o| o.ty() == "call") {
                    // `estimate(n).total`: a field of what a helper returns.
                    let (Some(object), Some(attr)) =
                        (node.field("object"), node.field("attribute"))
                    else {
                        return self.program.add(V::Opaque, span, scope);
                    };
                    let base = self.value_of(object, depth + 1);
                    V::Item(base, Key::Str(self.text(attr)))
                } else {
                    V::Name(text)
                }
            }
            "unary_operator" => {
                let op = node.field("operator").map(|o| self.text(o));
                match (op, node.field("argument")) {
                    (Some("-"), Some(a)) => V::Neg(self.value_of(a, depth + 1)),
                    (Some("+"), Some(a)) => return self.value_of(a, depth + 1),
                    _ => V::Opaque,
                }
            }
            "binary_operator" => {
                match (
                    node.field("left"),
                    node.field("right"),
                    node.field("operator"),
                ) {
                    (Some(l), Some(r), Some(op)) => {
                        let a = self.value_of(l, depth + 1);
                        let b = self.value_of(r, depth + 1);
                        V::Bin(self.text(op), a, b)
                    }
                    _ => V::Opaque,
                }
            }
            "call" => return self.call_value(node, depth),
            "subscript" => self.subscript_value(node, depth),
            "dictionary" => {
                let mut c = node.walk();
                let pairs: Vec<Node> = node.named_children(&mut c).collect();
                if pairs.len() > MAX_ITEMS {
                    V::Opaque
                } else {
                    let mut entries = Vec::new();
                    for pair in pairs {
                        let (Some(k), Some(v)) = (pair.field("key"), pair.field("value")) else {
                            continue;
                        };
                        if k.ty() != "string" {
                            continue;
                        }
                        let key = self.text(k).trim_matches(['"', '\'']);
                        entries.push((key, self.value_of(v, depth + 1)));
                    }
                    V::Dict(entries)
                }
            }
            "tuple" | "list" | "expression_list" => {
                let mut c = node.walk();
                let items: Vec<Node> = node.named_children(&mut c).collect();
                if items.len() > MAX_ITEMS {
                    V::Opaque
                } else {
                    V::Seq(
                        items
                            .into_iter()
                            .map(|i| self.value_of(i, depth + 1))
                            .collect(),
                    )
                }
            }
            "conditional_expression" => {
                let mut c = node.walk();
                let kids: Vec<Node> = node.named_children(&mut c).collect();
                match kids.as_slice() {
                    [then, _, otherwise] => {
                        let a = self.value_of(*then, depth + 1);
                        let b = self.value_of(*otherwise, depth + 1);
                        V::Choice(a, b)
                    }
                    _ => V::Opaque,
                }
            }
            _ => V::Opaque,
        };
        self.program.add(v, span, scope)
    }

    fn call_value(&mut self, node: Node, depth: usize) -> Id {
        let scope = self.scope();
        let span = node.byte_range();
        let callee = node.field("function").map(|f| self.text(f)).unwrap_or("");
        let last = last_segment(callee);
        let args_node = node.field("arguments");
        let mut positional: Vec<Node> = Vec::new();
        let mut keywords: Vec<(&'s str, Node)> = Vec::new();
        if let Some(a) = args_node.filter(|a| a.ty() == "generator_expression") {
            // `sum(p.numel() for p in ...)`: the generator is the one argument.
            positional.push(a);
        } else if let Some(a) = args_node {
            let mut c = a.walk();
            for arg in a.named_children(&mut c) {
                match arg.ty() {
                    "keyword_argument" => {
                        if let (Some(k), Some(v)) = (arg.field("name"), arg.field("value")) {
                            keywords.push((self.text(k), v));
                        }
                    }
                    "comment" => {}
                    _ => positional.push(arg),
                }
            }
        }
        let text = self.text(node);
        let source = |s| V::Source(s);
        let v = match last {
            // Numeric wrappers say nothing of the value.
            "int" | "float" | "round" | "ceil" | "floor" | "abs"
                if matches!(callee, "int" | "float" | "round" | "abs")
                    || callee.starts_with("math.") =>
            {
                match positional.first() {
                    Some(a) => return self.value_of(*a, depth + 1),
                    None => V::Opaque,
                }
            }
            "sum" if callee == "sum" => match positional.first() {
                Some(a) => self.sum_value(*a, depth),
                None => V::Opaque,
            },
            "max" | "min" if callee == last => V::Extreme(
                positional
                    .iter()
                    .map(|a| self.value_of(*a, depth + 1))
                    .collect(),
            ),
            // transformers' size of the weights in bytes (buffers included).
            "get_memory_footprint" if callee.contains('.') => source(Source::Weights),
            "num_parameters" | "get_num_params" | "num_params" if callee.contains('.') => {
                source(Source::Params {
                    trainable: text.contains("trainable=True"),
                })
            }
            // `for p in model.parameters(): total += p.numel()`: each parameter's count.
            "numel" if self.iterates_parameters(callee.trim_end_matches(".numel")) => {
                source(Source::Params {
                    trainable: self.under_test_of("requires_grad"),
                })
            }
            "get_nb_trainable_parameters" => {
                let t = self.program.add(
                    V::Source(Source::Params { trainable: true }),
                    span.clone(),
                    scope,
                );
                let all = self.program.add(
                    V::Source(Source::Params { trainable: false }),
                    span.clone(),
                    scope,
                );
                V::Seq(vec![t, all])
            }
            "mem_get_info" => {
                let free = self
                    .program
                    .add(V::Source(Source::DeviceMemory), span.clone(), scope);
                let total = self
                    .program
                    .add(V::Source(Source::DeviceMemory), span.clone(), scope);
                V::Seq(vec![free, total])
            }
            // torch's count is of the GPUs this host sees: one node's, on a job of several.
            "device_count" if ["cuda.", "xpu.", "npu."].iter().any(|d| callee.contains(d)) => {
                source(Source::Devices(DeviceCount::PerNode))
            }
            "get_world_size"
            | "device_count"
            | "xrt_world_size"
            | "process_count"
            | "get_local_world_size"
            | "local_device_count"
            | "get_data_parallel_world_size" => match crate::expr::device_count(last) {
                Some(kind) => source(Source::Devices(kind)),
                None if last.starts_with("local") => source(Source::Devices(DeviceCount::PerNode)),
                None => source(Source::Devices(DeviceCount::Total)),
            },
            "get" | "getenv" if callee.contains("environ") || callee.ends_with("getenv") => {
                match positional
                    .first()
                    .and_then(|a| environment_count(self.text(*a)))
                {
                    Some(kind) => source(Source::Devices(kind)),
                    None => V::Opaque,
                }
            }
            // The call itself reads the device (`torch.cuda.get_device_properties(0)`,
            // `gpu_memory_gb()`), not merely an argument of it (`fit(n, props.total_memory)`);
            // a function of the file handed a value (`static_vram_gib(n)`) is valued as a call,
            // and a class (`VramPlanner(n=...)`) builds an object, not a number.
            _ if reads_device_memory(callee)
                && !callee.starts_with("self.")
                && !starts_upper(last)
                && (callee.contains('.')
                    || positional
                        .iter()
                        .all(|a| matches!(a.ty(), "integer" | "string"))) =>
            {
                source(Source::DeviceMemory)
            }
            // `Breakdown(weights=w, grads=g)`: a dataclass of components, read by field.
            // It may also construct a class of the file, whose `__init__` binds what it is
            // handed: the call is kept for that too (see `Valuer::attribute`).
            _ if starts_upper(last) && positional.is_empty() && !keywords.is_empty() => {
                let entries: Vec<(&str, Id)> = keywords
                    .iter()
                    .map(|(k, v)| (*k, self.value_of(*v, depth + 1)))
                    .collect();
                let construction = V::Call {
                    callee,
                    args: Vec::new(),
                    keywords: entries.clone(),
                };
                self.program.add(construction, span.clone(), scope);
                V::Dict(entries)
            }
            _ => {
                let args = positional
                    .iter()
                    .map(|a| self.value_of(*a, depth + 1))
                    .collect();
                let keywords = keywords
                    .iter()
                    .map(|(k, v)| (*k, self.value_of(*v, depth + 1)))
                    .collect();
                V::Call {
                    callee,
                    args,
                    keywords,
                }
            }
        };
        self.program.add(v, span, scope)
    }

    /// `name` is the target of a loop around here over a model's parameters.
    fn iterates_parameters(&self, name: &str) -> bool {
        self.stack.iter().any(|(_, f)| match f {
            Frame::Loop(l) => self.loops.get(*l).is_some_and(|lp| {
                let header = self.src.get(lp.header.clone()).unwrap_or("");
                lp.iterates.contains("parameters")
                    && header.split(" in ").next().is_some_and(|targets| {
                        targets.split([' ', ',', '(', ')']).any(|w| w == name)
                    })
            }),
            _ => false,
        })
    }

    /// A test around here reads `word` (`if p.requires_grad:`).
    fn under_test_of(&self, word: &str) -> bool {
        self.stack.iter().any(|(_, f)| match f {
            Frame::Branch(c, true) => self
                .cond_spans
                .get(*c)
                .and_then(|(_, span)| self.src.get(span.clone()))
                .is_some_and(|t| t.contains(word)),
            _ => false,
        })
    }

    /// `sum(p.numel() for p in model.parameters())` counts parameters (those with gradients when
    /// it filters on `requires_grad`); `sum(parts.values())` and `sum([a, b])` add their items.
    fn sum_value(&mut self, arg: Node, depth: usize) -> V<'s> {
        let text = self.text(arg);
        if matches!(arg.ty(), "generator_expression" | "list_comprehension") {
            // Over the parameters, or over a name bound to them (`params =
            // list(enc.parameters()) + list(head.parameters())`).
            let over_parameters =
                text.contains("parameters") || self.iterates_bound_parameters(arg);
            // Each parameter's count times its element's bytes (`p.numel() * p.element_size()`,
            // `p.nbytes`): the weights' size in bytes, in their own dtype.
            let bytes = text.contains("element_size")
                || text.contains("itemsize")
                || text.contains(".nbytes");
            let over_states = [".state.values()", ".state.items()", ".state["]
                .iter()
                .any(|w| text.contains(w));
            if bytes && over_states && !over_parameters {
                return V::Source(Source::OptimizerStates);
            }
            if over_parameters && bytes {
                return match arg
                    .named_children(&mut arg.walk())
                    .any(|n| n.ty() == "if_clause")
                {
                    true => V::Opaque,
                    false => V::Source(Source::Weights),
                };
            }
            let counts = text.contains("numel") && over_parameters;
            if !counts {
                return match self.keyed_items(arg, depth) {
                    Some(items) => V::Sum(self.program.add(items, arg.byte_range(), self.scope())),
                    None => V::Opaque,
                };
            }
            // A filter picks a subset: those with gradients (or an adapter's, by their names)
            // are the trainable ones; any other (`if not p.requires_grad`, `if "embed" in n`)
            // is a part of the model whose share nothing says.
            let mut c = arg.walk();
            let filters: Vec<&str> = arg
                .named_children(&mut c)
                .filter(|n| n.ty() == "if_clause")
                .map(|n| self.text(n))
                .collect();
            let trainable = |f: &&str| {
                let f = f.trim_start_matches("if").trim_start();
                !f.starts_with("not ")
                    && !f.contains("== False")
                    && (f.contains("requires_grad") || f.contains("lora") || f.contains("adapter"))
            };
            return match filters.as_slice() {
                // `for p in filter(lambda p: p.requires_grad, model.parameters())`
                [] => V::Source(Source::Params {
                    trainable: text.contains("requires_grad"),
                }),
                [f] if trainable(f) => V::Source(Source::Params { trainable: true }),
                _ => V::Opaque,
            };
        }
        // `parts.values()`
        if arg.ty() == "call" {
            let f = arg.field("function");
            if let Some(object) = f
                .filter(|f| f.ty() == "attribute")
                .filter(|f| {
                    f.field("attribute")
                        .is_some_and(|a| self.text(a) == "values")
                })
                .and_then(|f| f.field("object"))
            {
                return V::Sum(self.value_of(object, depth + 1));
            }
        }
        V::Sum(self.value_of(arg, depth + 1))
    }

    /// The generator iterates a name whose value lists parameters.
    fn iterates_bound_parameters(&self, generator: Node) -> bool {
        let mut c = generator.walk();
        let clauses: Vec<Node> = generator
            .named_children(&mut c)
            .filter(|n| n.ty() == "for_in_clause")
            .collect();
        clauses.iter().any(|clause| {
            clause
                .field("right")
                .filter(|r| r.ty() == "identifier")
                .and_then(|r| self.assigned_text.get(self.text(r)))
                .is_some_and(|bound| bound.contains(".parameters()"))
        })
    }

    /// `parts[k] for k in ("weights", "grads")`: the items of a bundle read by the keys
    /// written out, one by one.
    fn keyed_items(&mut self, generator: Node, depth: usize) -> Option<V<'s>> {
        let body = generator.field("body").filter(|b| b.ty() == "subscript")?;
        let (base, key) = (body.field("value")?, body.field("subscript")?);
        let mut c = generator.walk();
        let clauses: Vec<Node> = generator.named_children(&mut c).skip(1).collect();
        let [clause] = clauses.as_slice() else {
            return None;
        };
        let (left, right) = (clause.field("left")?, clause.field("right")?);
        if clause.ty() != "for_in_clause"
            || left.ty() != "identifier"
            || self.text(left) != self.text(key)
            || !matches!(right.ty(), "tuple" | "list")
        {
            return None;
        }
        let mut c = right.walk();
        let keys: Vec<Node> = right.named_children(&mut c).collect();
        if keys.is_empty() || keys.iter().any(|k| k.ty() != "string") {
            return None;
        }
        let scope = self.scope();
        let bundle = self.value_of(base, depth + 1);
        let items = keys
            .into_iter()
            .map(|k| {
                let key = Key::Str(self.text(k).trim_matches(['"', '\'']));
                self.program
                    .add(V::Item(bundle, key), k.byte_range(), scope)
            })
            .collect();
        Some(V::Seq(items))
    }

    fn subscript_value(&mut self, node: Node, depth: usize) -> V<'s> {
        let (Some(base), Some(key)) = (node.field("value"), node.field("subscript")) else {
            return V::Opaque;
        };
        let base_text = self.text(base);
        if base_text.ends_with("environ") {
            return match environment_count(self.text(key)) {
                Some(kind) => V::Source(Source::Devices(kind)),
                None => V::Opaque,
            };
        }
        let key = match key.ty() {
            "string" => Key::Str(self.text(key).trim_matches(['"', '\''])),
            "integer" => match self.text(key).parse::<i64>() {
                Ok(i) => Key::Index(i),
                Err(_) => return V::Opaque,
            },
            "unary_operator" => match self.text(key).replace(' ', "").parse::<i64>() {
                Ok(i) => Key::Index(i),
                Err(_) => return V::Opaque,
            },
            // `BYTES[dtype]`: the key is a value, known when it is a string.
            _ => {
                let base = self.value_of(base, depth + 1);
                return V::ItemAt(base, self.value_of(key, depth + 1));
            }
        };
        V::Item(self.value_of(base, depth + 1), key)
    }

    /// Register a function or class with the program (same ids as the walk's scopes).
    pub(super) fn program_scope(
        &mut self,
        node: Node,
        parent: usize,
        class: Option<usize>,
        name_node: Option<Node>,
    ) {
        let is_class = node.ty() == "class_definition";
        let name = name_node.map(|n| self.text(n)).unwrap_or("");
        let mut params = Vec::new();
        if let (false, Some(list)) = (is_class, node.field("parameters")) {
            let mut c = list.walk();
            let kids: Vec<Node> = list.named_children(&mut c).collect();
            for p in kids {
                let (name, default) = match p.ty() {
                    "identifier" => (Some(p), None),
                    "typed_parameter" => {
                        (p.named_child(0).filter(|n| n.ty() == "identifier"), None)
                    }
                    "default_parameter" | "typed_default_parameter" => {
                        (p.field("name"), p.field("value"))
                    }
                    _ => (None, None),
                };
                let Some(name) = name else { continue };
                let default = default.and_then(|d| {
                    let v = match d.ty() {
                        "integer" | "float" => V::Num(parse_number(self.text(d))?),
                        "string" if self.text(d).starts_with(['"', '\'']) => {
                            V::Str(self.text(d).trim_matches(['"', '\'']))
                        }
                        _ => return None,
                    };
                    Some(self.program.add(v, p.byte_range(), parent))
                });
                params.push((self.text(name), default));
            }
            if params
                .first()
                .is_some_and(|(n, _)| *n == "self" || *n == "cls")
            {
                params.remove(0);
            }
        }
        // `def lora_memory_gb(...)`: an estimate written for a LoRA run.
        if !is_class && sizes_memory(name) && Topics::of(name).lora {
            let at = node.field("name").map_or(0..0, |n| n.byte_range());
            self.facts.evidence.lora.push(at);
        }
        self.program.add_scope(ScopeDef {
            name,
            parent: Some(parent),
            class,
            is_class,
            params,
            ..ScopeDef::default()
        });
    }

    /// Tell the program which branches of the current function what comes next is under.
    pub(super) fn program_path(&mut self) {
        let start = self
            .stack
            .iter()
            .rposition(|(_, f)| matches!(f, Frame::Scope(_)))
            .map_or(0, |i| i + 1);
        let path = self.stack[start..]
            .iter()
            .filter_map(|(_, f)| match f {
                Frame::Branch(c, taken) => Some((*c as u32, *taken)),
                _ => None,
            })
            .collect();
        self.program.at_path(path);
    }

    /// `target = value` (names and tuples of names) from the end of `statement` on.
    pub(super) fn bind_value(&mut self, left: Node, value: Id, statement: Range<usize>) {
        self.program_path();
        match left.ty() {
            "identifier" | "attribute" => {
                let name = self.text(left);
                self.note_export_binding(name);
                let scope = scope_of_name(self, name);
                self.program.bind(scope, name, statement.end, value);
            }
            // `parts["grads"] = g`: the dict `parts` now holds `grads` too.
            "subscript" => {
                let (Some(base), Some(key)) = (left.field("value"), left.field("subscript")) else {
                    return;
                };
                if base.ty() != "identifier" || key.ty() != "string" {
                    return;
                }
                let name = self.text(base);
                let key = self.text(key).trim_matches(['"', '\'']);
                let scope = self.scope();
                let old = self.program.add(V::Name(name), base.byte_range(), scope);
                let set = self
                    .program
                    .add(V::Set(old, key, value), left.byte_range(), scope);
                let scope = scope_of_name(self, name);
                self.program.bind(scope, name, statement.end, set);
            }
            "pattern_list" | "tuple_pattern" | "list_pattern" => {
                let mut c = left.walk();
                let targets: Vec<Node> = left.named_children(&mut c).collect();
                for (i, t) in targets.into_iter().enumerate() {
                    let item = self.program.add(
                        V::Item(value, Key::Index(i as i64)),
                        t.byte_range(),
                        self.scope(),
                    );
                    self.bind_value(t, item, statement.clone());
                }
            }
            _ => {}
        }
    }

    /// A loop's target: over a literal list of numbers (`for n in (1.3e9, 7e9):`) it holds
    /// one of them (the first stands for all: rules read multipliers, not sizes); anything
    /// else, something unknown.
    pub(super) fn bind_loop(&mut self, left: Node, right: Option<Node>) {
        let first = right
            .filter(|r| matches!(r.ty(), "list" | "tuple") && left.ty() == "identifier")
            .and_then(|r| r.named_child(0))
            .filter(|_| right.is_some_and(|r| self.literal_numbers(r)));
        match first {
            Some(item) => {
                self.program_path();
                let value = self.value_of(item, 0);
                self.bind_value(left, value, left.byte_range());
            }
            None => self.bind_unknown(left),
        }
    }

    fn literal_numbers(&self, list: Node) -> bool {
        let mut c = list.walk();
        let items: Vec<Node> = list.named_children(&mut c).collect();
        !items.is_empty()
            && items.len() <= MAX_ITEMS
            && items.iter().all(|i| self.number(*i).is_some())
    }

    /// A loop's or a `with`'s target holds something unknown from here on.
    pub(super) fn bind_unknown(&mut self, left: Node) {
        self.program_path();
        let v = self.program.add(V::Opaque, left.byte_range(), self.scope());
        self.bind_value(left, v, left.byte_range());
    }

    pub(super) fn pend(&mut self, kind: PendingKind, value: Id, span: Range<usize>) {
        if !self.value_model {
            return;
        }
        let inference = self.stack.iter().any(|(_, f)| match f {
            Frame::With(_, no_grad) => *no_grad,
            Frame::Scope(s) => self.scopes.get(*s).is_some_and(|s| s.inference),
            _ => false,
        });
        let stages = self.stage_test();
        self.pending.push(Pending {
            kind,
            value,
            span,
            scope: self.scope(),
            guard: self.guard(),
            stages,
            inference,
        });
    }

    /// The ZeRO stages the tests around the statement let through, and the innermost test;
    /// `None` when no test reads the stage, or one reads it in a way not understood.
    fn stage_test(&self) -> Option<(u8, Range<usize>)> {
        let mut mask = crate::facts::ALL_STAGES;
        let mut innermost = None;
        for (_, f) in &self.stack {
            let Frame::Branch(c, taken) = f else { continue };
            let Some((_, span)) = self.cond_spans.get(*c) else {
                continue;
            };
            if !self.topics(span).stage {
                continue;
            }
            let m = match self.conds.get(*c).and_then(|c| c.stages) {
                Some(arm) => arm,
                None => crate::facts::stage_mask(self.src.get(span.clone())?)?,
            };
            mask &= if *taken {
                m
            } else {
                !m & crate::facts::ALL_STAGES
            };
            innermost = Some(span.clone());
        }
        innermost.map(|span| (mask, span))
    }
}

/// The device count an environment variable holds (`"WORLD_SIZE"`, `'LOCAL_WORLD_SIZE'`).
fn environment_count(key: &str) -> Option<DeviceCount> {
    let k = key.trim_matches(['"', '\'']).to_ascii_uppercase();
    match k.as_str() {
        "WORLD_SIZE" | "SLURM_NTASKS" | "OMPI_COMM_WORLD_SIZE" | "PMI_SIZE" => {
            Some(DeviceCount::Total)
        }
        "LOCAL_WORLD_SIZE" | "SLURM_NTASKS_PER_NODE" | "OMPI_COMM_WORLD_LOCAL_SIZE" => {
            Some(DeviceCount::PerNode)
        }
        _ => None,
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

#[cfg(test)]
mod tests {
    /// `MEMLINT_DUMP=file.py cargo test dump_formulas -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn dump_formulas() {
        let Ok(path) = std::env::var("MEMLINT_DUMP") else {
            return;
        };
        let text = std::fs::read_to_string(path).expect("readable");
        let facts = super::extract(&text).expect("parses");
        for f in &facts.formulas {
            println!("{:?} @{:?} {:?}", f.kind, &text[f.span.clone()], f.guard);
            for t in &f.lin.terms {
                println!(
                    "    {} role={:?} part={:?} coef={} opaque={} value={:?} div={:?}",
                    t.symbol, t.role, t.part, t.coef, t.opaque, t.value, t.divided_by
                );
            }
            println!("    + {}", f.lin.constant);
        }
    }
}
