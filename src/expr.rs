//! One small expression form for memory arithmetic, shared by the Python and shell frontends:
//! a sum of terms (symbol × coefficient) plus a constant. Literals fold; a product of two symbols,
//! a division by a symbol or a call that is not a known numeric wrapper becomes an *opaque* term
//! whose value is unknown, and rules stay silent about what they cannot know.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;

/// What a name stands for in a memory formula, read from the name itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Memory the GPU has: `gpu_memory_gb`, `available_memory_gb`, `vram`.
    Gpu,
    /// The model's weights as a size: `model_size_gb`, `model_params_gb`, `weights_mem`.
    Model,
    /// A parameter count: `n_params`, `num_parameters`.
    ParamCount,
    Grads,
    Optimizer,
    Activations,
    Overhead,
    KvCache,
    /// A name that holds a total requirement: `total_memory`, `required_gb`, `fixed_memory_gb`.
    Total,
    /// A count of devices: `world_size`, `num_gpus`, `dp_size` (see [`device_count`]).
    Devices,
    /// What trains under an adapter: `trainable_params`, `lora_params_gb`.
    Trainable,
    Unknown,
}

impl Role {
    /// Whether a named value of this role marks the terms it holds as one component of a sum.
    fn is_component(self) -> bool {
        matches!(
            self,
            Role::Model
                | Role::Grads
                | Role::Optimizer
                | Role::Activations
                | Role::Overhead
                | Role::KvCache
        )
    }
}

/// The role of a (possibly dotted) name, from its last segment. Names repeat within a file and
/// across a project (`model`, `loss`): each thread remembers the answers, up to a bound.
pub fn role_of(name: &str) -> Role {
    const REMEMBERED: usize = 1 << 16;
    thread_local! {
        // Names are short and repeat at almost every node: a fast hash, not SipHash.
        static SEEN: RefCell<HashMap<Box<str>, Role, foldhash::fast::RandomState>> =
            RefCell::new(HashMap::default());
    }
    SEEN.with(|seen| {
        let Ok(mut seen) = seen.try_borrow_mut() else {
            return role_of_name(name);
        };
        if let Some(&known) = seen.get(name) {
            return known;
        }
        if seen.len() >= REMEMBERED {
            seen.clear();
        }
        let role = role_of_name(name);
        seen.insert(name.into(), role);
        role
    })
}

/// What a count of devices counts, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceCount {
    /// Every process of the job: `world_size`, `num_gpus`, `torch.cuda.device_count()`.
    Total,
    /// The data-parallel degree: `dp_size`, `data_parallel_size`.
    DataParallel,
    /// The GPUs of one node: `gpus_per_node`, `local_world_size`.
    PerNode,
    /// A model-parallel degree: `tensor_parallel_size`, `pp_size`.
    ModelParallel,
}

/// The kind of device count a (possibly dotted, possibly called) name is, if it is one.
pub fn device_count(name: &str) -> Option<DeviceCount> {
    let name = name
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .trim();
    // `(tp * pp)`: a product of model-parallel degrees is one.
    if name.contains('*') {
        let kinds: Vec<Option<DeviceCount>> = name.split('*').map(device_count).collect();
        return kinds
            .iter()
            .all(|k| *k == Some(DeviceCount::ModelParallel))
            .then_some(DeviceCount::ModelParallel);
    }
    let name = name.trim_end_matches("()");
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    let n = last.trim_matches('_');
    let has = |words: &[&str]| words.iter().any(|w| holds(n, w));
    if has(&["per_node", "local_world", "local_size", "per_host"]) {
        return Some(DeviceCount::PerNode);
    }
    if has(&["data_parallel"])
        || matches!(
            n,
            "dp" | "dp_size" | "dp_degree" | "dp_world_size" | "dp_ranks" | "dp_group_size"
        )
    {
        return Some(DeviceCount::DataParallel);
    }
    if has(&[
        "tensor_parallel",
        "pipeline_parallel",
        "model_parallel",
        "context_parallel",
    ]) || matches!(
        n,
        "tp" | "pp" | "cp" | "tp_size" | "pp_size" | "cp_size" | "sp_size"
    ) {
        return Some(DeviceCount::ModelParallel);
    }
    matches!(
        n,
        "world_size"
            | "world"
            | "num_gpus"
            | "n_gpus"
            | "ngpus"
            | "gpus"
            | "total_gpus"
            | "num_gpu"
            | "n_gpu"
            | "gpu_count"
            | "num_devices"
            | "n_devices"
            | "ndevices"
            | "device_count"
            | "num_ranks"
            | "nranks"
            | "num_processes"
            | "get_world_size"
    )
    .then_some(DeviceCount::Total)
}

/// Whether the short name `n` holds `w`: a plain window compare, cheaper on names than the
/// general substring search (which prepares a searcher for every call).
fn holds(n: &str, w: &str) -> bool {
    n.as_bytes().windows(w.len()).any(|x| x == w.as_bytes())
}

fn role_of_name(name: &str) -> Role {
    if device_count(name).is_some() {
        return Role::Devices;
    }
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    // `per_gpu_model_mem` is a model's memory on each GPU, not the GPU's memory.
    let last = ["per_gpu_", "per_device_", "per_rank_"]
        .iter()
        .fold(last, |n, p| n.replace(p, ""));
    let n = last.trim_matches('_');
    let has = |words: &[&str]| words.iter().any(|w| holds(n, w));
    // A unit or memory word makes a model/param name a size; "size" alone does not
    // (`param_max_chunk_size` counts elements).
    // Whole name segments only: `mb` inside `embedding` is not megabytes.
    let sized = n.split('_').any(|seg| {
        matches!(
            seg,
            "gb" | "gib" | "mb" | "mib" | "bytes" | "footprint" | "vram"
        ) || seg.starts_with("mem")
    });
    if has(&[
        "kv_cache",
        "kvcache",
        "kv_mem",
        "kv_gb",
        "cache_gb",
        "cache_mem",
    ]) {
        return Role::KvCache;
    }
    if has(&["grad"]) && !has(&["accum", "norm", "clip", "checkpoint", "scaler", "ckpt"]) {
        return Role::Grads;
    }
    if has(&[
        "optim",
        "adam",
        "opt_state",
        "moment",
        "_states",
        "state_gb",
        "state_mem",
    ]) {
        return Role::Optimizer;
    }
    if has(&["need", "required", "requirement", "fixed", "footprint"]) {
        return Role::Total;
    }
    if has(&[
        "activ", "batch", "sample", "token", "seq", "act_mem", "act_gb", "logit",
    ]) {
        return Role::Activations;
    }
    if has(&[
        "overhead",
        "margin",
        "buffer",
        "reserve",
        "safety",
        "cuda",
        "misc",
        "workspace",
        "headroom",
        "fragment",
        "context",
    ]) {
        return Role::Overhead;
    }
    if has(&[
        "gpu",
        "vram",
        "available",
        "free",
        "device_mem",
        "capacity",
        "budget",
        "hbm",
        "total_mem",
        "max_mem",
        "card",
    ]) {
        return Role::Gpu;
    }
    if has(&["trainable", "lora", "adapter"]) {
        return Role::Trainable;
    }
    if (has(&["model", "weight", "param"]) && sized) || n == "model_size" {
        return Role::Model;
    }
    // Bare `params`/`parameters` usually hold the parameters themselves, not their count.
    if matches!(
        n,
        "n_params"
            | "num_params"
            | "nparams"
            | "param_count"
            | "num_parameters"
            | "n_parameters"
            | "total_params"
            | "model_params"
            | "num_model_params"
            | "parameter_count"
    ) {
        return Role::ParamCount;
    }
    if has(&[
        "total",
        "peak",
        "estimate",
        "usage",
        "train_mem",
        "training_mem",
    ]) {
        return Role::Total;
    }
    Role::Unknown
}

/// A name for memory that model states or activations take (`activation_gb`,
/// `optimizer_mem`): a role word and a unit or memory word.
pub fn is_memory_name(name: &str) -> bool {
    let n = name.rsplit('.').next().unwrap_or(name);
    let unit = n.split('_').any(|seg| {
        ["gb", "gib", "mb", "mib", "bytes", "footprint"]
            .iter()
            .any(|u| seg.eq_ignore_ascii_case(u))
            || seg.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("mem"))
    });
    let has = |w: &str| {
        n.as_bytes()
            .windows(w.len())
            .any(|win| win.eq_ignore_ascii_case(w.as_bytes()))
    };
    unit && [
        "activ", "optim", "grad", "adam", "state", "moment", "model", "weight", "param",
    ]
    .iter()
    .any(|w| has(w))
}

/// One symbol with its coefficient.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    pub symbol: String,
    /// Role of the symbol itself.
    pub role: Role,
    /// The component this term was counted as: the role of the outermost named value it was
    /// reached through (`optimizer_state_gb = model_size_gb * 2` makes `model_size_gb` part of
    /// the optimizer component), or its own role.
    pub part: Role,
    pub coef: f64,
    /// The smallest expression holding the symbol and its multipliers.
    pub span: Range<usize>,
    /// Where the symbol itself is written.
    pub symbol_span: Range<usize>,
    /// The one numeric literal its coefficient came from, if exactly one (a fix can rewrite it).
    pub literal: Option<Range<usize>>,
    /// Value unknown (a product of symbols, a call): rules must not reason about its size.
    pub opaque: bool,
    /// The symbol's value when it was assigned a literal (`model_size_gb = 14`).
    pub value: Option<f64>,
    /// A per-device share (`params_gb / world_size`): the count it is divided by, as written
    /// (the last one). Such a term is opaque to rules that judge whole-model sums.
    pub divided_by: Option<String>,
    /// Every device count it was divided by, in order (`/ (tp * pp)` then `/ num_gpus`).
    pub device_divisors: Vec<DeviceCount>,
}

/// How much of an opaque term's text is kept as its symbol.
const OPAQUE_TEXT: usize = 200;

/// A linear expression: Σ coef·symbol + constant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lin {
    pub terms: Vec<Term>,
    pub constant: f64,
    /// Span of the single literal this expression is, when it is one (for fixes).
    pub const_literal: Option<Range<usize>>,
    /// Roles of every name read while lowering, substituted ones included.
    pub roles_seen: Vec<Role>,
}

impl Lin {
    pub fn constant(value: f64, literal: Option<Range<usize>>) -> Lin {
        Lin {
            constant: value,
            const_literal: literal,
            ..Lin::default()
        }
    }

    pub fn symbol(name: &str, span: Range<usize>) -> Lin {
        Lin::named(name, span, role_of(name))
    }

    fn named(name: &str, span: Range<usize>, role: Role) -> Lin {
        Lin {
            terms: vec![Term {
                symbol: name.to_string(),
                role,
                part: role,
                coef: 1.0,
                span: span.clone(),
                symbol_span: span,
                literal: None,
                opaque: false,
                value: None,
                divided_by: None,
                device_divisors: Vec::new(),
            }],
            roles_seen: vec![role],
            ..Lin::default()
        }
    }

    /// A symbol whose role is known from where its value comes from, not from its name.
    pub fn with_role(mut self, role: Role) -> Lin {
        for t in &mut self.terms {
            t.role = role;
            t.part = role;
        }
        self
    }

    /// An unknown value built from the given parts (a product of symbols, a call).
    pub fn opaque(text: &str, span: Range<usize>, parts: &[&Lin]) -> Lin {
        let mut roles: Vec<Role> = parts
            .iter()
            .flat_map(|p| p.terms.iter().map(|t| t.role))
            .collect();
        roles.sort();
        let role = roles
            .iter()
            .copied()
            .find(|r| *r != Role::Unknown)
            .unwrap_or(Role::Unknown);
        // Not `symbol`: the role comes from the parts. Nested input makes every enclosing
        // expression opaque in turn: asking `role_of` about each one's text, or keeping a copy of
        // each, is quadratic in time and memory; the text kept is only a reminder.
        let cut = crate::source::floor_char_boundary(text, OPAQUE_TEXT.min(text.len()));
        let mut lin = if cut < text.len() {
            Lin::named(&format!("{}…", &text[..cut]), span, role)
        } else {
            Lin::named(text, span, role)
        };
        if let Some(t) = lin.terms.first_mut() {
            t.opaque = true;
        }
        lin.roles_seen = parts.iter().flat_map(|p| p.roles_seen.clone()).collect();
        lin
    }

    /// A symbol whose value is known: it stays a symbol (its role matters) and carries the value.
    pub fn known(name: &str, span: Range<usize>, value: f64) -> Lin {
        let mut lin = Lin::symbol(name, span);
        if let Some(t) = lin.terms.first_mut() {
            t.value = Some(value);
        }
        lin
    }

    pub fn is_constant(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn plus(mut self, other: Lin) -> Lin {
        self.terms.extend(other.terms);
        self.constant += other.constant;
        self.const_literal = None;
        self.roles_seen.extend(other.roles_seen);
        self
    }

    pub fn negated(self) -> Lin {
        self.scale(-1.0, None, None)
    }

    /// Multiply by a known number. `literal` is the literal it was written as; `span` the whole
    /// product expression.
    pub fn scale(
        mut self,
        k: f64,
        literal: Option<Range<usize>>,
        span: Option<Range<usize>>,
    ) -> Lin {
        let single = self.terms.len() == 1;
        for t in &mut self.terms {
            if (k.abs() - 1.0).abs() > f64::EPSILON {
                t.literal = match (&t.literal, &literal) {
                    (None, Some(l)) if single && (t.coef.abs() - 1.0).abs() < f64::EPSILON => {
                        Some(l.clone())
                    }
                    _ => None,
                };
            }
            t.coef *= k;
            if let (true, Some(s)) = (single, &span) {
                t.span = s.clone();
            }
        }
        self.constant *= k;
        self.const_literal = None;
        self
    }

    /// Every term reached through a named value of role `part` counts as that component.
    pub fn through(mut self, name_role: Role) -> Lin {
        if name_role.is_component() {
            for t in &mut self.terms {
                t.part = name_role;
            }
        }
        self.roles_seen.push(name_role);
        self
    }

    /// Combine two lowered operands under a binary operator (`+ - * / // **`); anything else, or a
    /// product of two unknowns, is opaque.
    pub fn binary(op: &str, a: Lin, b: Lin, text: &str, span: Range<usize>) -> Lin {
        match op {
            "+" => a.plus(b),
            "-" => a.plus(b.negated()),
            "*" => {
                if b.is_constant() {
                    let lit = b.const_literal.clone();
                    a.scale(b.constant, lit, Some(span))
                } else if a.is_constant() {
                    let lit = a.const_literal.clone();
                    b.scale(a.constant, lit, Some(span))
                } else {
                    Lin::opaque(text, span, &[&a, &b])
                }
            }
            "/" | "//" if b.is_constant() && b.constant != 0.0 => {
                if a.is_constant() {
                    Lin::constant(a.constant / b.constant, None)
                } else {
                    a.scale(1.0 / b.constant, None, Some(span))
                }
            }
            "/" | "//"
                if (a.is_linear() || a.terms.len() == 1)
                    && !a.is_constant()
                    && b.counts_devices() =>
            {
                a.shared_by(&b, span)
            }
            "**" if a.is_constant() && b.is_constant() => {
                Lin::constant(a.constant.powf(b.constant), None)
            }
            _ => Lin::opaque(text, span, &[&a, &b]),
        }
    }

    /// A name read where its value may be known. A known number stays a symbol (its role is what
    /// rules read) carrying the value; a linear value is substituted, its terms counted as the
    /// component the name stands for; a plain alias is re-pointed here, where a fix would rewrite.
    pub fn read(name: &str, span: Range<usize>, value: Option<&Lin>) -> Lin {
        let role = role_of(name);
        let Some(value) = value.filter(|v| !v.hides_role(role)) else {
            return Lin::symbol(name, span);
        };
        if value.terms.is_empty() {
            return if role == Role::Unknown {
                value.clone()
            } else {
                Lin::known(name, span, value.constant)
            };
        }
        let mut lin = value.clone().through(role);
        if let [t] = lin.terms.as_mut_slice() {
            if t.coef == 1.0 && lin.constant == 0.0 {
                t.symbol_span = span.clone();
                t.span = span;
            }
        }
        lin
    }

    /// A single count of devices (`world_size`, `(tp * pp)`).
    pub fn counts_devices(&self) -> bool {
        matches!(self.terms.as_slice(), [t] if t.role == Role::Devices && t.coef == 1.0 && t.divided_by.is_none())
            && self.constant == 0.0
    }

    /// Each term divided by a device count: a per-device share.
    fn shared_by(mut self, devices: &Lin, span: Range<usize>) -> Lin {
        let by = devices.terms.first().map(|t| t.symbol.clone());
        let kind = by.as_deref().and_then(device_count);
        let single = self.terms.len() == 1;
        for t in &mut self.terms {
            t.opaque = true;
            t.literal = None;
            t.divided_by = by.clone();
            t.device_divisors.extend(kind);
            if single {
                t.span = span.clone();
            }
        }
        self.constant = 0.0;
        self.const_literal = None;
        self.roles_seen.push(Role::Devices);
        self
    }

    /// Every term's value is known up to its symbols: safe to substitute for a name.
    pub fn is_linear(&self) -> bool {
        self.terms.iter().all(|t| !t.opaque)
    }

    /// Worth substituting for a name: linear, or per-device shares whose divisors a later
    /// formula must see (`per_gpu_mem = mem / world_size; total = per_gpu_mem + ...`).
    pub fn is_bindable(&self) -> bool {
        self.terms
            .iter()
            .all(|t| !t.opaque || t.divided_by.is_some())
    }

    /// Sized by the model: the only expressions memory rules read.
    pub fn is_sized(&self) -> bool {
        self.terms
            .iter()
            .any(|t| matches!(t.role, Role::Model | Role::ParamCount))
    }

    /// Whether substituting this value for a name of role `name_role` would lose what the name
    /// says: a role-less alias (`gpu_memory_gb=$1`) is better kept as the name.
    pub fn hides_role(&self, name_role: Role) -> bool {
        name_role != Role::Unknown
            && !self.terms.is_empty()
            && self.terms.iter().all(|t| t.role == Role::Unknown)
    }

    pub fn saw(&self, role: Role) -> bool {
        self.roles_seen.contains(&role) || self.terms.iter().any(|t| t.role == role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_from_names() {
        assert_eq!(role_of("self.model_size_gb"), Role::Model);
        assert_eq!(role_of("available_memory_gb"), Role::Gpu);
        assert_eq!(role_of("gpu_memory_gb"), Role::Gpu);
        assert_eq!(role_of("optimizer_state_gb"), Role::Optimizer);
        assert_eq!(role_of("gradients_gb"), Role::Grads);
        assert_eq!(role_of("gradient_accumulation_steps"), Role::Unknown);
        assert_eq!(role_of("cuda_overhead_gb"), Role::Overhead);
        assert_eq!(role_of("safety_margin_gb"), Role::Overhead);
        assert_eq!(role_of("fixed_memory_gb"), Role::Total);
        assert_eq!(role_of("memory_for_batch"), Role::Activations);
        assert_eq!(role_of("n_params"), Role::ParamCount);
        assert_eq!(role_of("model_params_gb"), Role::Model);
        assert_eq!(role_of("kv_cache_gb"), Role::KvCache);
        assert_eq!(role_of("param_max_chunk_size"), Role::Unknown);
        assert_eq!(role_of("embedding_params"), Role::Unknown);
        assert_eq!(role_of("model_memory"), Role::Model);
        assert_eq!(role_of("model_size"), Role::Model);
    }

    #[test]
    fn scaling_keeps_the_one_literal() {
        let lin = Lin::symbol("model_gb", 0..8).scale(2.0, Some(11..12), Some(0..12));
        assert_eq!(lin.terms[0].coef, 2.0);
        assert_eq!(lin.terms[0].literal, Some(11..12));
        let twice = lin.scale(3.0, Some(15..16), None);
        assert_eq!(twice.terms[0].literal, None);
    }
}
