//! Calls: optimizer, framework and precision evidence, the training calls the loop model reads
//! (steps, backwards, zeroing, schedulers, clips, unscales) and helpers' call sites.

use super::*;
use crate::frontend::fields::{PyField, PyKind};

impl<'s> Walker<'s> {
    // ---- calls and evidence ------------------------------------------------------------------

    /// The call a keyword argument is given to is named `…name`.
    fn callee_ends_with(&self, keyword: Node, name: &str) -> bool {
        keyword
            .parent()
            .and_then(|args| args.parent())
            .and_then(|call| call.field("function"))
            .is_some_and(|f| self.text(f).ends_with(name))
    }

    pub(super) fn keyword(&mut self, node: Node) {
        let (Some(name), Some(value)) = (node.field("name"), node.field("value")) else {
            return;
        };
        let key = self.text(name);
        let v = self.text(value);
        // What a framework is told to accumulate over, as written: a loss divided by it is
        // divided by the factor, whatever the name.
        let factor_key = match key {
            "gradient_accumulation_steps" | "accumulate_grad_batches" => true,
            "num_steps" => self.callee_ends_with(node, "GradientAccumulationPlugin"),
            _ => false,
        };
        if factor_key && v.len() < 80 && !self.factor_exprs.iter().any(|f| f == v) {
            self.factor_exprs.push(v.to_string());
        }
        match key {
            "compute_loss_func" => self.note_loss_func(node, value),
            // accelerate's factor is not a Trainer's: accelerate divides the loss itself.
            "gradient_accumulation_steps" if !self.callee_ends_with(node, "Accelerator") => {
                self.note_accumulation_setting(value)
            }
            "batch_size" => self.note_loader_batch(node, value),
            _ => self.note_dataset(key, v),
        }
        if value.ty() == "string" || matches!(v, "True" | "False") {
            flag_evidence(
                key,
                &v.to_ascii_lowercase(),
                node.byte_range(),
                &mut self.facts.evidence,
            );
        } else if matches!(value.ty(), "integer" | "float") {
            // `lora_r=16`: a rank given is LoRA in use; `zero_stage=2` a stage.
            lora_setting(key, v, node.byte_range(), &mut self.facts.evidence);
            crate::frontend::regime::flag(
                &key.to_ascii_lowercase(),
                &v.to_ascii_lowercase(),
                node.byte_range(),
                &mut self.facts.evidence,
            );
        } else if value.ty() == "attribute" && v.len() < 80 {
            // `zero_stage=2`, `sharding_strategy=ShardingStrategy.SHARD_GRAD_OP`; a field read
            // through an instance (`plan.strategy`) holds what the class body gives it.
            let field = last_segment(v);
            let given = match self.assigned_text.get(field) {
                Some(bound) if bound.len() < 80 && v.len() > field.len() => bound,
                _ => v,
            };
            crate::frontend::regime::flag(
                &key.to_ascii_lowercase(),
                &given.to_ascii_lowercase(),
                node.byte_range(),
                &mut self.facts.evidence,
            );
        } else if let Some(bound) = self.assigned_text.get(v).filter(|b| b.len() < 80) {
            // `sharding_strategy=strategy` after `strategy = ShardingStrategy.HYBRID_SHARD`.
            crate::frontend::regime::flag(
                &key.to_ascii_lowercase(),
                &bound.to_ascii_lowercase(),
                node.byte_range(),
                &mut self.facts.evidence,
            );
        }
        // `torch.autocast(..., dtype=torch.bfloat16)` picks the compute dtype, not the weights';
        // a string given to `torch_dtype=` was read above, as a flag.
        let dtype = matches!(key, "torch_dtype" | "dtype")
            && !(key == "torch_dtype" && value.ty() == "string");
        let loaded = if v.contains("bfloat16") || v.contains("float16") {
            Some(Precision::Pure16).filter(|_| !self.callee_ends_with(node, "autocast"))
        } else {
            Some(Precision::Fp32).filter(|_| v.ends_with("float32"))
        };
        if let Some(value) = loaded.filter(|_| dtype) {
            self.facts.evidence.precision.push(Mention {
                value,
                span: node.byte_range(),
            });
        }
        if key == "load_in_4bit" || key == "load_in_8bit" {
            self.facts.evidence.lora.push(node.byte_range());
        }
    }

    pub(super) fn call(&mut self, node: Node) {
        let Some(func) = node.field("function") else {
            return;
        };
        let callee = self.text(func);
        // Names are compared with short words: read from the callee's end (`f(1)(1)(1)...` has no
        // dot, and each level reading its whole callee is quadratic).
        let last = last_segment(clip_tail(callee));
        let lower = last.to_ascii_lowercase();
        let span = node.byte_range();
        let args = node.field("arguments");
        if last.ends_with("GradScaler") {
            self.facts.builds_scaler = true;
        }
        if self.trainer_loss.active {
            self.trainer_loss.note_build(last);
        }
        if self.loop_model
            || (self.value_model && matches!(last, "parameters" | "named_parameters"))
        {
            self.note_hook_call(node, callee, last);
            self.note_schedule_call(node, last);
            if last == "next" {
                self.note_next(node);
            }
        }
        self.note_batch_call(node, last, &lower);
        if self.loop_model && OPTIMIZER_CLASSES.contains(&lower.as_str()) && starts_upper(last) {
            self.note_optimized(node);
        }
        if callee == "print" && self.value_model {
            self.printed_arguments(node);
        }
        if self.value_model && matches!(last, "int" | "max" | "min" | "round" | "floor" | "ceil") {
            self.rounded_headroom(node);
        }
        if last == "add_argument" {
            self.argparse_default(node);
            crate::frontend::python_config::argparse_default(node, self.src, &mut self.facts);
        }
        let src = self.src;
        let t = |n: Node| src.get(n.byte_range()).unwrap_or("");
        let fp32 = self.value_model
            && match last {
                "float" => args.is_some_and(|a| a.named_child_count() == 0),
                "to" => args.is_some_and(|a| clip(t(a)).ends_with("float32)")),
                _ => false,
            };
        if fp32 {
            self.note_fp32_cast(node, func);
        }
        // torchvision's and timm's constructors build weights in torch's default dtype, fp32;
        // a cast or a dtype given elsewhere is evidence of its own.
        let vision = self.builds_vision_model(callee);
        let scope = self.scope();
        let ev = &mut self.facts.evidence;
        if vision && !args.is_some_and(|a| t(a).contains("dtype")) {
            ev.precision.push(Mention {
                value: Precision::Fp32,
                span: span.clone(),
            });
        }

        if OPTIMIZER_CLASSES.contains(&lower.as_str()) && starts_upper(last) {
            let mut m = OptimizerMention {
                name: lower.clone(),
                momentum: None,
                amsgrad: false,
                beta1: false,
                centered: false,
                name_only: false,
            };
            if let Some(args) = args {
                let mut c = args.walk();
                for a in args.named_children(&mut c) {
                    if a.ty() != "keyword_argument" {
                        continue;
                    }
                    let k = a.field("name").map(t).unwrap_or("");
                    let v = a.field("value").map(t).unwrap_or("");
                    match k {
                        "momentum" => m.momentum = Some(parse_number(v).unwrap_or(f64::NAN)),
                        "amsgrad" => m.amsgrad = v == "True",
                        "beta1" => m.beta1 = v != "None",
                        "centered" => m.centered = v == "True",
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
            | "DeepSpeedStrategy" => {
                ev.sharding.push(span.clone());
                // FSDP's default strategy is FULL_SHARD; FSDP2's `fully_shard` has its semantics.
                let strategy_given = args.is_some_and(|a| clip(t(a)).contains("sharding_strategy"));
                if matches!(last, "FullyShardedDataParallel" | "FSDP" | "fully_shard")
                    && !strategy_given
                {
                    ev.shards.push(Mention {
                        value: Sharding::Stage(3),
                        span: span.clone(),
                    });
                }
            }
            "gradient_checkpointing_enable"
            | "enable_gradient_checkpointing"
            | "apply_activation_checkpointing"
            | "checkpoint_sequential" => ev.checkpointing.push(Mention {
                value: Checkpointing::On,
                span: span.clone(),
            }),
            "checkpoint" if callee.contains("utils.checkpoint") => ev.checkpointing.push(Mention {
                value: Checkpointing::On,
                span: span.clone(),
            }),
            "OffloadActivations" | "offload_wrapper" => ev.checkpointing.push(Mention {
                value: Checkpointing::Offloaded,
                span: span.clone(),
            }),
            _ if super::sync_flag::wraps_in_ddp(last) => {
                self.facts.ddp_wraps.push(span.clone());
                self.ddp_wrap_scopes.push(scope);
            }
            "Accelerator" => ev.frameworks.push(Mention {
                value: Framework::Accelerate,
                span: span.clone(),
            }),
            "Trainer" | "Seq2SeqTrainer" | "SFTTrainer" | "DPOTrainer" | "GRPOTrainer" => {
                ev.trains.push(span.clone());
                self.trainer_calls.push((span.clone(), last.to_string()));
                let lightning = callee.contains("lightning")
                    || callee.starts_with("pl.")
                    || callee.starts_with("L.")
                    || self
                        .imports
                        .get(callee)
                        .is_some_and(|(module, _)| module.contains("lightning"));
                ev.frameworks.push(Mention {
                    value: if lightning {
                        Framework::Lightning
                    } else {
                        Framework::HfTrainer
                    },
                    span: span.clone(),
                });
                // Lightning trains in fp32 ("32-true") unless the Trainer is given a precision.
                let given = args.is_some_and(|a| {
                    let text = t(a);
                    text.contains("precision") || text.contains("**")
                });
                if lightning && args.is_some() && !given {
                    ev.precision.push(Mention {
                        value: Precision::Fp32,
                        span: span.clone(),
                    });
                }
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
            let gas = self.accelerator_factor(node);
            self.note_built_accelerator(gas.as_ref());
            self.accelerators.push(gas);
        }
        self.training_call(node, func, last);
    }

    /// The accumulation factor an `Accelerator(...)` call is built with, as written: its
    /// `gradient_accumulation_steps`, a plugin's `num_steps`, or what the dict it is handed
    /// (`**kwargs`) sets.
    pub(super) fn accelerator_factor(&self, call: Node) -> Option<String> {
        let args = call.field("arguments")?;
        let mut c = args.walk();
        let kw = args.named_children(&mut c).find(|k| {
            k.ty() == "keyword_argument"
                && k.field("name").map(|n| self.text(n)).is_some_and(|n| {
                    n == "gradient_accumulation_steps" || n == "gradient_accumulation_plugin"
                })
        });
        if let Some(k) = kw {
            let value = self.text(k.field("value")?);
            return Some(match k.field("name").map(|n| self.text(n)) {
                Some("gradient_accumulation_plugin") => format!("{value}.num_steps"),
                _ => value.to_string(),
            });
        }
        let mut c = args.walk();
        let splat = args
            .named_children(&mut c)
            .find(|k| k.ty() == "dictionary_splat")?;
        let name = self.text(splat).trim_start_matches('*').trim();
        factor_in_text(self.assigned_text.get(name)?)
    }

    /// A call that may run a helper of this file as a statement (`self.backward(loss)`,
    /// `loss = train_step(batch)`): its training calls are inlined here once the file is read.
    /// Called by the statements that hold the call (no `parent()` lookups: they cost the depth).
    pub(super) fn invoke(&mut self, node: Node) {
        self.invoke_at(node, 0)
    }

    fn invoke_at(&mut self, node: Node, depth: usize) {
        if depth > 8 {
            return;
        }
        let node = unparen(node);
        // `loss = self.step_loss(mb) / n`: the helper runs within the arithmetic;
        // `return model, Callback(opt)`: each part runs.
        if matches!(node.ty(), "binary_operator" | "expression_list" | "tuple") {
            let mut c = node.walk();
            let parts: Vec<Node> = node.named_children(&mut c).take(8).collect();
            for part in parts {
                self.invoke_at(part, depth + 1);
            }
            return;
        }
        if node.ty() != "call" {
            return;
        }
        let Some(func) = node.field("function") else {
            return;
        };
        // A helper called in the arguments (`history.append(self.step(batch))`) runs first.
        if let Some(args) = node.field("arguments") {
            let mut c = args.walk();
            let inner: Vec<Node> = args
                .named_children(&mut c)
                .map(|a| match a.ty() {
                    "keyword_argument" => a.field("value").unwrap_or(a),
                    _ => a,
                })
                .filter(|a| matches!(unparen(*a).ty(), "call" | "binary_operator"))
                .take(4)
                .collect();
            for a in inner {
                self.invoke_at(a, depth + 1);
            }
        }
        // A helper whose result a method is called on (`self.step(batch).item()`) runs first.
        if let Some(object) = func
            .field("object")
            .filter(|o| func.ty() == "attribute" && unparen(*o).ty() == "call")
        {
            self.invoke_at(object, depth + 1);
        }
        let Some(callee) = self.callee(func).filter(|c| !c.instance) else {
            // Another module's function (`du.wrap(model)`): it may hand back a wrapped model.
            let object = func.field("object").filter(|_| func.ty() == "attribute");
            if object.is_some_and(|o| o.ty() != "call" && self.text(o) != "self") {
                let at = (self.scope(), func.byte_range(), node.byte_range());
                self.module_calls.push(at);
            }
            return;
        };
        // Builtins and common library calls are never the file's helpers.
        if callee.class.is_none() && BUILTINS.contains(&callee.name.as_str()) {
            return;
        }
        let mut args = Vec::new();
        if let Some(a) = node.field("arguments") {
            let mut c = a.walk();
            for arg in a.named_children(&mut c) {
                let (key, value) = match arg.ty() {
                    "keyword_argument" => (
                        arg.field("name").map(|n| self.text(n).to_string()),
                        arg.field("value"),
                    ),
                    "comment" => continue,
                    _ => (None, Some(arg)),
                };
                let Some(value) = value else {
                    continue;
                };
                args.push((
                    key,
                    self.prov(value, 0),
                    value.byte_range(),
                    self.text(value).to_string(),
                ));
            }
        }
        self.invokes.push(Invoke {
            ctx: self.ctx(node.start_byte()),
            callee,
            args,
            call: node.byte_range(),
        });
    }

    /// Calls the loop model reads: steps, backwards, zeroing, schedulers, clipping, unscaling.
    pub(super) fn training_call(&mut self, node: Node, func: Node, last: &str) {
        // `clip_grad_norm_(...)` may be imported by name; everything else is a method.
        let clip = is_clip(last) || self.clip_names.iter().any(|n| n == self.text(func));
        if func.ty() != "attribute" && !clip {
            return;
        }
        let span = node.byte_range();
        // A receiver may be a long call chain: only its tail names it.
        let recv = func
            .field("object")
            .map(|o| clip_tail(self.text(o)))
            .unwrap_or("");
        let recv_last = last_segment(recv).to_ascii_lowercase();
        let args = node.field("arguments");
        let positional = positionals(args).len();
        let kind = match last {
            "step" if self.is_optimizer_ref(recv) || self.is_scaler(recv) => {
                self.facts.evidence.trains.push(span.clone());
                let scaler = self.is_scaler(recv);
                if !scaler {
                    self.step_receivers.push(recv.to_string());
                }
                CallKind::Step { scaler }
            }
            "step"
                if positional == 0
                    && !recv_last.contains("noise")
                    && (recv_last.contains("sched")
                        || self.scheduler_names.iter().any(|n| n == recv)) =>
            {
                self.scheduler_steps.push((span.clone(), recv.to_string()));
                CallKind::SchedulerStep { prepared: true }
            }
            "backward" | "manual_backward" => {
                self.facts.evidence.trains.push(span.clone());
                // `accelerator.backward(loss)`, `engine.backward(loss)`,
                // `booster.backward(loss=loss, optimizer=optimizer)`: the framework's backward,
                // which takes the loss as an argument; `loss.backward()` takes none (its
                // keywords are `gradient`, `retain_graph`, `create_graph` and `inputs`).
                let arg = args.and_then(|a| {
                    let mut c = a.walk();
                    let children: Vec<Node> = a.named_children(&mut c).collect();
                    let first = children
                        .iter()
                        .find(|n| !matches!(n.ty(), "keyword_argument" | "comment"));
                    let keyword = || {
                        children.iter().find_map(|n| {
                            let name = n.field("name")?;
                            (n.ty() == "keyword_argument" && self.text(name) == "loss")
                                .then(|| n.field("value"))?
                        })
                    };
                    first.copied().or_else(keyword)
                });
                match arg {
                    None if last == "backward" => {
                        let Some(recv) = func.field("object") else {
                            return;
                        };
                        match self.backward(recv) {
                            Some(kind) => kind,
                            None => return,
                        }
                    }
                    None => return,
                    // Lightning's `manual_backward` and Fabric's `backward` do not divide.
                    Some(loss) if last == "manual_backward" || recv_last.contains("fabric") => {
                        CallKind::Backward {
                            loss: loss.byte_range(),
                            loss_text: self.text(loss).to_string(),
                            prov: self.prov(loss, 0),
                            scaler: false,
                            in_helper: false,
                        }
                    }
                    Some(loss) => {
                        if self.is_accelerator(recv) {
                            self.accelerate_backwards.push((
                                span.clone(),
                                loss.byte_range(),
                                self.text(loss).to_string(),
                                self.prov(loss, 0),
                            ));
                        }
                        self.framework_backward(node, recv);
                        CallKind::FrameworkBackward
                    }
                }
            }
            "zero_grad" => {
                self.zero_grad_receivers.push(recv.to_string());
                self.zero_grads.push((span.clone(), recv.to_string()));
                CallKind::ZeroGrad { optimizer: true }
            }
            // A framework's step that is handed the optimizer (`engine.optimizer_step(loss,
            // model, optimizer)`), and its backward that is handed the loss.
            "optimizer_step" if self.hands_optimizer(args) => {
                self.facts.evidence.trains.push(span.clone());
                CallKind::Step { scaler: false }
            }
            "backward_loss" if positional >= 1 => {
                self.facts.evidence.trains.push(span.clone());
                CallKind::FrameworkBackward
            }
            // `clip_grad_norm_`, `clip_grad_value_`, and callables built to clip gradients
            // (`self.gradient_clipper(model)`, `fsdp2_clip_grad_norm_(...)`), given something
            // to clip.
            _ if clip
                && positional + usize::from(args.is_some_and(|a| a.named_child_count() > 0))
                    >= 1 =>
            {
                CallKind::Clip {
                    framework: self.is_accelerator(recv) || recv_last.contains("fabric"),
                }
            }
            // The call as written, without spaces, tells the optimizers (and scalers) apart.
            "unscale_" => CallKind::Unscale {
                key: self.text(node).split_whitespace().collect(),
            },
            "update" if positional <= 1 && self.is_scaler(recv) => CallKind::ScalerUpdate,
            // Opacus accumulates clipped per-sample gradients and divides by the samples seen.
            "virtual_step" => CallKind::GradRescale,
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
            .filter(|p| p.ty() == "expression_statement" && p.byte_range() == span)
            .map(|p| p.byte_range());
        self.calls.push(CallEvent {
            ctx,
            kind,
            order: (span.start, 0),
            inlined: false,
            site_loops: 0,
            origin: span.clone(),
            depth: 0,
            call: Call { span, statement },
        });
    }

    /// `accelerator.backward(loss / n)` or `engine.backward(loss)` after `loss = loss / n`: a
    /// candidate for double scaling, judged once the whole file is read.
    pub(super) fn framework_backward(&mut self, node: Node, recv: &str) {
        // Under `if args.deepspeed:` (DeepSpeed's own `--deepspeed` flag), the model is its engine.
        let under_flag = || {
            self.ctx(node.start_byte()).branches.iter().any(|b| {
                b.taken
                    && self
                        .conds
                        .get(b.cond)
                        .is_some_and(|c| last_segment(c.text.trim()) == "deepspeed")
            })
        };
        let framework = if self.is_accelerator(recv) {
            Framework::Accelerate
        } else if self.engine_names.iter().any(|n| n == recv) || under_flag() {
            Framework::DeepSpeed
        } else if last_segment(recv).to_ascii_lowercase().contains("engine") {
            self.named_engines
                .push((node.byte_range(), recv.to_string()));
            Framework::DeepSpeed
        } else {
            return;
        };
        let Some(args) = node.field("arguments") else {
            return;
        };
        let mut c = args.walk();
        let kids: Vec<Node> = args.named_children(&mut c).collect();
        // `scale_wrt_gas=False`: the engine does not divide.
        if kids.iter().any(|k| {
            k.ty() == "keyword_argument"
                && k.field("name").map(|n| self.text(n)) == Some("scale_wrt_gas")
        }) {
            return;
        }
        // The loss, positional or by keyword (`accelerator.backward(loss=scaled)`).
        let by_keyword = || {
            kids.iter().find_map(|k| {
                (k.field("name").map(|n| self.text(n)) == Some("loss"))
                    .then(|| k.field("value"))
                    .flatten()
            })
        };
        let Some(loss) = kids
            .iter()
            .find(|k| k.ty() != "keyword_argument")
            .copied()
            .or_else(by_keyword)
        else {
            return;
        };
        // Handed in by the caller: judged with each call site's argument.
        if framework == Framework::DeepSpeed {
            if let Prov::Param(name) = self.prov(loss, 0) {
                let scope = self.scope();
                self.engine_param_backwards
                    .push((node.byte_range(), scope, name));
            }
        }
        if let Some((divisor, division)) = self.division_of(loss) {
            self.facts.manual_divisions.push(ManualDivision {
                engine_config: false,
                engine_factor: false,
                framework,
                at: node.byte_range(),
                divisor,
                division: Some(division),
            });
        }
    }

    /// An `Accelerator`: a name bound to one, or one named for it (`self.accelerator`, built
    /// elsewhere).
    fn is_accelerator(&self, recv: &str) -> bool {
        self.accelerator_names.iter().any(|n| n == recv)
            || last_segment(recv)
                .to_ascii_lowercase()
                .contains("accelerator")
    }

    /// One of the call's arguments is an optimizer.
    fn hands_optimizer(&self, args: Option<Node>) -> bool {
        let Some(args) = args else {
            return false;
        };
        let mut c = args.walk();
        let found = args.named_children(&mut c).any(|a| {
            let value = match a.ty() {
                "keyword_argument" => a.field("value"),
                _ => Some(a),
            };
            value.is_some_and(|v| {
                let t = self.text(v);
                self.is_optimizer_ref(t) || last_segment(t).to_ascii_lowercase().contains("optim")
            })
        });
        found
    }

    pub(super) fn is_optimizer_ref(&self, recv: &str) -> bool {
        if self.optimizer_names.iter().any(|n| n == recv) {
            return true;
        }
        // A DeepSpeed engine is zeroed and stepped too, but steps on every micro-batch.
        if self.optimizers_by_use.iter().any(|n| n == recv)
            && !self.engine_names.iter().any(|n| n == recv)
        {
            return true;
        }
        let last = last_segment(recv).to_ascii_lowercase();
        (last.contains("optim")
            || last == "opt"
            || last.starts_with("opt_")
            || last.ends_with("_opt"))
            && !last.contains("sched")
    }

    /// A `GradScaler`: bound to one (`self.amp = torch.amp.GradScaler()`), or named for one.
    fn is_scaler(&self, recv: &str) -> bool {
        last_segment(recv).to_ascii_lowercase().contains("scaler")
            || self.scaler_names.iter().any(|n| n == recv)
    }

    /// `X.backward()`: X is the loss, or `scaler.scale(loss)`.
    pub(super) fn backward(&self, recv: Node) -> Option<CallKind> {
        let mut recv = unparen(recv);
        let mut loss = recv;
        let mut scaler = false;
        if recv.ty() == "call" {
            let f = recv.field("function");
            let f_text = f.map(|f| self.text(f)).unwrap_or("");
            // `scaler.scale(loss)`, or Megatron's mixed-precision `optimizer.scale_loss(loss)`:
            // the loss times a loss scale, which the scaler's or the optimizer's `step` takes
            // off again.
            let scaled = match last_segment(f_text) {
                "scale" => true,
                "scale_loss" => f
                    .and_then(|f| f.field("object"))
                    .is_some_and(|o| self.is_optimizer_ref(self.text(o))),
                _ => false,
            };
            if scaled {
                scaler = last_segment(f_text) == "scale";
                let arg = recv.field("arguments").and_then(|a| a.named_child(0))?;
                loss = unparen(arg);
                recv = loss;
            } else if matches!(last_segment(f_text), "mean" | "sum") {
                if let Some(obj) = f.and_then(|f| f.field("object")) {
                    loss = unparen(obj);
                }
            }
        }
        Some(CallKind::Backward {
            loss: loss.byte_range(),
            loss_text: self.text(loss).to_string(),
            prov: self.prov(recv, 0),
            scaler,
            in_helper: false,
        })
    }

    /// `parser.add_argument("--optim", default="adamw")`.
    pub(super) fn argparse_default(&mut self, node: Node) {
        let Some(args) = node.field("arguments") else {
            return;
        };
        let mut c = args.walk();
        let mut flag = None;
        let mut default = None;
        for a in args.named_children(&mut c) {
            match a.ty() {
                "string" if flag.is_none() => {
                    flag = Some(self.text(a).trim_matches(['"', '\'']).to_string())
                }
                "keyword_argument" => {
                    let k = a.field("name").map(|n| self.text(n));
                    if k == Some("default") {
                        default = a.field("value");
                    }
                }
                _ => {}
            }
        }
        if let (Some(flag), Some(d)) = (flag, default) {
            if d.ty() == "string" {
                let v = self.text(d).to_string();
                flag_evidence(&flag, &v, d.byte_range(), &mut self.facts.evidence);
            } else if let Some(v) = self.number(d) {
                // `--gpu-memory-gb 24`, `--num-params 7e9`: a default the run takes unless its
                // launch says otherwise, like a module constant.
                let name = flag.trim_start_matches('-').replace('-', "_");
                let lin = crate::expr::Lin::constant(v, None);
                self.facts.note_value(&name, &lin, d.byte_range(), true);
                self.count_flag(&name, v);
            }
        }
    }
}

impl<'s> Walker<'s> {
    /// A torchvision or timm model constructor, as written or imported (`resnet50` after `from
    /// torchvision.models import resnet50`, `models.vit_b_16` after `from torchvision import
    /// models`).
    fn builds_vision_model(&self, callee: &str) -> bool {
        let vision = |q: &str| q.starts_with("torchvision.models.") || q == "timm.create_model";
        if vision(callee) {
            return true;
        }
        let (first, rest) = callee.split_once('.').unwrap_or((callee, ""));
        match self.imports.get(first) {
            Some((module, name)) if module.starts_with("torchvision") || module == "timm" => {
                let parts = [Some(module.as_str()), name.as_deref(), Some(rest)];
                let q: Vec<&str> = parts
                    .into_iter()
                    .flatten()
                    .filter(|p| !p.is_empty())
                    .collect();
                vision(&q.join("."))
            }
            _ => false,
        }
    }

    /// `--params 70e9`: a flag whose name is nothing but a count's, given a model's number of
    /// parameters, makes what the parsed arguments hold under it (`args.params`) a parameter
    /// count wherever the file reads it. It stays a name: a launch may give another count.
    fn count_flag(&mut self, dest: &str, default: f64) {
        if default < crate::expr::PARAM_COUNT_MIN
            || !crate::expr::names_a_count(dest)
            || role_of(dest) != Role::Unknown
        {
            return;
        }
        let src = self.src;
        let field = format!(".{dest}");
        let mut reads: Vec<&'s str> = memchr::memmem::find_iter(src.as_bytes(), field.as_bytes())
            .filter_map(|at| {
                let end = at + field.len();
                let after = src.as_bytes().get(end).copied();
                if after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'(') {
                    return None;
                }
                let base = src[..at]
                    .bytes()
                    .rev()
                    .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                    .count();
                (base > 0).then(|| &src[at - base..end])
            })
            .collect();
        reads.sort_unstable();
        reads.dedup();
        for read in reads {
            self.program.name_role(0, read, Role::ParamCount, 1.0);
        }
    }

    /// `print("need", (w + g + o) / 2**30)`, `print(f"need {(w + g + o) / 2**30:.1f} GiB")`:
    /// an arithmetic argument or interpolation of a printout states what it prints, as an
    /// assigned total would.
    fn printed_arguments(&mut self, node: Node) {
        let Some(args) = node.field("arguments") else {
            return;
        };
        let mut c = args.walk();
        let mut arithmetic: Vec<Node> = Vec::new();
        for a in args.named_children(&mut c).map(super::unparen) {
            if a.ty() == "string" {
                // Of an f-string, the sums (`{(w + g + o) / 2**30:.1f}`): a single figure
                // states no total.
                let op = |n: Node| n.field("operator").map(|o| self.text(o));
                let sum = |n: Node| {
                    let n = match op(n) {
                        Some("/" | "//") => n.field("left").map(super::unparen),
                        _ => Some(n),
                    };
                    n.is_some_and(|n| {
                        n.ty() == "binary_operator" && matches!(op(n), Some("+" | "-"))
                    })
                };
                let mut cs = a.walk();
                arithmetic.extend(
                    a.named_children(&mut cs)
                        .filter(|k| k.ty() == "interpolation")
                        .filter_map(|k| k.field("expression").or_else(|| k.named_child(0)))
                        .map(super::unparen)
                        .filter(|e| sum(*e)),
                );
            } else {
                arithmetic.push(a);
            }
        }
        arithmetic.retain(|a| a.ty() == "binary_operator");
        for a in arithmetic {
            let value = self.value_of(a, 0);
            self.pend(PendingKind::Expr, value, a.byte_range());
        }
    }
}

impl Walker<'_> {
    /// `max(1, int((gpu_gb - fixed_gb) // per_sample_gb))`: a headroom rounded into a count is
    /// a budget like one assigned to a name (the call around it makes the whole opaque).
    fn rounded_headroom(&mut self, node: Node) {
        let Some(args) = node.field("arguments") else {
            return;
        };
        let mut c = args.walk();
        let kids: Vec<Node> = args.named_children(&mut c).collect();
        for a in kids {
            let mut at = super::unparen(a);
            // Through the division or scaling that turns the headroom into a count.
            while at.ty() == "binary_operator" {
                let op = at.field("operator").map(|o| self.text(o));
                match (op, at.field("left")) {
                    (Some("-"), _) => {
                        let value = self.value_of(at, 0);
                        self.pend(PendingKind::Expr, value, at.byte_range());
                        break;
                    }
                    (Some("/" | "//" | "*"), Some(left)) => at = super::unparen(left),
                    _ => break,
                }
            }
        }
    }
}

/// Calls that are never a helper of the file.
const BUILTINS: &[&str] = &[
    "print",
    "len",
    "range",
    "isinstance",
    "getattr",
    "setattr",
    "hasattr",
    "super",
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "tuple",
    "set",
    "min",
    "max",
    "sum",
    "any",
    "all",
    "zip",
    "enumerate",
    "sorted",
    "open",
    "type",
    "iter",
    "next",
    "round",
    "abs",
    "repr",
    "map",
    "filter",
    "vars",
    "id",
    "format",
    "hash",
    "callable",
    "delattr",
    "issubclass",
];

impl<'s> Walker<'s> {
    /// `partial(clip_grad_norm_, max_norm=1.0)`: a clip whose arguments are fixed in advance.
    pub(super) fn partial_of_clip(&self, call: Node) -> bool {
        call.field("arguments")
            .and_then(|a| a.named_child(0))
            .is_some_and(|f| is_clip(last_segment(self.text(f))))
    }
}

/// A call named for clipping gradients: `clip_grad_norm_`, `clip_grad_value_`,
/// `gradient_clipper`, `fsdp2_clip_grad_norm_`, `clip_gradients`.
fn is_clip(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("clip") && (lower.contains("grad") || lower.contains("norm"))
}

/// The value a dict written as text gives `gradient_accumulation_steps`:
/// `dict(gradient_accumulation_steps=2, ...)` or `{"gradient_accumulation_steps": 2}`.
fn factor_in_text(text: &str) -> Option<String> {
    let at = text.find("gradient_accumulation_steps")? + "gradient_accumulation_steps".len();
    let rest = text[at..].trim_start_matches(['"', '\'', ' ']);
    let rest = rest.strip_prefix('=').or_else(|| rest.strip_prefix(':'))?;
    let value: String = rest
        .trim_start()
        .chars()
        .take_while(|c| !matches!(c, ',' | ')' | '}' | '\n'))
        .collect();
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_string())
}

/// What a framework is told to accumulate over, anywhere in the file
/// (`accumulate_grad_batches=ACC`, `gradient_accumulation_steps=cfg.ga`): a division by it is a
/// division by the factor even where the framework is built further down.
pub(super) fn factors_set(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    // accelerate's `GradientAccumulationPlugin(num_steps=k)`.
    let plugin = memchr::memmem::find(text.as_bytes(), b"GradientAccumulationPlugin").is_some();
    let keys: &[&str] = match plugin {
        true => &[
            "accumulate_grad_batches",
            "gradient_accumulation_steps",
            "num_steps",
        ],
        false => &["accumulate_grad_batches", "gradient_accumulation_steps"],
    };
    for key in keys {
        for at in memchr::memmem::find_iter(text.as_bytes(), key.as_bytes()) {
            let rest = text[at + key.len()..].trim_start_matches([' ', '\t']);
            let Some(value) = rest.strip_prefix('=').filter(|r| !r.starts_with('=')) else {
                continue;
            };
            let value = value.trim_start_matches([' ', '\t']);
            let end = value
                .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.')))
                .unwrap_or(value.len());
            let v = &value[..end];
            // A call or a subscript is read whole by the walk.
            let whole = !value[end..].starts_with(['(', '[']);
            if whole && !v.is_empty() && v.len() < 80 && !found.iter().any(|f| f == v) {
                found.push(v.to_string());
            }
        }
    }
    found
}

/// Optimizer classes by lowercased name.
pub const OPTIMIZER_CLASSES: &[&str] = &[
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
