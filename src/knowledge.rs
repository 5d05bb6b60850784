//! The cited knowledge tables under `rules/knowledge/`, embedded at build time. Rules read every
//! multiplier from here; none is hidden in rule code.

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::OnceLock;

include!(concat!(env!("OUT_DIR"), "/catalog.rs"));

#[derive(Debug, Deserialize)]
pub struct OptimizerRow {
    pub id: String,
    pub display: String,
    #[serde(rename = "match")]
    pub names: Vec<String>,
    pub states: f64,
    pub state_dtype: String,
    pub bytes_per_param_fp32: f64,
    pub bytes_per_param_bf16: f64,
    #[serde(default = "yes")]
    pub known: bool,
    pub source: String,
}

fn yes() -> bool {
    true
}

impl OptimizerRow {
    /// Optimizer-state size in units of the weights' own size, the least it can be whatever the
    /// parameter dtype (fp32 or 16-bit).
    pub fn state_multiplier_min(&self) -> f64 {
        (self.bytes_per_param_fp32 / 4.0).min(self.bytes_per_param_bf16 / 2.0)
    }

    /// How the states are stored, for messages.
    pub fn state_dtype_words(&self) -> &'static str {
        match self.state_dtype.as_str() {
            "param" => "in the weights' dtype",
            "8bit" => "8-bit with block scales",
            _ => "always fp32",
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct DtypeRow {
    pub id: String,
    #[serde(rename = "match")]
    pub names: Vec<String>,
    pub bytes: f64,
    pub bits: f64,
    pub source: String,
}

/// The memory of one GPU (`rules/knowledge/gpus.toml`).
#[derive(Debug, Deserialize)]
pub struct GpuRow {
    pub id: String,
    pub names: Vec<String>,
    /// The capacity as the vendor states it (`80 GB`).
    pub stated: String,
    /// The total the device reports.
    pub bytes: f64,
    pub source: String,
    pub bytes_source: String,
}

#[derive(Debug, Deserialize)]
struct GpuTable {
    gpu: Vec<GpuRow>,
}

/// Which model states a ZeRO stage divides over the data-parallel ranks.
#[derive(Debug, Deserialize)]
pub struct StageRow {
    pub stage: u8,
    pub display: String,
    pub params: bool,
    pub grads: bool,
    pub optimizer_states: bool,
    pub formula: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
struct StageTable {
    stage: Vec<StageRow>,
}

/// What a training process holds beyond its tensors (`rules/knowledge/runtime.toml`).
#[derive(Debug, Deserialize, Default)]
pub struct Runtime {
    #[serde(default)]
    pub step_temporary: Vec<StepTemporary>,
    #[serde(default)]
    pub allocator: AllocatorRow,
    #[serde(default)]
    pub context: FixedRow,
    #[serde(default)]
    pub nccl: FixedRow,
    #[serde(default)]
    pub fsdp: FsdpRow,
    #[serde(default)]
    pub autocast: AutocastRow,
}

/// Bytes per trained fp32 parameter of the 16-bit copies autocast keeps.
#[derive(Debug, Deserialize, Default)]
pub struct AutocastRow {
    pub copy_bytes: f64,
    pub source: String,
}

/// What FSDP holds unsharded beside the shards: units all-gathered at once, and the
/// reduce-scatter buffers of a unit's gradients, in units.
#[derive(Debug, Deserialize, Default)]
pub struct FsdpRow {
    pub all_gathers: f64,
    pub reduce_scatter_buffers: f64,
    pub source: String,
}

/// A temporary an optimizer's step allocates beside its states, in moments (one state's size).
#[derive(Debug, Deserialize)]
pub struct StepTemporary {
    pub optimizer: String,
    pub moments: f64,
    /// Spellings of the same optimizer whose step updates in place and holds no temporary.
    #[serde(default)]
    pub in_place: Vec<String>,
    pub source: String,
}

/// The caching allocator's cached-but-unused bytes per byte of the step's working set.
#[derive(Debug, Deserialize, Default)]
pub struct AllocatorRow {
    pub fragmentation: f64,
    pub source: String,
}

/// A fixed amount per GPU (the CUDA context, NCCL's buffers).
#[derive(Debug, Deserialize, Default)]
pub struct FixedRow {
    pub bytes: f64,
    pub source: String,
}

#[derive(Debug, Deserialize)]
struct OptimizerTable {
    optimizer: Vec<OptimizerRow>,
}

#[derive(Debug, Deserialize)]
struct DtypeTable {
    dtype: Vec<DtypeRow>,
}

#[derive(Debug)]
pub struct Knowledge {
    pub optimizers: Vec<OptimizerRow>,
    pub dtypes: Vec<DtypeRow>,
    pub stages: Vec<StageRow>,
    pub gpus: Vec<GpuRow>,
    pub runtime: Runtime,
    /// Every optimizer name, normalized, with its row's index: the lookup runs for every
    /// optimizer a file mentions.
    optimizer_names: HashMap<String, usize>,
}

fn table(name: &str) -> &'static str {
    TABLES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or("")
}

/// The tables, parsed once. They are part of the binary: a parse failure is a build defect that
/// the test suite catches, so here it degrades to empty tables rather than a panic.
pub fn knowledge() -> &'static Knowledge {
    static K: OnceLock<Knowledge> = OnceLock::new();
    K.get_or_init(|| {
        let optimizers: Vec<OptimizerRow> = toml::from_str::<OptimizerTable>(table("optimizers"))
            .map(|t| t.optimizer)
            .unwrap_or_default();
        let mut optimizer_names = HashMap::new();
        for (i, o) in optimizers.iter().enumerate() {
            for name in &o.names {
                // The first row that holds a name keeps it.
                optimizer_names.entry(normalize(name)).or_insert(i);
            }
        }
        Knowledge {
            optimizers,
            optimizer_names,
            dtypes: toml::from_str::<DtypeTable>(table("dtypes"))
                .map(|t| t.dtype)
                .unwrap_or_default(),
            stages: toml::from_str::<StageTable>(table("sharding"))
                .map(|t| t.stage)
                .unwrap_or_default(),
            gpus: toml::from_str::<GpuTable>(table("gpus"))
                .map(|t| t.gpu)
                .unwrap_or_default(),
            runtime: toml::from_str::<Runtime>(table("runtime")).unwrap_or_default(),
        }
    })
}

impl Knowledge {
    /// The row for an optimizer as written (`AdamW`, `adamw_torch`, `bnb.optim.AdamW8bit`).
    pub fn optimizer(&self, name: &str) -> Option<&OptimizerRow> {
        let index = self.optimizer_names.get(&normalize(name))?;
        self.optimizers.get(*index)
    }

    /// The row for a dtype as written (`bf16`, `torch.float16`, `half`).
    pub fn dtype(&self, name: &str) -> Option<&DtypeRow> {
        let n = name.to_ascii_lowercase();
        let last = n.rsplit('.').next().unwrap_or(&n).to_string();
        self.dtypes
            .iter()
            .find(|d| d.names.iter().any(|m| *m == n || *m == last))
    }

    pub fn stage(&self, stage: u8) -> Option<&StageRow> {
        self.stages.iter().find(|s| s.stage == stage)
    }

    pub fn optimizer_by_id(&self, id: &str) -> Option<&OptimizerRow> {
        self.optimizers.iter().find(|o| o.id == id)
    }

    /// The GPU a name means (`H100`, `a100-80gb`, `NVIDIA GeForce RTX 4090`); `Err` with the
    /// GPUs it could mean when it names a family of several sizes (`A100`).
    pub fn gpu(&self, name: &str) -> Result<&GpuRow, Vec<&GpuRow>> {
        let n = gpu_key(name);
        let exact = self
            .gpus
            .iter()
            .find(|g| g.id == name || g.names.iter().any(|m| gpu_key(m) == n));
        if let Some(g) = exact {
            return Ok(g);
        }
        let family = match n.is_empty() {
            true => Vec::new(),
            false => self
                .gpus
                .iter()
                .filter(|g| g.names.iter().any(|m| gpu_key(m).starts_with(&n)))
                .collect(),
        };
        Err(family)
    }
}

/// A GPU name as the lookup compares it: lowercase, without spaces, `-`, `_` and the vendor's
/// brand words.
fn gpu_key(name: &str) -> String {
    let mut n = name.to_ascii_lowercase().replace([' ', '-', '_'], "");
    for brand in ["nvidia", "geforce", "tesla", "amd", "instinct"] {
        if let Some(rest) = n.strip_prefix(brand) {
            n = rest.to_string();
        }
    }
    n
}

/// An optimizer name as the lookup compares it: last segment, lowercase, no `-` or `_`.
pub fn normalize(name: &str) -> String {
    let last = name.rsplit('.').next().unwrap_or(name);
    last.to_ascii_lowercase().replace(['-', '_'], "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_parse_and_cite_sources() {
        let k = knowledge();
        assert!(k.optimizers.len() >= 10, "optimizers.toml did not parse");
        assert!(k.dtypes.len() >= 8, "dtypes.toml did not parse");
        for o in &k.optimizers {
            assert!(!o.source.trim().is_empty(), "{} has no source", o.id);
        }
        for d in &k.dtypes {
            assert!(!d.source.trim().is_empty(), "{} has no source", d.id);
        }
        assert!(k.gpus.len() >= 18, "gpus.toml did not parse");
        for g in &k.gpus {
            assert!(g.source.starts_with("https://"), "{} has no source", g.id);
            assert!(g.bytes > 1e10, "{}: {} bytes", g.id, g.bytes);
        }
        let id = |name: &str| k.gpu(name).map(|g| g.id.as_str()).map_err(|f| f.len());
        assert_eq!(id("H100"), Ok("h100-sxm"));
        assert_eq!(id("NVIDIA GeForce RTX 4090"), Ok("rtx-4090"));
        assert_eq!(id("a100_80gb"), Ok("a100-80gb"));
        assert_eq!(id("A100"), Err(2));
        assert_eq!(id("TPU"), Err(0));
        // Each stage shards what the one before it does, and one more state.
        let sharded: Vec<(bool, bool, bool)> = (0..=3)
            .filter_map(|n| k.stage(n))
            .map(|s| (s.optimizer_states, s.grads, s.params))
            .collect();
        assert_eq!(
            sharded,
            [
                (false, false, false),
                (true, false, false),
                (true, true, false),
                (true, true, true)
            ]
        );
        assert!(k.stages.iter().all(|s| !s.source.trim().is_empty()));
        let r = &k.runtime;
        assert!(r.context.bytes > 1e8, "runtime.toml did not parse");
        assert!(r.nccl.bytes > 1e8 && r.allocator.fragmentation > 0.0);
        assert!(r.fsdp.all_gathers >= 1.0 && r.fsdp.reduce_scatter_buffers >= 1.0);
        for source in [
            &r.context.source,
            &r.nccl.source,
            &r.allocator.source,
            &r.fsdp.source,
            &r.autocast.source,
        ] {
            assert!(!source.trim().is_empty());
        }
        assert!(r.step_temporary.iter().all(|t| !t.source.is_empty()));
        assert!(k.optimizer_by_id(&r.step_temporary[0].optimizer).is_some());
        // Every in-place spelling names the row's own optimizer.
        for t in &r.step_temporary {
            for name in &t.in_place {
                let row = k.optimizer(name).map(|o| o.id.as_str());
                assert_eq!(row, Some(t.optimizer.as_str()), "{name}");
            }
        }
    }

    #[test]
    fn adamw_is_four_times_the_weights_at_least() {
        let k = knowledge();
        let adamw = k.optimizer("torch.optim.AdamW").expect("adamw row");
        assert_eq!(adamw.state_multiplier_min(), 2.0);
        assert_eq!(
            k.optimizer("adamw_torch").map(|o| o.id.as_str()),
            Some(adamw.id.as_str())
        );
        let sgd = k.optimizer("SGD").expect("sgd row");
        assert_eq!(sgd.state_multiplier_min(), 0.0);
    }
}
