//! What a module's top-level functions hand to the modules that import them, for schedules
//! judged across files (GA004): the scheduler a function returns and the product that sizes
//! it, the `Accelerator` a function returns and its factor; and, in the importing file, the
//! schedulers it gets from imported functions and steps at an accumulation boundary.
//! `project::schedules` joins them. For DDP across files (GA009): the model a function wraps in
//! `DistributedDataParallel` and returns, and the imported calls of a file that accumulates with
//! no wrapper of its own; `project::models` joins those.

use super::schedules::top_level_args;
use super::*;
use crate::facts::{
    ImportedCall, ImportedModel, ImportedSchedule, ReturnedAccelerator, ReturnedModel,
    ReturnedSchedule,
};

impl<'s> Walker<'s> {
    /// The top-level function the walk is in, with its parameters.
    fn top_level_function(&self) -> Option<(String, Vec<String>)> {
        let s = self.scopes.get(self.scope())?;
        let top = s.parent == Some(0) && !s.is_class && s.class.is_none() && !s.name.is_empty();
        top.then(|| (s.name.clone(), s.params.clone()))
    }

    /// `return Scheduler(..., length)` in a top-level function, where the length is a product of
    /// names with no division (`max_steps * accum`, or a name the function gave one).
    pub(super) fn note_returned_schedule(&mut self, ctor: Node) {
        let Some((function, params)) = self.top_level_function() else {
            return;
        };
        let Some(length) = self.named_length(ctor) else {
            return;
        };
        let Some((multiplied, span)) = self.length_product(length) else {
            return;
        };
        let links = &mut self.facts.links;
        if links.schedules.iter().any(|s| s.length_at == span) {
            return;
        }
        links.schedules.push(ReturnedSchedule {
            function,
            params,
            length: batch_model::compact_spaced(&self.src[span.clone()]),
            length_at: span,
            built: ctor.byte_range(),
            multiplied,
        });
    }

    /// `Accelerator(gradient_accumulation_steps=...)` built in a top-level function.
    pub(super) fn note_built_accelerator(&mut self, factor: Option<&String>) {
        if let (Some(factor), Some(_)) = (factor, self.top_level_function()) {
            self.built_accelerators.push((self.scope(), factor.clone()));
        }
    }

    /// `return accelerator` (or `return Accelerator(...)`) from a top-level function that
    /// built one with a factor.
    pub(super) fn note_returned_accelerator(&mut self, value: Node) {
        let scope = self.scope();
        let built = || {
            let (_, factor) = self.built_accelerators.iter().find(|(s, _)| *s == scope)?;
            let text = self.text(value).trim();
            self.accelerator_names
                .iter()
                .any(|n| n == text)
                .then(|| factor.clone())
        };
        // The return's own call is walked after the return: its factor is read here.
        let constructed = || {
            let callee = value.field("function")?;
            (value.ty() == "call" && last_segment(self.text(callee)) == "Accelerator")
                .then(|| self.accelerator_factor(value))?
        };
        let Some(factor) = built().or_else(constructed) else {
            return;
        };
        let Some((function, params)) = self.top_level_function() else {
            return;
        };
        if !self
            .facts
            .links
            .accelerators
            .iter()
            .any(|a| a.function == function)
        {
            self.facts.links.accelerators.push(ReturnedAccelerator {
                function,
                params,
                factor,
            });
        }
    }

    /// `return model, optimizer` from a top-level function that wrapped `model` in
    /// `DistributedDataParallel` (or `return DDP(model)`).
    pub(super) fn note_returned_ddp(&mut self, value: Node) {
        let Some((function, _)) = self.top_level_function() else {
            return;
        };
        let mut c = value.walk();
        let parts: Vec<Node> = match value.ty() {
            "expression_list" | "tuple" => value.named_children(&mut c).collect(),
            _ => vec![value],
        };
        // A name's assigned value is kept only as text.
        let wrapper_text = |call: &str| {
            let callee = call.split('(').next().unwrap_or("").trim();
            call.ends_with(')') && sync_flag::wraps_in_ddp(last_segment(callee))
        };
        let wrapper_call = |call: Node| {
            let callee = call.child_by_field_name("function");
            callee.is_some_and(|f| sync_flag::wraps_in_ddp(last_segment(self.text(f))))
        };
        // The wrappers and their scopes are noted together; the return's own call is not yet.
        let scope = self.scope();
        let wrapped_here = || {
            (self.ddp_wrap_scopes.iter())
                .rposition(|s| *s == scope)
                .and_then(|k| self.facts.ddp_wraps.get(k).cloned())
        };
        let wrapped = parts.iter().find_map(|p| match p.ty() {
            "call" if wrapper_call(*p) => Some(p.byte_range()),
            "identifier" => self
                .assigned_text
                .get(self.text(*p))
                .filter(|t| wrapper_text(t.trim()))
                .and_then(|_| wrapped_here()),
            _ => None,
        });
        let links = &mut self.facts.links;
        if let Some(wrapped) = wrapped {
            if !links.ddp_returned.iter().any(|m| m.function == function) {
                links.ddp_returned.push(ReturnedModel { function, wrapped });
            }
        }
    }

    /// The calls of imported functions whose result may reach an accumulating loop of this file
    /// with a backward: if the function returns a DDP model, the loop accumulates with it.
    pub(super) fn ddp_candidates(&self) -> Vec<ImportedModel> {
        let accumulating: Vec<usize> = self
            .facts
            .loops
            .iter()
            .filter(|lp| !lp.backwards.is_empty() && !lp.factor_value.is_some_and(|v| v <= 1.0))
            .map(|lp| lp.scope)
            .collect();
        if accumulating.is_empty() || self.controls_grad_sync() {
            return Vec::new();
        }
        let mut out: Vec<ImportedModel> = Vec::new();
        // Calls of plain names, and of modules' attributes (`du.wrap(model)`).
        let plain = self.invokes.iter().filter_map(|i| {
            let callee = &i.callee;
            let local =
                callee.class.is_some() || callee.instance || self.function(callee).is_some();
            (!local).then(|| (i.ctx.scope, callee.name.as_str(), i.call.clone()))
        });
        let attributes = (self.module_calls.iter())
            .map(|(scope, callee, call)| (*scope, &self.src[callee.clone()], call.clone()));
        let mut reaches: HashMap<usize, Vec<usize>> = HashMap::default();
        for (scope, name, call) in plain.chain(attributes) {
            let Some((module, function)) = self.imported(name) else {
                continue;
            };
            if function.is_empty() || function.ends_with("()") {
                continue;
            }
            let known = out
                .iter()
                .any(|m| m.function == function && m.module == module && m.reach.contains(&scope));
            if known {
                continue;
            }
            // The caller holds the model; its own callers get it only if it returns it.
            let reach = (reaches.entry(scope)).or_insert_with(|| self.model_reach(&[scope], false));
            if !accumulating.iter().any(|s| reach.contains(s)) {
                continue;
            }
            out.push(ImportedModel {
                module,
                function,
                at: call,
                reach: reach.clone(),
            });
        }
        out
    }

    /// The schedulers returned by imported functions that a loop steps at its boundary (once
    /// per optimizer step), with the loop's factor.
    pub(super) fn imported_schedules(&self, loops: &[AccumLoop]) -> Vec<ImportedSchedule> {
        let mut out = Vec::new();
        for lp in loops {
            if lp.factor_value.is_some_and(|v| v <= 1.0) {
                continue;
            }
            for step in &lp.boundary_scheduler_steps {
                let Some((_, recv)) = self.scheduler_steps.iter().find(|(s, _)| *s == step.span)
                else {
                    continue;
                };
                let Some(call) = self.imported_call(recv) else {
                    continue;
                };
                // An Accelerator built elsewhere tells its factor as its attribute.
                let factor_from = lp
                    .factor
                    .strip_suffix(".gradient_accumulation_steps")
                    .and_then(|acc| self.imported_call(acc));
                out.push(ImportedSchedule {
                    call,
                    factor: lp.factor.clone(),
                    factor_from,
                    step: step.span.clone(),
                    accelerate: lp.accelerate,
                    prepared: self.scheduler_prepared(recv),
                });
            }
        }
        out
    }

    /// `name = module.f(...)`, or `f(...)` imported by name, where `f` is no function of this
    /// file: the call.
    fn imported_call(&self, name: &str) -> Option<ImportedCall> {
        let call = self.assigned_text.get(name)?.trim();
        let open = call.find('(')?;
        let callee: String = call[..open].split_whitespace().collect();
        if !call.ends_with(')') || (!callee.contains('.') && self.def_texts.contains_key(&*callee))
        {
            return None;
        }
        let (module, function) = self.imported(&callee)?;
        if function.is_empty() || function.ends_with("()") {
            return None;
        }
        let args = top_level_args(&call[open + 1..])?
            .into_iter()
            .map(|a| a.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        Some(ImportedCall {
            module,
            function,
            args,
        })
    }
}
