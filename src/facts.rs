//! Language-neutral facts: what the frontends lower a file into and the only thing rules read.

use crate::config::ConfigDoc;
use crate::expr::{Lin, Role};
use std::ops::Range;

/// Everything memlint learned from one file.
#[derive(Debug, Default)]
pub struct Facts {
    pub formulas: Vec<Formula>,
    pub loops: Vec<AccumLoop>,
    pub evidence: Evidence,
    /// Commands in a shell script that run a training script (`python train.py --optim adamw`).
    pub invocations: Vec<Invocation>,
    pub comments: Vec<Comment>,
    pub config: Option<ConfigDoc>,
    /// Configs written inside the file: shell heredocs, Python dict literals, dataclass and
    /// argparse defaults.
    pub inline_configs: Vec<InlineConfig>,
    /// Numbers bound to names that state a parameter count or a GPU's memory (`N_PARAMS = 7e9`).
    pub constants: Vec<NamedConstant>,
    /// `#SBATCH` directives of a batch script: `(option, value, span)`, option without dashes.
    pub sbatch: Vec<(String, String, Range<usize>)>,
    /// The parser had to recover from syntax errors: facts cover what parsed; never rewrite.
    pub syntax_error: bool,
}

/// An expression that may be memory arithmetic, lowered.
#[derive(Debug, Clone)]
pub struct Formula {
    pub kind: FormulaKind,
    pub lin: Lin,
    /// The expression as written.
    pub span: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FormulaKind {
    /// `target = expr` (or a shell `target=$((expr))`).
    Assign { target: String, role: Role },
    /// `return expr` inside a function whose name says what it returns.
    Return { function: String, role: Role },
    /// One side of a comparison; `other` is the side it is compared with.
    Compare { other: Lin },
    /// Any other arithmetic (an argument, an `echo $((...))`).
    Expr,
}

/// A mention of something that changes what training costs, with where it was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Mention<T> {
    pub value: T,
    pub span: Range<usize>,
}

/// An optimizer as written: a constructor, an `optim=` value, a flag or a config key.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizerMention {
    /// Lowercased name as written, last dotted segment (`adamw`, `adamw_torch`, `adamw8bit`).
    pub name: String,
    pub momentum: Option<f64>,
    pub amsgrad: bool,
    pub beta1: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    /// Autocast / AMP: fp32 master weights.
    Amp,
    /// Weights cast to bf16/fp16 (torch optimizers then keep states in that dtype too).
    Pure16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Accelerate,
    DeepSpeed,
    Lightning,
    HfTrainer,
}

/// Evidence about the training context found in one file.
#[derive(Debug, Default, Clone)]
pub struct Evidence {
    pub optimizers: Vec<Mention<OptimizerMention>>,
    /// Something that only happens in training: `.backward()`, `optimizer.step()`, a trainer.
    pub trains: Vec<Range<usize>>,
    /// Inference-only signals: `torch.no_grad()`, `inference_mode`, `.generate(`, KV caches.
    pub inference: Vec<Range<usize>>,
    /// LoRA / PEFT adapters: only a fraction of parameters is trainable.
    pub lora: Vec<Range<usize>>,
    /// Frozen parameters (`requires_grad = False`).
    pub frozen: Vec<Range<usize>>,
    /// ZeRO / FSDP sharding or optimizer offload.
    pub sharding: Vec<Range<usize>>,
    pub precision: Vec<Mention<Precision>>,
    pub frameworks: Vec<Mention<Framework>>,
}

impl Evidence {
    pub fn extend(&mut self, other: &Evidence) {
        self.optimizers.extend(other.optimizers.iter().cloned());
        self.trains.extend(other.trains.iter().cloned());
        self.inference.extend(other.inference.iter().cloned());
        self.lora.extend(other.lora.iter().cloned());
        self.frozen.extend(other.frozen.iter().cloned());
        self.sharding.extend(other.sharding.iter().cloned());
        self.precision.extend(other.precision.iter().cloned());
        self.frameworks.extend(other.frameworks.iter().cloned());
    }
}

/// A loop that accumulates gradients: the optimizer steps only on some iterations.
#[derive(Debug, Clone)]
pub struct AccumLoop {
    /// The loop statement's first line.
    pub header: Range<usize>,
    /// The accumulation factor N as written (`accum_steps`, `args.gradient_accumulation_steps`).
    pub factor: String,
    /// N is a plain name, attribute or literal: a fix may use it as written.
    pub factor_is_simple: bool,
    /// The conditional `optimizer.step()` calls.
    pub steps: Vec<Range<usize>>,
    /// `backward` calls that run on every micro-step.
    pub backwards: Vec<Backward>,
    /// Gradients are rescaled in the loop before the step (`p.grad.div_(N)`, `scale_grads`).
    pub grads_rescaled: bool,
}

#[derive(Debug, Clone)]
pub struct Backward {
    /// The whole call, e.g. `loss.backward()` or `scaler.scale(loss).backward()`.
    pub call: Range<usize>,
    /// The loss expression handed to the backward (`loss` in `scaler.scale(loss)`).
    pub loss: Range<usize>,
    pub loss_text: String,
    /// Whether the loss was divided or normalised on its way to the backward.
    pub scaling: Scaling,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaling {
    /// Divided by something, or normalised by a count.
    Scaled,
    /// Comes straight from a loss function or a model output.
    Unscaled,
    /// Cannot be told statically (a helper in another file): rules stay silent.
    Unknown,
}

/// A command that runs a script, with its arguments, from a shell launcher.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The launcher (`python`, `torchrun`, `deepspeed`, `accelerate`), inside any wrappers.
    pub launcher: String,
    /// The script path as written.
    pub script: Option<String>,
    /// The words after the launcher, expanded.
    pub args: Vec<Arg>,
    pub span: Range<usize>,
    /// Programs around the launcher (`srun -N 2`, `nohup`, `mpirun -np 8`), with their words.
    pub wrappers: Vec<(String, Vec<Arg>)>,
    /// The command runs on some paths through the script only (an `if` whose condition is not
    /// known, a `case` branch, a loop body).
    pub conditional: bool,
}

/// A word of a shell command after expansion.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    /// The word as the shell passes it; parts that could not be resolved keep their `$NAME` text.
    pub value: String,
    /// Every part is a literal, or a variable with one value on every path to the command.
    pub known: bool,
    pub span: Range<usize>,
    /// Variables whose values make up the word.
    pub via: Vec<Binding>,
}

/// Where a shell variable got the value a word uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub name: String,
    pub value: String,
    /// The assignment, the `${NAME:-default}` expansion or the `#SBATCH` line.
    pub span: Range<usize>,
    /// The value is the default of `${NAME:-default}`: what the script uses when run as written.
    pub default: bool,
}

/// A config written inside another file.
#[derive(Debug, Clone)]
pub struct InlineConfig {
    pub kind: InlineKind,
    pub root: crate::config::Node,
    /// Values that came from shell variables, by the span of the value.
    pub via: Vec<(Range<usize>, Binding)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InlineKind {
    /// A shell heredoc written to a file (`cat <<EOF > ds.json`): the path as the script spells
    /// it, with unresolved parts kept as written.
    Heredoc { path: Option<String> },
    /// A Python dict literal, with the name it is assigned to.
    Dict { name: Option<String> },
    /// The field defaults of a Python dataclass or settings class.
    Dataclass { name: String },
    /// The `argparse` defaults of a file, keyed by option name without dashes.
    Argparse,
}

/// A number bound to a name that says what it is (`N_PARAMS = 7_000_000_000`, `GPU_MEMORY_GB=40`).
#[derive(Debug, Clone, PartialEq)]
pub struct NamedConstant {
    pub name: String,
    pub role: Role,
    pub value: f64,
    /// The value as written.
    pub span: Range<usize>,
}

impl Facts {
    /// Keep `name = value` when the name states a parameter count or a GPU's memory.
    pub fn note_constant(&mut self, name: &str, lin: &Lin, span: Range<usize>) {
        if !lin.is_constant() {
            return;
        }
        let role = crate::expr::role_of(name);
        if matches!(role, Role::ParamCount | Role::Gpu) {
            self.constants.push(NamedConstant {
                name: name.to_string(),
                role,
                value: lin.constant,
                span,
            });
        }
    }
}

/// A comment, for suppressions.
#[derive(Debug, Clone)]
pub struct Comment {
    pub text: String,
    pub range: Range<usize>,
}
