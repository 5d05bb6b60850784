//! Assignments, augmented assignments and returns: what each binds (values, losses, divisions,
//! accumulation tests, instances) and the formulas they state.

use super::*;
use crate::facts::GPT_FIELDS;
use crate::frontend::fields::{PyField, PyKind};

/// Names bound to a scheduler anywhere in the file (`cosine = CosineAnnealingLR(opt, ...)`,
/// `sched = get_linear_schedule_with_warmup(...)`), and to an optimizer (`rmsprop =
/// torch.optim.RMSprop(...)`), read before the walk: a helper defined above the code that builds
/// them steps them by those names.
pub(super) fn built_names(src: &str) -> (Vec<String>, Vec<String>) {
    let mut schedulers: Vec<String> = Vec::new();
    let mut optimizers: Vec<String> = Vec::new();
    for line in src.lines() {
        let Some((left, right)) = line.trim_start().split_once('=') else {
            continue;
        };
        let name = left.trim();
        let ident =
            |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let Some((callee, _)) = right.trim_start().split_once('(') else {
            continue;
        };
        let callee = callee.trim();
        let dotted = !callee.is_empty() && callee.split('.').all(ident);
        if !ident(name) || right.starts_with('=') || !dotted {
            continue;
        }
        let out = match builds_scheduler(callee) {
            true => &mut schedulers,
            false
                if OPTIMIZER_CLASSES
                    .contains(&last_segment(callee).to_ascii_lowercase().as_str()) =>
            {
                &mut optimizers
            }
            false => continue,
        };
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    (schedulers, optimizers)
}

/// A callee that builds a learning-rate scheduler: its last segment holds `schedule` or ends in
/// `lr` (`CosineAnnealingLR`, `get_linear_schedule_with_warmup`).
fn builds_scheduler(callee: &str) -> bool {
    let last = last_segment(callee).to_ascii_lowercase();
    last.contains("schedule") || last.ends_with("lr")
}

impl<'s> Walker<'s> {
    // ---- statements -------------------------------------------------------------------------

    /// A dict entry or a parameter's default that is a LoRA setting given a literal.
    pub(super) fn setting(&mut self, node: Node) {
        let (key, value) = match node.ty() {
            "pair" => (node.field("key"), node.field("value")),
            _ => (node.field("name"), node.field("value")),
        };
        let (Some(key), Some(value)) = (key, value) else {
            return;
        };
        if is_literal(value) {
            let key = self.text(key).trim_matches(['"', '\'']);
            lora_setting(
                key,
                self.text(value),
                node.byte_range(),
                &mut self.facts.evidence,
            );
        }
    }

    /// `N_PARAMS, GPU_MEMORY_GB = 13e9, 80`: each name is a constant of its own.
    fn unpacked_constants(&mut self, left: Node, right: Node) {
        if !matches!(left.ty(), "pattern_list" | "tuple_pattern")
            || !matches!(right.ty(), "expression_list" | "tuple")
        {
            return;
        }
        let mut c = left.walk();
        let names: Vec<Node> = left.named_children(&mut c).collect();
        let mut c = right.walk();
        let values: Vec<Node> = right.named_children(&mut c).collect();
        if names.len() != values.len() {
            return;
        }
        for (name, v) in names.into_iter().zip(values) {
            if name.ty() == "identifier" {
                let value = self.value_of(v, 0);
                let name = self.text(name).to_string();
                self.pend(PendingKind::Constant { name }, value, v.byte_range());
            }
        }
    }

    /// `model, opt, sched = build(...)`: each name the call's value goes to, by its callee.
    fn note_call_targets(&mut self, left: Node, right: Node) {
        let Some(callee) = (right.ty() == "call")
            .then(|| right.field("function"))
            .flatten()
        else {
            return;
        };
        let callee = last_segment(self.text(callee));
        let mut stack = vec![left];
        while let Some(n) = stack.pop() {
            match n.ty() {
                "identifier" | "attribute" => {
                    self.call_targets.insert((callee, self.text(n)));
                }
                "pattern_list" | "tuple_pattern" | "list_pattern" => {
                    let mut c = n.walk();
                    stack.extend(n.named_children(&mut c));
                }
                _ => {}
            }
        }
    }

    pub(super) fn assignment(&mut self, node: Node) {
        let (Some(left), Some(right)) = (node.field("left"), node.field("right")) else {
            return;
        };
        if self.loop_model {
            self.note_assigned_names(left);
            self.note_call_targets(left, right);
            self.invoke(right);
            let attr = left.field("attribute").map(|a| self.text(a));
            if attr == Some("require_backward_grad_sync") {
                self.sync_flags.push(node.byte_range());
            }
        }
        let target = self.text(left).to_string();
        // `done = done + 1`, as `done += 1`.
        if self.loop_model && self.counts_up(node).is_some() {
            self.note_step_counter(node, &target);
        }
        let simple_target = matches!(left.ty(), "identifier" | "attribute");
        if left.ty() == "subscript" {
            self.note_item(left, right);
        }
        // `nb = 1.3  # billions of parameters`: the comment gives the number its scale, when
        // the name says nothing else (`model_size_gb = 13.5  # 6.7B params x 2` is a size).
        if left.ty() == "identifier"
            && matches!(right.ty(), "integer" | "float")
            && role_of(self.text(left)) == Role::Unknown
            && !crate::expr::is_memory_name(self.text(left))
        {
            let rest = self.src.get(node.end_byte()..).unwrap_or("");
            let line = &rest[..rest.find('\n').unwrap_or(rest.len())];
            if let Some(scale) = line.trim_start().strip_prefix('#').and_then(comment_scale) {
                let name = self.text(left);
                let scope = scope_of_name(self, name);
                self.program.counts_in(scope, name, scale);
            }
        }
        // Evidence in assignments.
        let rtext = self.text(right);
        if simple_target && is_literal(right) {
            lora_setting(&target, rtext, node.byte_range(), &mut self.facts.evidence);
        }
        if target.ends_with("requires_grad") && rtext == "False" {
            self.facts.evidence.frozen.push(node.byte_range());
        }
        if target == "self.automatic_optimization" && rtext == "False" {
            self.facts.manual_optimization = true;
        }
        if let Some(receiver) = target
            .strip_suffix(".model_accepts_loss_kwargs")
            .filter(|r| *r != "self")
        {
            self.trainer_loss.told.push(receiver.to_string());
        }
        if right.ty() == "call" {
            if let Some(f) = right.field("function") {
                let callee = self.text(f);
                let last = last_segment(callee).to_ascii_lowercase();
                if OPTIMIZER_CLASSES.contains(&last.as_str())
                    && simple_target
                    && !self.optimizer_names.contains(&target)
                {
                    self.optimizer_names.push(target.clone());
                }
                if last.ends_with("gradscaler") && simple_target {
                    self.scaler_names.push(target.clone());
                }
                if last == "partial" && simple_target && self.partial_of_clip(right) {
                    self.clip_names.push(target.clone());
                }
                let schedule = builds_scheduler(callee);
                // Built by a factory (`config.instantiate(cfg.lr_scheduler, ...)`): a scheduler
                // by the name its steps are read by.
                if simple_target && (schedule || last_segment(&target).contains("sched")) {
                    self.note_schedule_count(&target, right);
                }
                // Whatever its class is called, an object built on the optimizer that is not used
                // as one is a schedule (`warm = LinearWarmupDecay(opt, total_steps=n)`). Read
                // with the loop model only, which alone steps it.
                let by_use = !schedule
                    && simple_target
                    && self.loop_model
                    && self.built_on_optimizer(right, &target);
                if simple_target && (schedule || by_use) {
                    // Most are already known from the read before the walk.
                    if !self.scheduler_names.contains(&target) {
                        self.scheduler_names.push(target.clone());
                    }
                    self.note_scheduler_built(&target, right, schedule);
                }
                // `acc = Accelerator(...)`: whatever the name, its `backward` is accelerate's.
                if simple_target && last_segment(callee) == "Accelerator" {
                    self.accelerator_names.push(target.clone());
                }
                // `engine, optimizer, _, _ = deepspeed.initialize(...)`
                if callee == "deepspeed.initialize" {
                    let engine = match left.ty() {
                        "pattern_list" | "tuple_pattern" => left.named_child(0),
                        _ => Some(left),
                    };
                    if let Some(e) = engine {
                        self.engine_names.push(self.text(e).to_string());
                    }
                }
            }
        }
        if self.loop_model && right.ty() == "call" {
            self.note_prepare(node.start_byte(), left, right);
        }
        if self.loop_model && matches!(left.ty(), "pattern_list" | "tuple_pattern" | "list_pattern")
        {
            self.define_pattern(left, right, node.start_byte());
        }
        if !simple_target {
            // `out.losses[k] = v / n`: what is taken from `out` later holds divided losses.
            if self.loop_model && left.ty() == "subscript" {
                let prov = self.prov(right, 0);
                if prov.divided() {
                    let container = left.field("value").map_or("", |v| self.text(v));
                    let root = super::provenance::root_name(container);
                    if !root.is_empty() && root != "self" {
                        self.define(root, node.start_byte(), prov);
                    }
                }
            }
            let value = self.value_of(right, 0);
            // `parts["total"] = ...`: a total kept in a dict under its own key, and a part set
            // under a test of checkpointing (`parts["activations_gb"] = 0`).
            if let Some(key) = self.item_key(left) {
                if role_of(&key) == Role::Total {
                    let target = key.clone();
                    self.pend(PendingKind::Assign { target }, value, right.byte_range());
                }
                self.note_checkpointed(&key, right, value, None, node.byte_range());
            }
            self.bind_value(left, value, node.byte_range());
            self.unpacked_constants(left, right);
            return;
        }
        if let Some(f) = (self.loop_model && right.ty() == "call")
            .then(|| right.field("function"))
            .flatten()
        {
            let callee = self.text(f);
            if starts_upper(last_segment(callee)) {
                let scope = scope_of_name(self, &target);
                let reduction = self.keyword_value(right, "reduction");
                self.instances
                    .entry(self.text(left))
                    .or_default()
                    .push((scope, callee, reduction));
            }
        }
        // Only a dict built or read by key can hand a helper the loop's counter.
        if self.loop_model && matches!(unparen(right).ty(), "dictionary" | "subscript") {
            self.scope_text
                .insert((self.scope(), target.clone()), rtext);
        }
        // Assigned a second time, a name's binding is no longer one value.
        if self.assigned_text.insert(target.clone(), rtext).is_some() {
            self.batch.reassigned.insert(target.clone());
        }
        self.note_global_batch(&target, right);
        // `loss = loss / n` is its own statement; `loss = out.loss / n` divides on the way.
        let division = self.division_of(right).map(|(divisor, mut d)| {
            let rebinds = unparen(right)
                .field("left")
                .is_some_and(|l| self.text(unparen(l)) == target);
            if rebinds {
                d.statement = node
                    .parent()
                    .filter(|p| p.ty() == "expression_statement")
                    .map(|p| p.byte_range());
            }
            (divisor, d)
        });
        self.record_division(node, &target, division);
        self.branch_entry(&target, right, false);
        // Accumulation tests stored in a name, and counters kept modulo the factor.
        if let Some(test) = self.accum_test(right, true) {
            let scope = self.scope();
            self.test_names.insert((scope, target.clone()), test);
            if let Some(pick) = self.pick(right, 0) {
                self.pick_names.insert((scope, target.clone()), pick);
            }
        } else if let Some((counter, reset, n)) = self.counter_comparison(right) {
            let held = (counter.to_string(), reset.to_string(), n.to_string());
            self.counter_names
                .insert((self.scope(), target.clone()), held);
        }
        if self.loop_model && is_count_of_data(rtext) {
            let here = (
                self.scope(),
                self.ctx(node.start_byte()).loops.last().copied(),
            );
            self.local_counts.insert((here.0, target.clone()), here.1);
        }
        if let Some(guard) = self.above_one(right, true, 0) {
            let scope = self.scope();
            self.above_one_names.insert((scope, target.clone()), guard);
        }
        if let Some(m) = self.modulo(right) {
            self.modulo_names
                .insert((scope_of_name(self, &target), target.clone()), m);
        }
        if self.loop_model {
            let prov = self.prov(right, 0);
            self.define(self.text(left), node.start_byte(), prov);
            if rtext.contains("no_sync") {
                self.note_sync_choice(right, node.byte_range());
            }
        }
        self.note_counts(&target, right);

        // `TP = 4`, `pipeline_parallel_size = 2`: a model-parallel degree written as a constant.
        if let Some(n) = self.number(right).filter(|n| *n > 1.0 && n.fract() == 0.0) {
            if crate::expr::device_count(last_segment(&target))
                == Some(crate::expr::DeviceCount::ModelParallel)
            {
                self.facts.evidence.model_parallel.push(Mention {
                    value: n as u32,
                    span: node.byte_range(),
                });
            }
        }
        if self.scope() == 0 {
            let number = self.number(right);
            match number {
                Some(v) => self.module_numbers.insert(self.text(left), v),
                None => self.module_numbers.remove(self.text(left)),
            };
            // A script's model shape (`n_layer = 12`), for `memlint estimate`.
            let whole = number.filter(|v| *v >= 1.0 && v.fract() == 0.0 && *v < 1e9);
            if let Some(v) = whole.filter(|_| GPT_FIELDS.contains(&target.as_str())) {
                self.facts
                    .model_fields
                    .push((target.clone(), v as u64, right.byte_range()));
            }
        }
        let value = self.value_of(right, 0);
        let rescaled = unparen(right);
        let factor = (rescaled.ty() == "binary_operator"
            && rescaled
                .field("left")
                .is_some_and(|l| self.text(unparen(l)) == target))
        .then(|| self.factor(rescaled))
        .flatten();
        self.note_checkpointed(&target, right, value, factor, node.byte_range());
        self.pend(
            PendingKind::Constant {
                name: target.clone(),
            },
            value,
            right.byte_range(),
        );
        self.pend(
            PendingKind::Assign {
                target: target.clone(),
            },
            value,
            right.byte_range(),
        );
        self.bind_value(left, value, node.byte_range());
        self.note_export_local(left, right);
    }

    /// The string key of a dict item written to (`parts["total"]`): the name a value stored
    /// under it is judged by.
    fn item_key(&self, left: Node) -> Option<String> {
        let key = left.field("subscript").filter(|k| k.ty() == "string")?;
        left.field("value").filter(|b| b.ty() == "identifier")?;
        Some(string_key(self.text(key)))
    }

    /// `n` of `1 / n` (or `1.0 / n`).
    pub(super) fn reciprocal_of<'t>(&self, node: Node<'t>) -> Option<Node<'t>> {
        let node = unparen(node);
        let one = node.field("left").map(|l| self.text(l));
        let divides = node.field("operator").is_some_and(|o| o.kind() == "/");
        (node.ty() == "binary_operator" && divides && matches!(one, Some("1" | "1.0" | "1.")))
            .then(|| node.field("right"))
            .flatten()
    }

    /// `loss.div_(n)` (or `loss.mul_(1 / n)`) as a statement divides the loss in place, as
    /// `loss /= n` does.
    pub(super) fn divide_in_place(&mut self, stmt: Node, expr: Node) {
        if expr.ty() != "call" {
            return;
        }
        let Some(func) = expr.field("function").filter(|f| f.ty() == "attribute") else {
            return;
        };
        let method = func.field("attribute").map(|a| self.text(a));
        if !matches!(method, Some("div_" | "true_divide_" | "mul_")) {
            return;
        }
        let Some(object) = func
            .field("object")
            .filter(|o| matches!(o.ty(), "identifier" | "attribute"))
        else {
            return;
        };
        let Some(args) = expr.field("arguments") else {
            return;
        };
        let mut c = args.walk();
        let kids: Vec<Node> = args
            .named_children(&mut c)
            .filter(|n| n.ty() != "comment")
            .collect();
        let [divisor] = kids.as_slice() else {
            return;
        };
        if divisor.ty() == "keyword_argument" {
            return;
        }
        // `loss.mul_(1 / n)` divides by `n`; a product with anything else is not read.
        let divisor = match method {
            Some("mul_") => match self.reciprocal_of(*divisor) {
                Some(d) => d,
                None => return,
            },
            _ => *divisor,
        };
        let divisor = &divisor;
        let target = self.text(object);
        if self.is_factor(self.text(*divisor)) {
            let division = Division {
                operator_and_divisor: func.start_byte().saturating_sub(1).max(object.end_byte())
                    ..expr.end_byte(),
                statement: Some(stmt.byte_range()),
            };
            self.record_division(
                stmt,
                target,
                Some((self.text(*divisor).to_string(), division)),
            );
        }
        let by = Prov::DividedBy(self.text(unparen(*divisor)).to_string());
        self.define(target, stmt.start_byte(), by);
    }

    pub(super) fn augmented(&mut self, node: Node) {
        let (Some(left), Some(right), Some(op)) = (
            node.field("left"),
            node.field("right"),
            node.field("operator"),
        ) else {
            return;
        };
        if self.loop_model {
            self.note_assigned_names(left);
            self.invoke(right);
        }
        let target = self.text(left).to_string();
        let op = self.text(op).trim_end_matches('=').to_string();
        if self.loop_model && self.counts_up(node).is_some() {
            self.note_step_counter(node, &target);
        }
        if op == "%" {
            self.modulo_names.insert(
                (scope_of_name(self, &target), target.clone()),
                (self.text(right).to_string(), right.byte_range()),
            );
        }
        if op == "/" && self.is_factor(self.text(right)) {
            let division = Division {
                operator_and_divisor: node.byte_range(),
                statement: node
                    .parent()
                    .filter(|p| p.ty() == "expression_statement")
                    .map(|p| p.byte_range()),
            };
            self.record_division(
                node,
                &target,
                Some((self.text(right).to_string(), division)),
            );
        }
        if !self.loop_model {
        } else if op == "/" || op == "//" || (op == "*" && is_count_like(self.text(right))) {
            let by = if op == "*" {
                Prov::SCALED
            } else {
                Prov::DividedBy(self.text(unparen(right)).to_string())
            };
            self.define(self.text(left), node.start_byte(), by);
        } else if op == "+" || op == "-" {
            // `total += part`: what the total now holds.
            let sum = Prov::combined([self.prov(left, 0), self.prov(right, 0)]);
            self.define(self.text(left), node.start_byte(), sum);
        }
        if left.ty() == "identifier" || left.ty() == "attribute" {
            let scope = self.scope();
            self.program_path();
            let current = self.program.add(
                crate::expr::program::Node::Name(self.text(left)),
                left.byte_range(),
                scope,
            );
            let rhs = self.value_of(right, 0);
            let op: &'s str = node
                .field("operator")
                .map(|o| self.text(o).trim_end_matches('='))
                .unwrap_or("+");
            let value = self.program.add(
                crate::expr::program::Node::Bin(op, current, rhs),
                node.byte_range(),
                scope,
            );
            let factor = self.factor(node);
            self.note_checkpointed(&target, right, value, factor, node.byte_range());
            // A running sum (`total += part`) is not a statement of what training needs.
            self.pend(PendingKind::Expr, value, node.byte_range());
            self.bind_value(left, value, node.byte_range());
        }
    }

    /// `ctor` is handed the optimizer (its first positional argument, or `optimizer=`), is no
    /// optimizer class, and what it builds, `target`, is not zeroed and stepped as an optimizer
    /// is (a wrapper such as `Lookahead(opt)` is).
    fn built_on_optimizer(&self, ctor: Node, target: &str) -> bool {
        let Some(func) = ctor.field("function") else {
            return false;
        };
        let last = last_segment(self.text(func)).to_ascii_lowercase();
        if last.contains("optim") || OPTIMIZER_CLASSES.contains(&last.as_str()) {
            return false;
        }
        if self.optimizers_by_use.iter().any(|n| n == target) {
            return false;
        }
        let Some(args) = ctor.field("arguments") else {
            return false;
        };
        let mut c = args.walk();
        let handed = args
            .named_children(&mut c)
            .filter(|a| a.ty() != "comment")
            .enumerate()
            .find_map(|(i, a)| match a.ty() {
                "keyword_argument" => a
                    .field("name")
                    .filter(|k| self.text(*k) == "optimizer")
                    .and_then(|_| a.field("value")),
                _ if i == 0 => Some(a),
                _ => None,
            });
        handed.is_some_and(|v| self.is_optimizer_ref(self.text(v)))
    }

    /// `name = Scheduler(...)` (or a helper's `return Scheduler(...)`, under the name `f()`):
    /// whether its length counts optimizer steps, micro-batches or samples.
    fn note_scheduler_built(&mut self, name: &str, ctor: Node, assigned: bool) {
        let scope = self.scope();
        self.built_schedulers
            .push((name.to_string(), scope, ctor.byte_range()));
        let length = self
            .schedule_length(ctor)
            .map_or(self.text(ctor), |a| self.text(a));
        self.note_micro_warmup(name, ctor);
        // Multiplied by the factor (`max_steps * accum`), a count of optimizer steps becomes one
        // of micro-batches.
        // The product as written, or the one the name handed in holds (`T_max=cosine_len`).
        let product = match self.assigned_text.get(length.trim()) {
            Some(held) if !length.contains('*') => *held,
            _ => length,
        };
        let multiplied = !product.contains('/')
            && super::schedules::multiplied_names(product)
                .iter()
                .any(|w| names_accumulation(w));
        if self.counts_accumulation(length, 0) && !multiplied {
            self.facts.schedule_in_optimizer_steps = true;
        } else {
            self.note_micro_schedule(name, ctor);
            if assigned {
                self.note_sample_schedule(name, ctor);
            }
        }
    }

    pub(super) fn ret(&mut self, node: Node) {
        if let Some(value) = node.named_child(0) {
            self.returned(node, value);
        }
    }

    /// `value` returned by the statement (or lambda) `node`.
    pub(super) fn returned(&mut self, node: Node, value: Node) {
        let scope = self.scope();
        let function = self
            .scopes
            .get(scope)
            .map(|s| s.name.clone())
            .unwrap_or_default();
        if function.is_empty() {
            return;
        }
        self.note_export_return(value);
        self.branch_entry(&function, value, true);
        // A helper that builds the scheduler: judged where the caller steps what it returns.
        if node.ty() == "return_statement" && value.ty() == "call" {
            let callee = value.field("function").map_or("", |f| self.text(f));
            if builds_scheduler(callee) {
                self.note_scheduler_built(&format!("{function}()"), value, false);
                self.note_returned_schedule(value);
            }
        }
        if node.ty() == "return_statement" {
            self.note_returned_accelerator(value);
            self.note_returned_ddp(value);
        }
        // Lightning divides what `training_step` returns by `accumulate_grad_batches`.
        let lightning = self
            .scopes
            .get(scope)
            .and_then(|s| s.class)
            .and_then(|c| self.scopes.get(c))
            .is_some_and(|c| c.lightning);
        if lightning && function == "training_step" {
            // `return loss / k`, or `return {"loss": loss / k, ...}`.
            let returned = match unparen(value).ty() {
                "dictionary" => {
                    let mut c = value.walk();
                    let found = unparen(value).named_children(&mut c).find_map(|pair| {
                        let key = pair.field("key")?;
                        (string_key(self.text(key)) == "loss").then(|| pair.field("value"))?
                    });
                    found
                }
                _ => Some(value),
            };
            if let Some((divisor, division)) = returned.and_then(|v| self.division_of(v)) {
                self.facts.manual_divisions.push(ManualDivision {
                    engine_config: false,
                    engine_factor: false,
                    framework: Framework::Lightning,
                    at: node.byte_range(),
                    divisor,
                    division: Some(division),
                });
            }
        }
        if self.loop_model {
            // `return loss / n, logs`: each element kept, for the caller that unpacks them.
            let prov = match value.ty() {
                "expression_list" | "tuple" => {
                    let mut c = value.walk();
                    let parts = value.named_children(&mut c).filter(|p| p.ty() != "comment");
                    Prov::Tuple(parts.map(|p| self.prov(p, 0)).collect())
                }
                _ => self.prov(value, 0),
            };
            self.returns.entry(scope).or_default().push(prov);
            self.invoke(value);
        }
        let lin = self.value_of(value, 0);
        self.program.returns(scope, lin);
        if crate::expr::is_memory_name(&function) || role_of(&function) != Role::Unknown {
            self.note_checkpointed(&function, value, lin, None, node.byte_range());
        }
        self.pend(PendingKind::Return { function }, lin, value.byte_range());
    }
}

impl Walker<'_> {
    /// A memory value set in the branch taken when gradient checkpointing is on: under
    /// `if gradient_checkpointing:`, or the matching arm of `a if use_checkpoint else b`.
    fn note_checkpointed(
        &mut self,
        target: &str,
        right: Node,
        value: crate::expr::program::Id,
        factor: Option<f64>,
        span: Range<usize>,
    ) {
        // A name without a memory unit (`act_mem`) is kept when its role is a part of memory;
        // valuing then keeps it only if a later line prints it as memory.
        if !crate::expr::is_memory_name(target) && role_of(target) == Role::Unknown {
            return;
        }
        let guard = self.guard();
        let mut offloaded = guard.offload;
        let mut factor = factor;
        let value = if guard.checkpointing {
            Some(value)
        } else if right.ty() == "conditional_expression" {
            let mut c = right.walk();
            let kids: Vec<Node> = right.named_children(&mut c).collect();
            match kids.as_slice() {
                [then, cond, otherwise] if Topics::of(self.text(*cond)).checkpointing => {
                    offloaded |= Topics::of(self.text(*cond)).offload;
                    let negated = self.text(*cond).trim_start().starts_with("not ");
                    let arm = unparen(if negated { *otherwise } else { *then });
                    // `x = x * 0.5 if use_checkpoint else x`: the arm rescales the value.
                    let rescales = arm.ty() == "binary_operator"
                        && arm
                            .field("left")
                            .is_some_and(|l| self.text(unparen(l)) == target);
                    if rescales {
                        factor = factor.or_else(|| self.factor(arm));
                    }
                    Some(self.value_of(arm, 0))
                }
                _ => None,
            }
        } else {
            None
        };
        if let Some(value) = value {
            self.pend(
                PendingKind::Checkpointed {
                    target: target.to_string(),
                    factor,
                    offloaded,
                    returned: right.parent().is_some_and(|p| p.ty() == "return_statement"),
                },
                value,
                span,
            );
        }
    }

    /// `x * 0.5`, `x /= 2`: the number a value is scaled by.
    fn factor(&self, node: Node) -> Option<f64> {
        let op = node.field("operator").map(|o| self.text(o))?;
        let k = self.number(node.field("right")?)?;
        match op.trim_end_matches('=') {
            "*" => Some(k),
            "/" | "//" if k != 0.0 => Some(1.0 / k),
            _ => None,
        }
    }
}

/// A count of the elements of the data in hand: `mask.sum()`, `torch.sum(mask)`, `x.numel()`,
/// `torch.count_nonzero(labels != -100)`.
fn is_count_of_data(text: &str) -> bool {
    ["sum(", "numel(", "count_nonzero("]
        .iter()
        .any(|w| text.contains(w))
        && !text.contains(" for ")
}

impl<'s> Walker<'s> {
    /// The text of a call's keyword argument (`reduction="sum"` → `"sum"` with its quotes).
    pub(super) fn keyword_value(&self, call: Node, keyword: &str) -> Option<&'s str> {
        let args = call.field("arguments")?;
        let mut c = args.walk();
        let found = args
            .named_children(&mut c)
            .filter(|a| a.ty() == "keyword_argument")
            .find(|a| a.field("name").is_some_and(|n| self.text(n) == keyword))?;
        found.field("value").map(|v| self.text(v))
    }
}

/// A number, a boolean or a plain string.
fn is_literal(n: Node) -> bool {
    matches!(n.ty(), "integer" | "float" | "true" | "false" | "string")
}

/// The scale a comment says a number counts parameters in: `billions of parameters`, `1.3B
/// params` (the prefilter reads both words as a derived count).
fn comment_scale(comment: &str) -> Option<f64> {
    let c = comment.to_ascii_lowercase();
    if c.contains("billion") && !c.contains("token") {
        return Some(1e9);
    }
    // `7B params`, `1.3B parameters`.
    let b = c.find("b param")?;
    c[..b]
        .ends_with(|ch: char| ch.is_ascii_digit())
        .then_some(1e9)
}

/// The names a file uses as a `GradScaler`, whatever they are called: the receiver of
/// `unscale_(...)`, or of `scale(loss)` whose result is backpropagated (`gs.scale(loss).backward()`).
/// Read from the text before the walk, as a helper may step the scaler above its first use.
pub(super) fn scalers_by_use(src: &str) -> Vec<String> {
    let receiver = |end: usize| receiver_before(src, end);
    let mut names: Vec<String> = Vec::new();
    let bytes = src.as_bytes();
    for at in memchr::memmem::find_iter(bytes, b".unscale_(") {
        names.extend(receiver(at));
    }
    for at in memchr::memmem::find_iter(bytes, b".scale(") {
        let open = at + ".scale".len();
        let mut depth = 0usize;
        let close = bytes[open..].iter().position(|b| {
            match b {
                b'(' => depth += 1,
                b')' => depth = depth.saturating_sub(1),
                _ => {}
            }
            depth == 0
        });
        let after = close.map_or("", |c| src.get(open + c + 1..).unwrap_or(""));
        if after.starts_with(".backward(") {
            names.extend(receiver(at));
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The names a file uses as an optimizer, whatever they are called: the receivers of both
/// `zero_grad(` and `step(` (a model is zeroed but never stepped, a scheduler stepped but never
/// zeroed). Read from the text before the walk, as a helper may zero or step the optimizer its
/// caller builds below it.
pub(super) fn optimizers_by_use(src: &str) -> Vec<String> {
    let receivers = |call: &[u8]| -> Vec<String> {
        memchr::memmem::find_iter(src.as_bytes(), call)
            .filter_map(|at| receiver_before(src, at))
            .collect()
    };
    let zeroed = receivers(b".zero_grad(");
    if zeroed.is_empty() {
        return zeroed;
    }
    let stepped = receivers(b".step(");
    let mut names: Vec<String> = zeroed.into_iter().filter(|n| stepped.contains(n)).collect();
    names.sort();
    names.dedup();
    names
}

/// The dotted name that ends at `end` (`self.opt` before `.step(`), if one does.
pub(super) fn receiver_before(src: &str, end: usize) -> Option<String> {
    let head = &src[..end];
    let start = head
        .char_indices()
        .rfind(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '.'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let name = &head[start..];
    (!name.is_empty() && !name.starts_with('.')).then(|| name.to_string())
}

impl<'s> Walker<'s> {
    /// What an assignment adds one to: `n += 1`, `n = n + 1` or `n = 1 + n` (a name, an
    /// attribute or an item: `self.step += 1`, `state["step"] += 1`).
    pub(super) fn counts_up(&self, assign: Node) -> Option<&'s str> {
        let left = assign.field("left")?;
        if !matches!(left.ty(), "identifier" | "attribute" | "subscript") {
            return None;
        }
        let name = self.text(left);
        let right = unparen(assign.field("right")?);
        let op = assign.field("operator").map(|o| self.text(o));
        let added = match (assign.ty(), op) {
            ("augmented_assignment", Some("+=")) => self.text(right) == "1",
            ("assignment", _) if right.ty() == "binary_operator" => {
                let (a, b) = (right.field("left")?, right.field("right")?);
                let plus = right.field("operator").map(|o| self.text(o)) == Some("+");
                let (a, b) = (self.text(unparen(a)), self.text(unparen(b)));
                plus && ((a == name && b == "1") || (a == "1" && b == name))
            }
            _ => false,
        };
        added.then_some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::{optimizers_by_use, scalers_by_use};

    #[test]
    fn optimizers_are_known_by_zeroing_and_stepping() {
        let src = "def f(sgd, net, sched):\n    sgd.zero_grad()\n    net.zero_grad()\n    sched.step()\n    sgd.step()\n";
        assert_eq!(optimizers_by_use(src), vec!["sgd".to_string()]);
    }

    #[test]
    fn a_scaler_is_known_by_its_use() {
        let src = "gs.scale(loss / k).backward()\nself.amp.unscale_(opt)\nx.scale(2)\néchelle.unscale_(opt)\n";
        assert_eq!(
            scalers_by_use(src),
            vec![
                "gs".to_string(),
                "self.amp".to_string(),
                "échelle".to_string()
            ]
        );
        // Not a name: nothing before the dot, or a call's result.
        assert!(scalers_by_use("—.unscale_(opt)\n").is_empty());
        assert!(scalers_by_use("get().unscale_(opt)\n").is_empty());
    }
}
