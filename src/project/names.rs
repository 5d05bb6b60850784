//! Model names and quantities: the keys that state a parameter count, name a model or state a
//! GPU's memory; the parameter count written in a model's name (`Llama-2-7b-hf`) is read by
//! [`crate::expr::params_from_name`].

pub use crate::expr::params_from_name;

/// Config keys and flags that state a parameter count.
pub(super) const PARAM_KEYS: &[&str] = &[
    "n_params",
    "num_params",
    "num_parameters",
    "n_parameters",
    "param_count",
    "parameter_count",
    "model_params",
    "total_params",
    "num_model_params",
];

/// Config keys and flags that name a model.
pub const MODEL_KEYS: &[&str] = &[
    "model_name_or_path",
    "model_name",
    "base_model",
    "pretrained_model_name_or_path",
    "model_id",
    "model_path",
    "model",
];

/// Whether a config key names the model: one of [`MODEL_KEYS`], or a key under a `model`
/// section that names it there (torchtune's `_component_`, `[model] name = "Qwen/Qwen2.5-14B"`).
pub fn names_model(key: &str, parent: &str) -> bool {
    const UNDER_MODEL: &[&str] = &["_component_", "name", "name_or_path", "path", "id"];
    MODEL_KEYS.contains(&key) || (parent == "model" && UNDER_MODEL.contains(&key))
}

/// A name that states a GPU's memory in GB: `gpu_memory_gb`, `GPU_MEM_GB`, `vram_gb`.
pub fn is_gpu_memory_name(name: &str) -> bool {
    let n = name
        .trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('-', "_");
    let unit = n.split('_').any(|s| s == "gb" || s == "gib");
    let gpu = ["gpu", "vram", "device_mem", "hbm", "accelerator_mem"]
        .iter()
        .any(|w| n.contains(w));
    unit && gpu && !n.contains("per_sample") && !n.contains("free") && !n.contains("used")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_memory_names() {
        assert!(is_gpu_memory_name("GPU_MEMORY_GB"));
        assert!(is_gpu_memory_name("--gpu-mem-gib"));
        assert!(!is_gpu_memory_name("gpu_memory_utilization"));
        assert!(!is_gpu_memory_name("free_gpu_gb"));
        assert!(!is_gpu_memory_name("max_memory_gb"));
    }
}
