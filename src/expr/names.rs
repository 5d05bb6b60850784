//! What a name says about the value it holds: a weak signal, read where nothing better is known
//! (how a value is derived and used decides first; see [`super::program`]).

use std::cell::RefCell;
use std::collections::HashMap;

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
    pub fn is_component(self) -> bool {
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
    /// Every process of the job: `world_size`, `num_gpus`.
    Total,
    /// The data-parallel degree: `dp_size`, `data_parallel_size`.
    DataParallel,
    /// The GPUs of one node: `gpus_per_node`, `local_world_size`, `torch.cuda.device_count()`.
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
    // `total_num_gpus`, `total_world_size`: every GPU, said twice.
    let n = n.strip_prefix("total_").unwrap_or(n);
    matches!(
        n,
        "world_size"
            | "world"
            | "num_gpus"
            | "n_gpus"
            | "ngpus"
            | "gpus"
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
    let name = &*snake(name);
    let role = role_of_segment(name);
    // `cfg.model.size_gb`: a size with no part in its name is of the part its section names.
    match name.rsplit_once('.') {
        Some((head, last)) if role == Role::Unknown && names_memory_unit(last) => {
            let section = head.rsplit('.').next().unwrap_or(head);
            match role_of_segment(&format!("{section}_{last}")) {
                r @ (Role::Model | Role::Grads | Role::Optimizer | Role::Activations) => r,
                _ => role,
            }
        }
        _ => role,
    }
}

/// The words of a camel-case name split as underscores split them (`numParamsB` is
/// `num_Params_B`, `gpuMemGiB` is `gpu_Mem_GiB`: a binary unit stays one word), so that every
/// reader of names sees one spelling. A name in one case, or with non-ASCII letters, is as
/// written.
pub fn snake(name: &str) -> std::borrow::Cow<'_, str> {
    let b = name.as_bytes();
    let camel = b
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    if !camel || !name.is_ascii() {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 4);
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let prev = i.checked_sub(1).map(|p| b[p]);
        let word_start = |len: usize| {
            prev.is_some_and(|p| p.is_ascii_alphanumeric())
                && !b.get(i + len).is_some_and(u8::is_ascii_lowercase)
        };
        if let Some(unit) = ["GiB", "MiB", "KiB", "TiB"]
            .iter()
            .find(|u| b[i..].starts_with(u.as_bytes()))
        {
            if word_start(unit.len()) {
                out.push('_');
            }
            out.push_str(unit);
            i += unit.len();
            continue;
        }
        if c.is_ascii_uppercase() {
            let next_lower = b.get(i + 1).is_some_and(u8::is_ascii_lowercase);
            let split = prev.is_some_and(|p| {
                p.is_ascii_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_ascii_uppercase() && next_lower)
            });
            if split {
                out.push('_');
            }
        }
        out.push(char::from(c));
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

fn role_of_segment(name: &str) -> Role {
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
    let sized = names_memory_unit(n) || n.split('_').any(|seg| seg == "vram");
    if has(&[
        "kv_cache",
        "kvcache",
        "kv_mem",
        "kv_gb",
        "cache_gb",
        "cache_mem",
    ]) || n.split('_').any(|seg| seg == "kv" || seg == "cache")
    {
        return Role::KvCache;
    }
    // "Model states" are the weights, gradients and optimizer states together (ZeRO's term).
    if has(&["model_states"]) || (sized && has(&["model_state"])) {
        return Role::Total;
    }
    let grads = has(&["grad"]) && !has(&["accum", "norm", "clip", "checkpoint", "scaler", "ckpt"]);
    let states = has(&[
        "optim",
        "adam",
        "opt_state",
        "moment",
        "_states",
        "state_gb",
        "state_mem",
    ]);
    // `grads_and_states_bytes` names a sum of two parts, not one of them.
    if grads && states {
        return Role::Total;
    }
    if grads {
        return Role::Grads;
    }
    if states {
        return Role::Optimizer;
    }
    if has(&["need", "required", "requirement", "fixed", "footprint"]) {
        return Role::Total;
    }
    // `act` and `acts` in a memory name (`act_budget_gb`, `acts_gib`).
    if has(&[
        "activ", "batch", "sample", "token", "seq", "act_mem", "act_gb", "logit",
    ]) || (names_memory_unit(n) && has_act_segment(n))
    {
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
    let rate = names_a_rate(n);
    if ((has(&["model", "weight", "param"]) && sized) || n == "model_size") && !rate {
        return Role::Model;
    }
    // Bare `params`/`parameters` usually hold the parameters themselves, not their count.
    if !rate
        && matches!(
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
        )
    {
        return Role::ParamCount;
    }
    // A count of the whole model's parameters in words of any order (`param_total`,
    // `num_base_params`, `params_count`); not a layer's or a tensor's (`layer_params`).
    let segs: Vec<&str> = n.split('_').collect();
    let count_words = [
        "n", "num", "nb", "total", "count", "cnt", "all", "base", "model", "full",
    ];
    if !rate
        && !sized
        && segs.len() > 1
        && segs
            .iter()
            .any(|s| matches!(*s, "param" | "params" | "parameter" | "parameters"))
        && segs.iter().all(|s| {
            matches!(*s, "param" | "params" | "parameter" | "parameters") || count_words.contains(s)
        })
    {
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

/// A rate per parameter or element (`BYTES_PER_PARAM`, `bytes_per_elem`,
/// `optimizer_bytes_per_param`): a multiplier, not a size, whatever component it is for.
pub fn names_a_rate(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "per_param",
        "bytes_per",
        "per_elem",
        "per_weight",
        "per_value",
        "bpp",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// A name with a segment for a memory unit or for memory (`amp_bytes`, `resident_gib`,
/// `mem_needed`): whatever it counts, it counts it in memory.
pub fn names_memory_unit(name: &str) -> bool {
    let n = name.rsplit('.').next().unwrap_or(name);
    n.split('_').any(|seg| {
        ["gb", "gib", "mb", "mib", "bytes", "footprint"]
            .iter()
            .any(|u| seg.eq_ignore_ascii_case(u))
            || seg.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("mem"))
    })
}

/// A name for memory that model states or activations take (`activation_gb`,
/// `optimizer_mem`): a role word and a unit or memory word.
pub fn is_memory_name(name: &str) -> bool {
    let n = name.rsplit('.').next().unwrap_or(name);
    let unit = names_memory_unit(n);
    let has = |w: &str| {
        n.as_bytes()
            .windows(w.len())
            .any(|win| win.eq_ignore_ascii_case(w.as_bytes()))
    };
    unit && (has_act_segment(n)
        || [
            "activ", "optim", "grad", "adam", "state", "moment", "model", "weight", "param",
        ]
        .iter()
        .any(|w| has(w)))
}

/// `act` and `acts` say activations only as whole segments of a name (`act_mem_gb`, not
/// `exact_gb`).
fn has_act_segment(name: &str) -> bool {
    name.split('_')
        .any(|seg| seg.eq_ignore_ascii_case("act") || seg.eq_ignore_ascii_case("acts"))
}

/// A name for a count in billions (`PARAMS_B`, `n_params_b`, `model_size_bn`, `billions`): one
/// unit of it is 10^9 parameters.
pub fn billions(name: &str) -> bool {
    count_scale(name) == Some(1e9)
}

/// How many parameters one unit of a count named in billions (`PARAMS_B`, `n_params_bn`,
/// `model_billions`) or millions (`PARAMS_M`, `num_params_million`) stands for.
pub fn count_scale(name: &str) -> Option<f64> {
    let name = &*snake(name);
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    let segs: Vec<&str> = last.split('_').filter(|s| !s.is_empty()).collect();
    let (tail, head) = segs.split_last()?;
    let about_params = head
        .iter()
        .any(|s| s.starts_with("param") || matches!(*s, "n" | "num" | "model"));
    match *tail {
        "billion" | "billions" => Some(1e9),
        "b" | "bn" if about_params => Some(1e9),
        "million" | "millions" => Some(1e6),
        "m" | "mn" if about_params => Some(1e6),
        _ => None,
    }
}

/// A name whose last segment says billions whatever its head (`size_b`, `base_bn`, `llmB`),
/// for a count known by its use: not a batch, a sequence or a step's, nor an amount of memory,
/// and not a one-letter name's (`x_b`, `w_b`).
pub fn billions_suffix(name: &str) -> bool {
    let name = &*snake(name);
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    let Some((head, tail)) = last.rsplit_once('_') else {
        return false;
    };
    matches!(tail, "b" | "bn" | "billion" | "billions")
        && head.len() > 1
        && !counts_something_else(head)
        && !names_memory_unit(&last)
}

/// A count of nodes (`nodes`, `num_nodes`, `nnodes`): times the GPUs of a node, every GPU.
pub fn is_node_count(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    matches!(
        last.trim_matches('_'),
        "nodes"
            | "num_nodes"
            | "nnodes"
            | "n_nodes"
            | "node_count"
            | "num_machines"
            | "nhosts"
            | "num_hosts"
    )
}

/// The component of a memory total a name holding a value labels it as (`weights`, `grads_gb`,
/// `optim`, `"activations"` as a dict key): read for names bound to values, whose role their
/// value gives. Bare component words count here (`params = n * 2` is the weights), where as an
/// unbound symbol `params` says nothing of its size.
pub fn part_of(name: &str) -> Role {
    let role = role_of(name);
    if role.is_component() || role == Role::Trainable {
        return role;
    }
    // A total, or a sum of several parts (`grads_and_states_bytes`), is no one part.
    if role == Role::Total {
        return Role::Unknown;
    }
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    let segs: Vec<&str> = last.split('_').filter(|s| !s.is_empty()).collect();
    let seg = |words: &[&str]| segs.iter().any(|s| words.contains(s));
    if seg(&[
        "state", "states", "master", "opt", "adam", "momentum", "moments",
    ]) {
        return Role::Optimizer;
    }
    if seg(&["act", "acts", "activation", "activations"]) {
        return Role::Activations;
    }
    if seg(&[
        "weights",
        "weight",
        "params",
        "parameters",
        "param",
        "model",
        "w",
    ]) && role == Role::Unknown
    {
        return Role::Model;
    }
    Role::Unknown
}

/// A function named for memory: bytes, a unit or a memory word among its words.
pub fn sizes_memory(name: &str) -> bool {
    name.to_ascii_lowercase().split('_').any(|w| {
        matches!(
            w,
            "bytes"
                | "mem"
                | "memory"
                | "gb"
                | "gib"
                | "mb"
                | "mib"
                | "vram"
                | "footprint"
                | "budget"
        )
    })
}

/// A name that is nothing but a count of parameters (`P`, `n`, `params`, `nparams`): given a
/// number as large as a model's, it counts the model's parameters. A longer name says what
/// else it counts (`largest_layer_params`).
pub fn names_a_count(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    matches!(
        last.as_str(),
        "n" | "p" | "psi" | "params" | "parameters" | "nparams" | "num_param" | "n_param"
    )
}

/// The least a number must be to count a model's parameters by its use alone (the smallest
/// models trained with memory estimates are this size).
const COUNT_BY_USE_MIN: f64 = 5e7;

/// Whether `name`, holding `value`, may be a parameter count known by its use (multiplied by
/// bytes per parameter): a whole number of a model's size, under a name that says nothing
/// else of it (`largest_layer_params`, `LARGEST` and `train_tokens` count something else;
/// `n_total` is a total of something, in no unit of memory; `scratch_bytes` is an amount of
/// memory). A unit (`GB = 1e9`, `GIB = 2**30`) is a power of 1000 or 1024, never a count.
/// A name that counts something other than the model's parameters: batches, tokens, steps,
/// a layer or the largest tensor (a part of the model), a learning rate.
fn counts_something_else(name: &str) -> bool {
    const ELSE: [&str; 12] = [
        "batch", "seq", "token", "step", "sample", "layer", "lr", "flop", "elem", "vocab", "row",
        "largest",
    ];
    let name = name.to_ascii_lowercase();
    ELSE.iter().any(|w| name.contains(w))
}

pub fn may_count_by_use(name: &str, value: f64) -> bool {
    let unit_power = || {
        [1000.0_f64, 1024.0].iter().any(|base| {
            let k = value.ln() / base.ln();
            (k - k.round()).abs() < 1e-9
        })
    };
    // Cheapest first: the scan asks this of every large number a name is given.
    value >= COUNT_BY_USE_MIN
        && value.fract() == 0.0
        && !unit_power()
        // `_MAX_IMAGE_BYTES`, `scratch_mb`: an amount of memory, whatever it sizes.
        && !names_memory_unit(name)
        // A name with `param` in it says what it counts: its role is read from it.
        && !name.to_ascii_lowercase().contains("param")
        && !counts_something_else(name)
        // `n_total`: a total of something that is no memory unit.
        && matches!(role_of(name), Role::Unknown | Role::Total)
}

/// A parameter name that holds a count when a memory function multiplies it (`n`, `psi`,
/// `params`, `num_parameters`).
pub fn counts_parameters(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "n" | "p" | "psi" | "num" | "count" | "params" | "parameters" | "nparams"
    ) || (n.contains("param") && role_of(name) == Role::Unknown && !n.contains("per_"))
}

/// The parameter count in a model name: `Llama-2-7b-hf` → 7e9, `opt-350m` → 3.5e8,
/// `torchtune.models.llama3_1.lora_llama3_1_8b` → 8e9. Mixture names (`8x7B`) are not read.
pub fn params_from_name(name: &str) -> Option<f64> {
    let lower = name.to_ascii_lowercase();
    let last = lower.rsplit('/').next().unwrap_or(&lower);
    // Mixture-of-experts names give active sizes (`Qwen1.5-MoE-A2.7B`) or expert products.
    let active = last.split(['-', '_']).any(|seg| {
        seg.len() > 1 && seg.starts_with('a') && seg[1..].starts_with(|c: char| c.is_ascii_digit())
    });
    if last.contains("moe") || active {
        return None;
    }
    let mut found = None;
    for seg in last.split(['-', '_', '.', ':']) {
        let (num, unit) = match seg.char_indices().last() {
            Some((i, c @ ('b' | 'm'))) => (&seg[..i], c),
            _ => continue,
        };
        if num.is_empty() || num.contains('x') {
            continue;
        }
        let Ok(v) = num.parse::<f64>() else { continue };
        if v <= 0.0 {
            continue;
        }
        let count = if unit == 'b' { v * 1e9 } else { v * 1e6 };
        if found.is_some() {
            return None; // two sizes in one name: not sure which
        }
        found = Some(count);
    }
    // Decimal sizes (`Qwen2.5-0.5B`) are split at the dot: read them whole.
    if found.is_none() || last.contains('.') {
        for w in last.split(['-', '_', '/', ':']) {
            if let Some(num) = w.strip_suffix('b') {
                if num.contains('.') {
                    if let Ok(v) = num.parse::<f64>() {
                        return Some(v * 1e9);
                    }
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_model_names() {
        let cases: &[(&str, Option<f64>)] = &[
            ("meta-llama/Llama-2-7b-hf", Some(7e9)),
            ("meta-llama/Llama-3.1-8B", Some(8e9)),
            ("Qwen/Qwen2.5-0.5B-Instruct", Some(0.5e9)),
            ("EleutherAI/pythia-6.9b", Some(6.9e9)),
            ("facebook/opt-350m", Some(350e6)),
            ("torchtune.models.llama3_1.lora_llama3_1_70b", Some(70e9)),
            ("mistralai/Mistral-7B-v0.1", Some(7e9)),
            ("mistralai/Mixtral-8x7B-v0.1", None),
            ("Qwen/Qwen1.5-MoE-A2.7B", None),
            ("Qwen/Qwen3-30B-A3B", None),
            ("bigscience/bloom-7b1", None),
            ("bert-base-uncased", None),
            ("gpt2-xl", None),
        ];
        for (name, want) in cases {
            assert_eq!(params_from_name(name), *want, "{name}");
        }
    }

    #[test]
    fn camel_case_names_read_as_their_words() {
        assert_eq!(snake("nParamsB"), "n_Params_B");
        assert_eq!(snake("gpuMemGiB"), "gpu_Mem_GiB");
        assert_eq!(snake("GPUMemGB"), "GPU_Mem_GB");
        assert_eq!(snake("weights_gb"), "weights_gb");
        assert_eq!(snake("TOTAL_GB"), "TOTAL_GB");
        assert_eq!(count_scale("nB"), Some(1e9));
        // A suffix alone says billions only where a product with bytes shows a count.
        assert!(billions_suffix("size_b"));
        assert!(billions_suffix("llmBn"));
        assert!(!billions_suffix("w_b"));
        assert!(!billions_suffix("batch_b"));
        assert!(!billions_suffix("size"));
        // A count of the whole model's parameters in words of any order.
        assert_eq!(role_of("param_total"), Role::ParamCount);
        assert_eq!(role_of("total_num_params"), Role::ParamCount);
        assert_eq!(role_of("params"), Role::Unknown);
        assert_ne!(role_of("layer_params"), Role::ParamCount);
        assert_eq!(count_scale("paramsBn"), Some(1e9));
        assert_eq!(count_scale("fp32B"), None);
        assert_eq!(role_of("numParams"), role_of("num_params"));
    }
}
