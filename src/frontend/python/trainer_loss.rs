//! HF Trainer losses written by hand (GA007): `Trainer(..., compute_loss_func=f)` and `Trainer`
//! subclasses that override `compute_loss`. The walk notes the functions, classes and keywords it
//! passes; `finish` keeps the losses that never read the item count of the accumulation window.

use super::Walker;
use crate::facts::{CustomLoss, CustomLossKind, Mention};
use crate::frontend::fields::{PyField, PyKind};
use std::ops::Range;
use tree_sitter::Node;

/// What the walk noted for the trainer-loss lowering.
#[derive(Debug, Default)]
pub(super) struct TrainerLossNotes {
    /// The file writes `compute_loss`: the notes below are taken.
    pub active: bool,
    pub defs: Vec<FuncDef>,
    pub classes: Vec<ClassDef>,
    /// `compute_loss_func=<value>` in a call: the callee as written, the value's text and span,
    /// and the keyword's span; a lambda is read where it is written.
    pub loss_funcs: Vec<LossFuncArg>,
    /// Objects the file sets `model_accepts_loss_kwargs` on (`trainer` in
    /// `trainer.model_accepts_loss_kwargs = False`): their class says how its loss is scaled.
    pub told: Vec<String>,
    /// Classes the file calls whose names may build a trainer or its arguments (`Trainer`,
    /// `MyTrainer`, `TrainingArguments`, `SFTConfig`): judged against the classes once read.
    pub built: Vec<String>,
}

impl TrainerLossNotes {
    /// A call of a class that may build a trainer or its arguments.
    pub(super) fn note_build(&mut self, callee: &str) {
        let builds = callee.ends_with("Trainer")
            || callee.ends_with("TrainingArguments")
            || callee
                .strip_suffix("Config")
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_uppercase()));
        if builds && !self.built.iter().any(|b| b == callee) {
            self.built.push(callee.to_string());
        }
    }

    /// The file builds a trainer of transformers' kind, or the arguments one is built with: the
    /// factor it trains with is the file's to set. A file that only defines trainer classes
    /// leaves it to whoever builds them.
    fn builds_trainer(&self) -> bool {
        self.built.iter().any(|b| {
            !b.ends_with("Trainer")
                || HF_TRAINERS.contains(&b.as_str())
                || self
                    .classes
                    .iter()
                    .any(|c| c.name == *b && hf_derived(&self.classes, c))
        })
    }
}

#[derive(Debug)]
pub(super) struct FuncDef {
    pub name: String,
    /// The class the function is a method of (its name), when it is defined in a class body.
    pub class: Option<String>,
    /// The parameter that receives `num_items_in_batch=`: the parameter of that name, or the
    /// `**kwargs` parameter.
    pub count_param: Option<String>,
    /// The count parameter is read in the body, or the body divides by an accumulation factor,
    /// or sums its loss: the function takes care of the window itself.
    pub handles_count: bool,
    /// The `def` line.
    pub span: Range<usize>,
}

#[derive(Debug)]
pub(super) struct ClassDef {
    pub name: String,
    /// The last segment of each base (`Trainer`, `SFTTrainer`).
    pub bases: Vec<String>,
    /// The class says how its loss is scaled (`model_accepts_loss_kwargs`,
    /// `loss_is_scaled_for_ga`).
    pub opts_out: bool,
}

#[derive(Debug)]
pub(super) struct LossFuncArg {
    pub callee: String,
    pub value: String,
    pub keyword: Range<usize>,
    /// For a lambda: what a definition would say.
    pub lambda: Option<FuncDef>,
}

/// Trainers that scale their loss for the window the way transformers' `Trainer` does. TRL's
/// `SFTTrainer` hands `num_items_in_batch` on to the Trainer's loss (TRL 0.13 to 1.9); its
/// preference and RL trainers set `model_accepts_loss_kwargs = False`, and the Trainer divides.
const HF_TRAINERS: &[&str] = &["Trainer", "Seq2SeqTrainer", "SFTTrainer"];

impl<'s> Walker<'s> {
    /// A function or class definition, when the file writes `compute_loss`.
    pub(super) fn note_definition(&mut self, node: Node, class: Option<usize>) {
        if !self.trainer_loss.active {
            return;
        }
        let name = node
            .field("name")
            .map(|n| self.text(n).to_string())
            .unwrap_or_default();
        if node.ty() == "class_definition" {
            let bases = node
                .field("superclasses")
                .map(|n| {
                    let mut c = n.walk();
                    n.named_children(&mut c)
                        .map(|b| super::last_segment(self.text(b)).to_string())
                        .collect()
                })
                .unwrap_or_default();
            let text = self.text(node);
            self.trainer_loss.classes.push(ClassDef {
                name,
                bases,
                opts_out: text.contains("model_accepts_loss_kwargs")
                    || text.contains("loss_is_scaled_for_ga"),
            });
            return;
        }
        // A method: defined directly in a class body.
        let class = class
            .and_then(|c| self.scopes.get(c))
            .filter(|s| s.is_class)
            .map(|s| s.name.clone());
        let def = self.func_def(
            name,
            class,
            node.field("parameters"),
            node.field("body"),
            node.start_byte()..super::line_end(self.src, node.start_byte()),
        );
        self.trainer_loss.defs.push(def);
    }

    fn func_def(
        &self,
        name: String,
        class: Option<String>,
        params: Option<Node>,
        body: Option<Node>,
        span: Range<usize>,
    ) -> FuncDef {
        let mut count_param = None;
        if let Some(params) = params {
            let mut c = params.walk();
            for p in params.named_children(&mut c) {
                let ident = match p.ty() {
                    "identifier" => Some(p),
                    "typed_parameter" => p.named_child(0),
                    "default_parameter" | "typed_default_parameter" => p.field("name"),
                    "dictionary_splat_pattern" => p.named_child(0),
                    _ => None,
                };
                let Some(ident) = ident else {
                    continue;
                };
                let text = self.text(ident);
                let splat = p.ty() == "dictionary_splat_pattern"
                    || (p.ty() == "typed_parameter" && ident.ty() == "dictionary_splat_pattern");
                if text == "num_items_in_batch" {
                    count_param = Some(text.to_string());
                } else if splat && count_param.is_none() {
                    count_param = Some(format!("**{}", text.trim_start_matches("**")));
                }
            }
        }
        // What the code reads: docstrings and comments that mention the count do not.
        let written = body.map(|b| self.text(b)).unwrap_or("");
        let code = code_only(written);
        let body = code.as_str();
        let lower = written.to_ascii_lowercase();
        let handles_count = count_param
            .as_deref()
            .is_some_and(|p| contains_ident(body, p.trim_start_matches("**")))
            || body.to_ascii_lowercase().contains("accum")
            || sums(&lower)
            || contains_ident(body, "num_items_in_batch")
            || (count_param.is_some() && self.calls_summing_loss(body));
        FuncDef {
            name,
            class,
            count_param,
            handles_count,
            span,
        }
    }

    /// `compute_loss_func=<value>` inside a call.
    pub(super) fn note_loss_func(&mut self, keyword: Node, value: Node) {
        if !self.trainer_loss.active {
            return;
        }
        let Some(callee) = keyword
            .parent()
            .and_then(|args| args.parent())
            .filter(|call| call.ty() == "call")
            .and_then(|call| call.field("function"))
        else {
            return;
        };
        let lambda = (value.ty() == "lambda").then(|| {
            self.func_def(
                "lambda".into(),
                None,
                value.field("parameters"),
                value.field("body"),
                value.byte_range(),
            )
        });
        self.trainer_loss.loss_funcs.push(LossFuncArg {
            callee: super::last_segment(self.text(callee)).to_string(),
            value: self.text(value).to_string(),
            keyword: keyword.byte_range(),
            lambda,
        });
    }

    /// The class (or callee) an object was built from, by the last segment of its name
    /// (`Trainer` for `trainer = transformers.Trainer(...)`).
    fn built_from(&self, object: &str) -> Option<&'s str> {
        let (callee, _) = self.assigned_text.get(object)?.split_once('(')?;
        Some(super::last_segment(callee.trim()))
    }

    /// The custom losses that ignore the window's item count.
    pub(super) fn custom_losses(&mut self) -> Vec<CustomLoss> {
        let mut notes = std::mem::take(&mut self.trainer_loss);
        if !notes.active {
            return Vec::new();
        }
        // `trainer.model_accepts_loss_kwargs = False` on an instance before `train()` says how
        // its loss is scaled as the class attribute does: the class the object is built from.
        for receiver in &notes.told {
            let Some(class) = self.built_from(receiver) else {
                continue;
            };
            for c in notes.classes.iter_mut().filter(|c| c.name == class) {
                c.opts_out = true;
            }
        }
        // A trainer class of transformers' kind: one of its own, or a class of this file that
        // derives from one and sets nothing about loss scaling.
        let hf_trainer = |name: &str| {
            HF_TRAINERS.contains(&name)
                || notes
                    .classes
                    .iter()
                    .any(|c| c.name == name && hf_derived(&notes.classes, c))
        };
        let mut out = Vec::new();
        for arg in &notes.loss_funcs {
            if !hf_trainer(&arg.callee) {
                continue;
            }
            // A function of the file, or a method of an object built from a class of the
            // file (`compute_loss_func=smoother.loss`, `smoother = SmoothedLoss(...)`).
            let method = || {
                let (object, name) = arg.value.rsplit_once('.')?;
                let class = self.built_from(object)?;
                notes
                    .defs
                    .iter()
                    .rev()
                    .find(|d| d.class.as_deref() == Some(class) && d.name == name)
            };
            let def = match &arg.lambda {
                Some(l) => Some(l),
                None => notes
                    .defs
                    .iter()
                    .rev()
                    .find(|d| d.class.is_none() && d.name == arg.value)
                    .or_else(method),
            };
            let Some(def) = def else {
                continue;
            };
            let Some(param) = def.count_param.clone().filter(|_| !def.handles_count) else {
                continue;
            };
            out.push(CustomLoss {
                kind: CustomLossKind::LossFunc,
                at: arg.keyword.clone(),
                function: if arg.lambda.is_some() {
                    "lambda".into()
                } else {
                    arg.value.clone()
                },
                defined: def.span.clone(),
                param,
            });
        }
        // An override of `compute_loss` that receives the count and ignores it. Only with a
        // model that accepts loss keywords does the Trainer skip its own division: a causal LM
        // the file loads, or the language model an SFT trainer trains whatever the file loads.
        let causal_lm = ["CausalLM", "ConditionalGeneration"]
            .iter()
            .find_map(|w| memchr::memmem::find(self.src.as_bytes(), w.as_bytes()))
            .map(|at| ident_around(self.src.as_bytes(), at));
        let builds_trainer = notes.builds_trainer();
        for def in &notes.defs {
            let Some(class) = def.class.as_deref() else {
                continue;
            };
            let Some(c) = notes.classes.iter().rev().find(|c| c.name == class) else {
                continue;
            };
            if def.name != "compute_loss" || !hf_derived(&notes.classes, c) {
                continue;
            }
            let Some(param) = def.count_param.clone().filter(|_| !def.handles_count) else {
                continue;
            };
            let sft = derives_from(&notes.classes, c, "SFTTrainer");
            if causal_lm.is_none() && !sft {
                continue;
            }
            out.push(CustomLoss {
                kind: CustomLossKind::Override {
                    class: class.to_string(),
                    causal_lm: causal_lm.clone(),
                    built_elsewhere: !builds_trainer,
                },
                at: def.span.clone(),
                function: format!("{class}.compute_loss"),
                defined: def.span.clone(),
                param,
            });
        }
        out
    }

    /// `gradient_accumulation_steps=<number>` as a keyword argument.
    pub(super) fn note_accumulation_setting(&mut self, value: Node) {
        // A number, or a module constant bound to one (`gradient_accumulation_steps=GRAD_ACC`).
        let text = self.text(value);
        let number = super::parse_number(text).or_else(|| self.module_numbers.get(text).copied());
        if let Some(v) = number {
            self.facts.accumulation_settings.push(Mention {
                value: v,
                span: value.byte_range(),
            });
        }
    }
}

/// The class derives from transformers' `Trainer` (or `Seq2SeqTrainer`), directly or through
/// classes of the file, none of which says how its loss is scaled (a subclass inherits that).
fn hf_derived(classes: &[ClassDef], class: &ClassDef) -> bool {
    let mut seen = vec![class.name.as_str()];
    let mut level = vec![class];
    // A chain of a few classes at most; `seen` stops a cycle.
    for _ in 0..8 {
        let mut next = Vec::new();
        for c in level {
            if c.opts_out {
                return false;
            }
            if c.bases.iter().any(|b| HF_TRAINERS.contains(&b.as_str())) {
                return true;
            }
            for b in &c.bases {
                if let Some(parent) = classes.iter().rev().find(|p| p.name == *b) {
                    if !seen.contains(&parent.name.as_str()) {
                        seen.push(&parent.name);
                        next.push(parent);
                    }
                }
            }
        }
        if next.is_empty() {
            return false;
        }
        level = next;
    }
    false
}

/// The class derives from `base`, directly or through classes of the file.
fn derives_from(classes: &[ClassDef], class: &ClassDef, base: &str) -> bool {
    let mut level = vec![class];
    for _ in 0..8 {
        if level.iter().any(|c| c.bases.iter().any(|b| b == base)) {
            return true;
        }
        level = level
            .iter()
            .flat_map(|c| &c.bases)
            .filter_map(|b| classes.iter().rev().find(|p| p.name == *b))
            .collect();
        if level.is_empty() {
            return false;
        }
    }
    false
}

/// A loss built to sum (`reduction="sum"`), in lowercased text.
fn sums(lower: &str) -> bool {
    let compact: String = lower.split_whitespace().collect();
    compact.contains("reduction=\"sum\"") || compact.contains("reduction='sum'")
}

impl Walker<'_> {
    /// The body calls a loss object the file builds to sum (`_ce = nn.CrossEntropyLoss(
    /// reduction="sum")`, then `_ce(logits, labels)` or `self._ce(...)`).
    fn calls_summing_loss(&self, body: &str) -> bool {
        let src = self.src;
        // The names assigned on a line that builds a summing loss (rare: found by one search).
        memchr::memmem::find_iter(src.as_bytes(), b"reduction").any(|at| {
            let line = statement_around(src, at);
            let Some((target, _)) = line.split_once(" = ") else {
                return false;
            };
            // `self._ce: nn.Module = ...`: the name before its annotation.
            let target = target.split(':').next().unwrap_or("");
            let name = target.trim().rsplit('.').next().unwrap_or("");
            !name.is_empty()
                && sums(&line.to_ascii_lowercase())
                && body.match_indices(name).any(|(i, _)| {
                    let whole = !body[..i]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_');
                    whole && body[i + name.len()..].starts_with('(')
                })
        })
    }
}

/// The nearest assignment whose logical line holds byte `at`, a few lines back at most (`ce =
/// nn.CrossEntropyLoss(\n    reduction="sum")`); the line of `at` when there is none.
fn statement_around(src: &str, at: usize) -> &str {
    let bytes = src.as_bytes();
    let line_start = |end: usize| {
        bytes[..end]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1)
    };
    let mut start = line_start(at);
    for _ in 0..8 {
        let end = start + crate::source::logical_line(bytes, start).len();
        if end >= at && src[start..at].contains(" = ") {
            return &src[start..end];
        }
        if start == 0 {
            break;
        }
        start = line_start(start - 1);
    }
    let start = line_start(at);
    &src[start..start + crate::source::logical_line(bytes, start).len()]
}

/// `name` appears in `text` as a whole identifier.
fn contains_ident(text: &str, name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    memchr::memmem::find_iter(bytes, name.as_bytes()).any(|at| {
        let before = at.checked_sub(1).and_then(|i| bytes.get(i));
        let after = bytes.get(at + name.len());
        !before.is_some_and(|b| ident(*b)) && !after.is_some_and(|b| ident(*b))
    })
}

/// The identifier that holds byte `at` (`AutoModelForCausalLM` around `CausalLM`).
fn ident_around(bytes: &[u8], at: usize) -> Range<usize> {
    let ident = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let start = bytes
        .get(..at)
        .map_or(at, |b| at - b.iter().rev().take_while(|c| ident(c)).count());
    let end = bytes
        .get(at..)
        .map_or(at, |b| at + b.iter().take_while(|c| ident(c)).count());
    start..end
}

/// The code of `text` with its comments and string literals blanked (same length).
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            q @ (b'"' | b'\'') => {
                let triple = bytes.get(i..i + 3) == Some(&[q, q, q][..]);
                let close: &[u8] = if triple { &[q, q, q] } else { &[q] };
                let start = i;
                i += close.len();
                while i < bytes.len() && !bytes[i..].starts_with(close) {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    if !triple && bytes.get(i) == Some(&b'\n') {
                        break;
                    }
                    i += 1;
                }
                let end = (i + close.len()).min(bytes.len());
                for b in &mut out[start..end] {
                    if *b != b'\n' {
                        *b = b' ';
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    String::from_utf8(out).unwrap_or_default()
}
