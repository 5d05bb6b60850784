//! The loop model's assembly once the file is read: what each training call's receiver is (an
//! optimizer or a model, a prepared scheduler, a framework's own class), the file's helpers
//! inlined, the windows judged, and a checked fix built for each misstep.

use super::*;

impl<'s> Walker<'s> {
    /// Fill the loop facts; returns whether accelerate divides the loss itself, and the
    /// training calls with the file's helpers inlined.
    pub(super) fn assemble_loops(&mut self, tree: &Tree) -> (bool, Vec<CallEvent>) {
        // A `Trainer(...)` of a class the file defines itself is not a framework's.
        for (span, name) in &self.trainer_calls {
            if self.scopes.iter().any(|s| s.is_class && s.name == *name) {
                self.facts.evidence.frameworks.retain(|m| m.span != *span);
            }
        }
        // An engine named so but built from a class the file defines is not DeepSpeed's.
        for (at, recv) in &self.named_engines {
            let own_class = self.instances.get(recv.as_str()).is_some_and(|built| {
                built.iter().any(|(_, class, _)| {
                    let class = last_segment(class);
                    self.scopes.iter().any(|s| s.is_class && s.name == class)
                })
            });
            if own_class {
                self.facts.manual_divisions.retain(|d| d.at != *at);
            }
        }
        // accelerate divides only when it was told to accumulate (its default is 1).
        // Under its DeepSpeed plugin, `accelerator.backward` is the engine's, which divides by
        // the config's accumulation steps.
        let accelerator_accumulates = self
            .accelerators
            .iter()
            .any(|gas| gas.as_deref().is_some_and(|g| g.trim() != "1"));
        let accelerate_divides = accelerator_accumulates
            || memchr::memmem::find(self.src.as_bytes(), b"deepspeed_plugin").is_some();
        // With the default factor, only the DeepSpeed engine under the plugin divides, by its
        // config's factor.
        if !accelerator_accumulates {
            let engine_factor: Vec<bool> = self
                .facts
                .manual_divisions
                .iter()
                .map(|d| {
                    let mut texts = Vec::new();
                    self.gather_owned(&d.divisor, &mut texts);
                    texts.iter().any(|t| t.contains("deepspeed_config"))
                })
                .collect();
            for (d, from_config) in self.facts.manual_divisions.iter_mut().zip(engine_factor) {
                if d.framework == Framework::Accelerate {
                    d.engine_config = true;
                    d.engine_factor = from_config;
                }
            }
        }
        if !self.accelerators.is_empty() && !accelerate_divides {
            // An `Accelerator()` that does not accumulate: its backward is a plain one.
            for ev in &mut self.calls {
                let Some((_, loss, text, prov)) = self
                    .accelerate_backwards
                    .iter()
                    .find(|(call, ..)| *call == ev.call.span)
                else {
                    continue;
                };
                ev.kind = CallKind::Backward {
                    loss: loss.clone(),
                    loss_text: text.clone(),
                    prov: prov.clone(),
                    scaler: false,
                    in_helper: false,
                };
            }
        }
        // A zero_grad of something the file steps (or builds) as an optimizer, and not of a
        // model: what accelerate's prepared optimizer skips between syncs.
        let optimizers: Vec<&str> = self
            .step_receivers
            .iter()
            .chain(&self.optimizer_names)
            .map(String::as_str)
            .collect();
        // What `prepare` is handed and what it binds (`self.sched` in `self.model, self.sched =
        // accelerator.prepare(model, sched)`).
        let prepared: Vec<&str> = self
            .prepares
            .iter()
            .flat_map(|(_, bound, args)| args.iter().chain(bound).copied())
            .collect();
        for ev in &mut self.calls {
            match &mut ev.kind {
                CallKind::ZeroGrad { optimizer } => {
                    if let Some((_, recv)) =
                        self.zero_grads.iter().find(|(s, _)| *s == ev.call.span)
                    {
                        *optimizer = optimizers.contains(&recv.as_str())
                            || last_segment(recv).to_ascii_lowercase().contains("optim");
                    }
                }
                CallKind::SchedulerStep { prepared: p } if !prepared.is_empty() => {
                    if let Some((_, recv)) = self
                        .scheduler_steps
                        .iter()
                        .find(|(s, _)| *s == ev.call.span)
                    {
                        *p = prepared.contains(&recv.as_str());
                    }
                }
                _ => {}
            }
        }
        // A frozen model's gradients (a teacher's, a reference copy's) are not accumulated:
        // clearing them on every micro-step loses nothing.
        let frozen: Vec<Range<usize>> = (self.calls.iter())
            .filter(|ev| matches!(ev.kind, CallKind::ZeroGrad { optimizer: false }))
            .filter_map(|ev| self.zero_grads.iter().find(|(s, _)| *s == ev.call.span))
            .filter(|(_, recv)| self.untrained(recv))
            .map(|(s, _)| s.clone())
            .collect();
        self.calls.retain(|ev| !frozen.contains(&ev.call.span));
        for ev in &mut self.calls {
            if !matches!(ev.kind, CallKind::SchedulerStep { .. }) {
                continue;
            }
            let wraps_optimizer = self.scheduler_steps.iter().any(|(span, recv)| {
                *span == ev.call.span && self.zero_grad_receivers.contains(recv)
            });
            if wraps_optimizer {
                ev.kind = CallKind::Step { scaler: false };
            }
        }
        self.helper_divisions(accelerate_divides);
        self.engine_helper_divisions();
        let calls = self.inlined_calls();
        let scopes: Vec<ScopeInfo> = self
            .scopes
            .iter()
            .map(|s| ScopeInfo {
                assigned: s.assigned.iter().chain(&s.params).cloned().collect(),
            })
            .collect();
        // Not bound in a function (a parameter or a `global` rebinding shadows the constant).
        let single_factors: Vec<&str> = self
            .module_numbers
            .iter()
            .filter(|(name, v)| {
                **v <= 1.0
                    && !self
                        .scopes
                        .iter()
                        .skip(1)
                        .any(|s| s.assigned.iter().chain(&s.params).any(|a| a == *name))
            })
            .map(|(name, _)| *name)
            .collect();
        let recorded = Recorded {
            single_factors: &single_factors,
            optimizer_models: &self.optimizer_models,
            src: self.src,
            unscales: contains_word(self.src, "unscale_"),
            loops: &self.loops,
            conds: &self.conds,
            scopes: &scopes,
            calls: &calls,
            // `accumulate()` in a file that builds no Accelerator: it is built to accumulate.
            accelerate_accumulates: accelerate_divides
                || (self.accelerators.is_empty() && !self.accumulate_at.is_empty()),
            // Configured here, not merely read (`accelerator.state.deepspeed_plugin`).
            accelerate_deepspeed: contains_word(self.src, "DeepSpeedPlugin(")
                || contains_word(self.src, "deepspeed_plugin="),
            accumulate_blocks: &self.accumulate_at,
            // An Accelerator built elsewhere (a helper of the project) tells its factor as
            // `accelerator.gradient_accumulation_steps`.
            accelerate_factor: self
                .accelerators
                .iter()
                .flatten()
                .find(|g| g.trim() != "1")
                .cloned()
                .or_else(|| {
                    let receiver = self.accumulate_receiver.as_ref()?;
                    self.accelerators
                        .is_empty()
                        .then(|| format!("{receiver}.gradient_accumulation_steps"))
                }),
        };
        let mut assembled = loops::assemble(&recorded);
        for lp in &mut assembled.loops {
            lp.factor_value = parse_number(&lp.factor)
                .or_else(|| self.module_numbers.get(lp.factor.as_str()).copied());
        }
        // A schedule whose length divides by a loop's factor, whatever the factor is called,
        // counts optimizer steps.
        // A factor kept on the object (`self.acc = acc`) is divided by under the name it was
        // handed in as.
        if assembled.loops.iter().any(|lp| {
            let handed = self.assigned_text.get(lp.factor.as_str()).copied();
            self.schedule_lengths
                .iter()
                .any(|t| divides_by(t, &lp.factor) || handed.is_some_and(|h| divides_by(t, h)))
        }) || self.length_bounds_optimizer_steps()
            || assembled.loops.iter().any(|lp| {
                lp.updates
                    .as_deref()
                    .is_some_and(|u| self.length_counts_updates(u))
            })
        {
            self.facts.schedule_in_optimizer_steps = true;
        }
        self.match_micro_schedules(&mut assembled.loops);
        self.facts.links.stepped = self.imported_schedules(&assembled.loops);
        // The counters of optimizer steps of each loop and what they measure, found once for
        // the schedules (GA004) and the counts (BS004).
        let counter_uses: Vec<Vec<batch_model::CounterUse>> = assembled
            .loops
            .iter()
            .map(|lp| self.step_counter_uses(tree, lp))
            .collect();
        self.match_counter_schedules(tree, &mut assembled.loops, &counter_uses);
        self.match_bounded_schedules(tree, &mut assembled.loops, &counter_uses);
        let products = self.global_batches(&assembled.loops);
        self.facts.global_batches = self.confirmed_products(tree, &assembled.loops, products);
        self.facts.sample_schedules = self.sample_schedules(&assembled.loops);
        self.facts.loader_batches = self.loader_batches(tree, &assembled.loops);
        self.facts.batch_equations = self.batch_equations(tree, &assembled.loops, &counter_uses);
        self.facts.loader_keys = self.loader_keys();
        if !assembled.loops.is_empty() {
            self.facts.token_means = self.token_means(tree);
        }
        self.facts.loops = assembled.loops;
        self.facts.missteps = assembled
            .missteps
            .iter()
            .map(|f| Misstep {
                kind: f.misstep,
                call: f.call.span.clone(),
                path: f.path.clone(),
                factor: f.factor.clone(),
                related: f.related.clone(),
                accelerate: f.accelerate,
                micro: f.micro,
                fix: self
                    .verify_fixes
                    .then(|| {
                        moves::fix(
                            &moves::Model {
                                src: self.src,
                                tree,
                                recorded: &recorded,
                                cond_nodes: &self.cond_ids,
                                found: &assembled.missteps,
                            },
                            f,
                        )
                    })
                    .flatten(),
            })
            .collect();
        (accelerate_divides, calls)
    }
}

impl Walker<'_> {
    /// What a `with` statement calls `.accumulate(...)` on (`accelerator` in
    /// `with accelerator.accumulate(model), autocast():`).
    pub(super) fn accumulate_receiver_of(&self, with: Node) -> Option<String> {
        let mut c = with.walk();
        let clause = with.children(&mut c).find(|c| c.ty() == "with_clause")?;
        let mut c = clause.walk();
        let items: Vec<Node> = clause.named_children(&mut c).collect();
        items.into_iter().find_map(|item| {
            let call = item.field("value").unwrap_or(item);
            let call = if call.ty() == "as_pattern" {
                call.named_child(0)?
            } else {
                call
            };
            let function = call.field("function").filter(|_| call.ty() == "call")?;
            let method = function.field("attribute")?;
            (self.text(method) == "accumulate")
                .then(|| function.field("object"))
                .flatten()
                .map(|o| self.text(o).to_string())
        })
    }

    /// A loss a helper of the file divides by the factor (`return out.loss / GA`), handed to
    /// a framework that divides again: reported at the framework's backward, without a fix.
    fn helper_divisions(&mut self, accelerate_divides: bool) {
        if !accelerate_divides {
            return;
        }
        let mut found = Vec::new();
        for (call, _, _, prov) in &self.accelerate_backwards {
            // Only a loss a helper returns: divisions written in this function are the ones
            // `division_of` reads, arms and all.
            if self.facts.manual_divisions.iter().any(|d| d.at == *call)
                || !matches!(prov, Prov::Local { .. })
            {
                continue;
            }
            let resolved = self.resolve(prov, None, 0);
            let mut divisors = Vec::new();
            resolved.divisors(&mut divisors);
            if let Some(d) = divisors.into_iter().find(|d| self.is_factor(d)) {
                found.push(ManualDivision {
                    framework: Framework::Accelerate,
                    at: call.clone(),
                    divisor: d.to_string(),
                    division: None,
                    engine_config: false,
                    engine_factor: false,
                });
            }
        }
        self.facts.manual_divisions.extend(found);
    }
}

impl Walker<'_> {
    /// A DeepSpeed engine's backward in a helper, handed a loss that a call site divided by the
    /// factor (`out = forward_step(...)`, which returns `loss / n_micro`, then
    /// `backward_step(out, model, args)`): the engine divides it again.
    fn engine_helper_divisions(&mut self) {
        let mut found = Vec::new();
        for (at, scope, param) in &self.engine_param_backwards {
            let Some(params) = self.scopes.get(*scope).map(|s| &s.params) else {
                continue;
            };
            let divisor = self
                .invokes
                .iter()
                .filter(|i| self.function(&i.callee) == Some(*scope))
                .find_map(|i| {
                    let (_, given, ..) = super::provenance::given_for(
                        params,
                        &i.args,
                        |(k, ..)| k.as_deref(),
                        param,
                    )?;
                    // Divided on every path (an arm that returns the loss whole, as under the
                    // same flag, leaves it to the engine).
                    let resolved = self.resolve(given, None, 0);
                    if !matches!(resolved, Prov::DividedBy(_)) {
                        return None;
                    }
                    let mut divisors = Vec::new();
                    resolved.divisors(&mut divisors);
                    // The micro-batches of a step are the engine's window (Megatron's
                    // `get_num_microbatches()`).
                    divisors
                        .into_iter()
                        .find(|d| {
                            let window = |t: &str| self.is_factor(t) || names_micro_batches(t);
                            (window(d) || self.handed_for(d).iter().any(|t| window(t)))
                                && !self.divided_off_engine.iter().any(|o| o == d)
                        })
                        .map(str::to_string)
                });
            if let Some(divisor) = divisor {
                found.push(ManualDivision {
                    framework: Framework::DeepSpeed,
                    at: at.clone(),
                    divisor,
                    division: None,
                    engine_config: false,
                    engine_factor: false,
                });
            }
        }
        self.facts.manual_divisions.extend(found);
    }
}

impl<'s> Walker<'s> {
    /// What the file's calls hand a function of the file for its parameter `name` (the
    /// divisor of `loss / num_mbs` in `def forward_step(..., num_mbs)`), as written, and what
    /// a name handed is bound to (`n_micro = get_num_microbatches()`).
    fn handed_for(&self, name: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for i in &self.invokes {
            let Some(scope) = self.function(&i.callee) else {
                continue;
            };
            let params = &self.scopes[scope].params;
            if !params.iter().any(|p| p == name) {
                continue;
            }
            let given = super::provenance::given_for(params, &i.args, |(k, ..)| k.as_deref(), name);
            if let Some((.., text)) = given {
                out.push(text.as_str());
                out.extend(self.assigned_text.get(text.as_str()).copied());
            }
        }
        out
    }
}

/// `text` divides by `factor` (as a whole word, alone or in a product):
/// `len(dl) // k * epochs`, `math.ceil(n / k)`, `n // (k * world)`.
fn divides_by(text: &str, factor: &str) -> bool {
    let f = factor.trim();
    if f.is_empty() {
        return false;
    }
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'.';
    memchr::memmem::find_iter(bytes, f.as_bytes()).any(|at| {
        let whole = !bytes.get(at + f.len()).is_some_and(|b| word(*b))
            && !at
                .checked_sub(1)
                .and_then(|i| bytes.get(i))
                .is_some_and(|b| word(*b));
        whole && in_divisor(&bytes[..at])
    })
}

/// What precedes a word puts it in a divisor: a `/` before it in its product, across the
/// parentheses it sits in.
fn in_divisor(before: &[u8]) -> bool {
    let mut depth = 0usize;
    for &c in before.iter().rev() {
        match c {
            b')' => depth += 1,
            b'(' if depth > 0 => depth -= 1,
            b'/' if depth == 0 => return true,
            b'+' | b'-' | b',' | b'=' | b'<' | b'>' if depth == 0 => return false,
            _ => {}
        }
    }
    false
}
