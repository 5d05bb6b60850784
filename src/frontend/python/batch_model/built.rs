//! What a call that builds a data loader, an optimizer, a sampler, a Trainer or its arguments, an
//! Accelerator or a DeepSpeed engine says about the batch: the micro-batch, the factors its
//! keywords set, the learning rates and step counts it is given.

use super::*;

impl<'s> Walker<'s> {
    /// A call that builds a loader, an optimizer, a Trainer's arguments, an Accelerator or a
    /// sampler: what it says about the batch.
    pub(in crate::frontend::python) fn note_batch_call(
        &mut self,
        call: Node,
        last: &str,
        lower: &str,
    ) {
        let loader = last.ends_with("DataLoader");
        let optimizer = starts_upper(last) && OPTIMIZER_CLASSES.contains(&lower);
        let trainer = is_trainer_arguments(last);
        // A Lightning Trainer, its argparse builder or a subclass: they take its arguments.
        let lightning = last == "Trainer"
            || last == "from_argparse_args"
                && call
                    .field("function")
                    .is_some_and(|f| self.text(f).ends_with("Trainer.from_argparse_args"))
            || self.batch.trainer_classes.iter().any(|c| c == last);
        let sampler = last.ends_with("Sampler");
        // accelerate's options reach the Accelerator directly or in a `DataLoaderConfiguration`.
        let accelerator = last == "Accelerator" || last == "DataLoaderConfiguration";
        let engine = last == "initialize" && contains_word(self.text(call), "deepspeed");
        // A class built with a learning rate may be a Lightning module, whose optimizers, built in
        // `configure_optimizers`, take that rate: judged once the walk knows the framework.
        let built = loader || optimizer || trainer || sampler || accelerator || lightning || engine;
        let module = !built && starts_upper(last);
        if !(built || module) {
            return;
        }
        let Some(args) = call.field("arguments") else {
            return;
        };
        let mut c = args.walk();
        let mut positional = Vec::new();
        let mut keywords = Vec::new();
        for a in args.named_children(&mut c) {
            match a.ty() {
                "keyword_argument" => {
                    if let (Some(k), Some(v)) = (a.field("name"), a.field("value")) {
                        keywords.push((self.text(k), v));
                    }
                }
                "comment" | "list_splat" | "dictionary_splat" => {}
                _ => positional.push(a),
            }
        }
        let keyword = |name: &str| keywords.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
        let span = call.byte_range();
        let seed = |notes: &mut BatchNotes, v: Node, f: Factors, src: &str| {
            let t = compact(src.get(v.byte_range()).unwrap_or(""));
            if !t.is_empty() {
                notes.seeds.push((t, f));
            }
        };
        if loader {
            let batch = keyword("batch_size").or(positional.get(1).copied());
            let dataset = keyword("dataset").or(positional.first().copied());
            if let Some(b) = batch {
                seed(&mut self.batch, b, MICRO, self.src);
            }
            self.batch.loaders.push(Loader {
                call: span,
                batch: batch.map(|b| b.byte_range()),
                dataset: dataset.map(|d| self.text(d).to_string()),
            });
            return;
        }
        if module {
            let named = keyword("lr").or(keyword("learning_rate"));
            let by_use = || {
                self.rate_keyword(call, last, &keywords)
                    .map(|i| keywords[i].1)
            };
            if let Some(lr) = named.or_else(by_use) {
                if positional
                    .first()
                    .is_some_and(|p| self.holds_parameters(*p))
                {
                    self.batch.optimizers_by_arguments.push(span.clone());
                }
                self.batch
                    .rates
                    .push((lr.byte_range(), span, last.to_string()));
            }
            return;
        }
        if optimizer {
            if let Some(lr) = keyword("lr").or(positional.get(1).copied()) {
                self.batch
                    .rates
                    .push((lr.byte_range(), span, last.to_string()));
            }
            return;
        }
        if sampler {
            if let Some(n) = keyword("num_replicas") {
                seed(&mut self.batch, n, WORLD, self.src);
            }
            return;
        }
        if let Some(g) = keyword("gradient_accumulation_steps") {
            seed(&mut self.batch, g, ACCUM, self.src);
        }
        if engine {
            if let Some(s) = keyword("lr_scheduler") {
                self.batch.engine_schedulers.push(self.text(s).to_string());
            }
            return;
        }
        if lightning {
            let several = |v: Option<Node>| v.is_some_and(|v| self.may_be_several(v));
            let strategy = keyword("strategy").is_some_and(|v| {
                let s = self.text(v).to_ascii_lowercase();
                ["ddp", "fsdp", "deepspeed"].iter().any(|w| s.contains(w))
            });
            if several(keyword("devices")) || several(keyword("num_nodes")) || strategy {
                self.facts.parallel_trainers.push(span.clone());
            }
            // The devices of each node; on one node they are the data-parallel size.
            let nodes = keyword("num_nodes");
            if let Some(d) = keyword("devices") {
                let per_node = if nodes.is_some_and(|n| self.may_be_several(n)) {
                    DEVICES
                } else {
                    WORLD
                };
                seed(&mut self.batch, d, per_node, self.src);
            }
            if let Some(n) = nodes {
                seed(&mut self.batch, n, NODES, self.src);
            }
            // Lightning accumulates for the module: its schedulers step once per optimizer step.
            let accum = keyword("accumulate_grad_batches");
            if let Some(g) = accum {
                seed(&mut self.batch, g, ACCUM, self.src);
                let text = self.text(g);
                let call = span.clone();
                self.batch.lightning_accum = Some((compact(text), parse_number(text), call));
            }
            // Its `max_steps` counts optimizer steps, as a Trainer's arguments do.
            if let Some(v) = keyword("max_steps") {
                self.batch.counts.push(Count {
                    value: v.byte_range(),
                    scheduler: None,
                    call: span.clone(),
                    key: "max_steps".to_string(),
                    iterations: None,
                });
                let accum = accum.map(|g| (compact(self.text(g)), parse_number(self.text(g))));
                self.batch.trainer_accum.push((span, accum));
            }
            return;
        }
        if accelerator {
            self.batch.split_batches |=
                keyword("split_batches").is_some_and(|v| self.text(v) == "True");
            return;
        }
        // A Trainer's arguments (`TrainingArguments`, `SFTConfig`): its counts are optimizer steps.
        if let Some(b) = keyword("per_device_train_batch_size") {
            seed(&mut self.batch, b, MICRO, self.src);
        }
        if let Some(lr) = keyword("learning_rate") {
            self.batch
                .rates
                .push((lr.byte_range(), span.clone(), last.to_string()));
        }
        let mut counted = keyword("learning_rate").is_some();
        for key in ["max_steps", "warmup_steps"] {
            if let Some(v) = keyword(key) {
                counted = true;
                self.batch.counts.push(Count {
                    value: v.byte_range(),
                    scheduler: None,
                    call: span.clone(),
                    key: key.to_string(),
                    iterations: None,
                });
            }
        }
        if counted {
            let accum = keyword("gradient_accumulation_steps")
                .map(|g| (compact(self.text(g)), parse_number(self.text(g))));
            self.batch.trainer_accum.push((span, accum));
        }
    }

    /// Under Lightning, the keyword a module of this file is built with that its optimizers
    /// take as their rate: what the class derives their rate from reads the keyword's name
    /// (`Denoiser(peak=...)` with `AdamW(..., lr=self.hparams.peak)`), and no other keyword's.
    fn rate_keyword(&self, call: Node, class: &str, keywords: &[(&str, Node)]) -> Option<usize> {
        if keywords.is_empty() || !self.lightning() {
            return None;
        }
        let reads = self.rate_reads(call, class)?;
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let read = |k: &str| {
            reads.iter().any(|r| {
                r.match_indices(k).any(|(at, _)| {
                    let b = r.as_bytes();
                    (at == 0 || !word(b[at - 1])) && b.get(at + k.len()).is_none_or(|&c| !word(c))
                })
            })
        };
        // A rate the module builds from several of its keywords is a product judged nowhere.
        let mut read = (0..keywords.len()).filter(|&i| read(keywords[i].0));
        let first = read.next();
        first.filter(|_| read.next().is_none())
    }

    /// A class that derives from a `Trainer`, or from a class of this file that does.
    pub(in crate::frontend::python) fn note_trainer_class(&mut self, class: Node) {
        let Some(bases) = class.field("superclasses") else {
            return;
        };
        let mut c = bases.walk();
        let derives = bases.named_children(&mut c).any(|b| {
            let base = last_segment(self.text(b));
            base == "Trainer" || self.batch.trainer_classes.iter().any(|c| c == base)
        });
        if let Some(name) = class.field("name").filter(|_| derives) {
            self.batch.trainer_classes.push(self.text(name).to_string());
        }
    }

    /// What an optimizer takes first: a model's parameters (`model.parameters()`,
    /// `named_parameters()`, filtered or listed) or a list of parameter groups
    /// (`[{"params": ...}, ...]`), written in place or bound once to a name.
    fn holds_parameters(&self, arg: Node) -> bool {
        self.holds_parameters_within(arg, 3)
    }

    fn holds_parameters_within(&self, arg: Node, depth: u8) -> bool {
        let Some(depth) = depth.checked_sub(1) else {
            return false;
        };
        match arg.ty() {
            "call" => {
                let callee = arg.field("function").map_or("", |f| self.text(f));
                let mut c = arg.walk();
                matches!(last_segment(callee), "parameters" | "named_parameters")
                    || matches!(callee, "filter" | "list" | "chain" | "itertools.chain")
                        && arg.field("arguments").is_some_and(|a| {
                            a.named_children(&mut c)
                                .any(|a| self.holds_parameters_within(a, depth))
                        })
            }
            "list" | "tuple" => {
                let mut c = arg.walk();
                let groups: Vec<Node> = arg.named_children(&mut c).collect();
                !groups.is_empty()
                    && groups.iter().all(|g| {
                        let mut c = g.walk();
                        g.ty() == "dictionary"
                            && g.named_children(&mut c).any(|pair| {
                                pair.field("key").is_some_and(|k| {
                                    matches!(self.text(k), "\"params\"" | "'params'")
                                })
                            })
                    })
            }
            "identifier" => {
                let name = self.text(arg);
                if self.batch.reassigned.contains(name) {
                    return false;
                }
                let Some(bound) = self.assigned_text.get(name) else {
                    return false;
                };
                let Some(start) = offset_in(self.src, bound) else {
                    return false;
                };
                tree_root(arg)
                    .descendant_for_byte_range(start, start + bound.len())
                    .is_some_and(|value| self.holds_parameters_within(value, depth))
            }
            _ => false,
        }
    }

    /// A Trainer's `devices` or `num_nodes` that may be more than one: a number above 1, `-1`
    /// (every device), a list of several, or a value read from a config or the arguments. `1`, a
    /// list of one, `"auto"` and `None` show one (or leave it to the machine); so does a name bound
    /// once to one of them (`GPUS = 1`).
    fn may_be_several(&self, value: Node) -> bool {
        let text = self.text(value).trim();
        // A parameter is what the callers pass, whatever a name of the same spelling holds elsewhere.
        let parameter =
            (self.scopes.get(self.scope())).is_some_and(|s| s.params.iter().any(|p| p == text));
        let once = !parameter && !self.batch.reassigned.contains(text);
        if matches!(value.ty(), "identifier" | "attribute") && once {
            if let Some(bound) = self.assigned_text.get(text) {
                return several_in_text(bound);
            }
        }
        if let Some(default) = (value.ty() == "attribute")
            .then(|| self.dataclass_default(value))
            .flatten()
        {
            return several_in_text(default);
        }
        match value.ty() {
            "integer" | "unary_operator" | "string" => several_in_text(text),
            "list" | "tuple" => value.named_child_count() > 1,
            "identifier" | "attribute" | "subscript" | "call" => true,
            _ => false,
        }
    }
}

impl<'s> Walker<'s> {
    /// `cfg.devices` read from a dataclass of this file that gives the field a default, when
    /// `cfg` is that class (annotated so, or built from it) and the file only ever builds the
    /// class by direct calls that leave the field alone: no parser or config system (which
    /// takes the class itself) can set it.
    fn dataclass_default(&self, value: Node) -> Option<&'s str> {
        let object = self.text(value.field("object")?);
        let field = self.text(value.field("attribute")?);
        let root = tree_root(value);
        let mut c = root.walk();
        let mut found = None;
        for top in root.named_children(&mut c) {
            let class = match top.ty() {
                "decorated_definition"
                    if self.text(top).starts_with("@dataclass")
                        || self.text(top).starts_with("@dataclasses.dataclass") =>
                {
                    top.field("definition")
                        .filter(|d| d.ty() == "class_definition")
                }
                _ => None,
            };
            let Some(class) = class else { continue };
            let (Some(name), Some(body)) = (class.field("name"), class.field("body")) else {
                continue;
            };
            let mut b = body.walk();
            for stmt in body.named_children(&mut b) {
                let Some(assign) = stmt.named_child(0).filter(|a| a.ty() == "assignment") else {
                    continue;
                };
                let left = assign.field("left").map(|l| self.text(l));
                if left == Some(field) && assign.field("type").is_some() {
                    if found.is_some() {
                        return None;
                    }
                    found = Some((self.text(name), assign.field("right")?));
                }
            }
        }
        let (class, default) = found?;
        // Each mention of the class: its definition, an annotation, or a call with keywords
        // only, none of them the field. One of them must tie `object` to the class.
        let (mut tied, mut stack) = (false, vec![tree_root(value)]);
        while let Some(n) = stack.pop() {
            let mut c = n.walk();
            stack.extend(n.named_children(&mut c));
            if n.ty() != "identifier" || self.text(n) != class {
                continue;
            }
            let Some(up) = n.parent() else { continue };
            match up.ty() {
                "class_definition" => {}
                "type" => {
                    let named = up.parent().and_then(|p| match p.ty() {
                        "typed_parameter" | "typed_default_parameter" => p.named_child(0),
                        "assignment" => p.field("left"),
                        _ => None,
                    });
                    tied |= named.is_some_and(|t| self.text(t) == object);
                }
                "call" if up.field("function") == Some(n) => {
                    let mut a = up.walk();
                    let keywords_only = up.field("arguments").is_some_and(|args| {
                        args.named_children(&mut a).all(|k| match k.ty() {
                            "keyword_argument" => {
                                k.field("name").is_some_and(|k| self.text(k) != field)
                            }
                            other => other == "comment",
                        })
                    });
                    if !keywords_only {
                        return None;
                    }
                    let bound = up.parent().filter(|p| p.ty() == "assignment");
                    tied |= bound
                        .and_then(|b| b.field("left"))
                        .is_some_and(|l| self.text(l) == object);
                }
                _ => return None,
            }
        }
        if !tied {
            return None;
        }
        Some(self.text(default))
    }
}

/// A device or node count written out: a number outside 0..=1 (`0` is no device, a negative
/// count every device), a string of one (`"4"`) or of several ids (`"0,1"`), a list of several.
/// Anything else (`args.gpus`, `torch.cuda.device_count()`) may be several.
fn several_in_text(text: &str) -> bool {
    let several = |n: f64| !(0.0..=1.0).contains(&n);
    let text = text.trim();
    if let Some(n) = parse_number(text) {
        return several(n);
    }
    if let Some(inner) = text
        .strip_prefix(['"', '\''])
        .and_then(|t| t.strip_suffix(['"', '\'']))
    {
        return inner.parse::<f64>().is_ok_and(several)
            || inner.split(',').filter(|d| !d.trim().is_empty()).count() > 1;
    }
    if let Some(inner) = text
        .strip_prefix(['[', '('])
        .and_then(|t| t.strip_suffix([']', ')']))
    {
        // A nested list is not a list of device ids: it may be anything.
        let ids = inner.split(',').filter(|d| !d.trim().is_empty()).count();
        return ids > 1 || inner.contains(['[', '(']);
    }
    text != "None"
}
