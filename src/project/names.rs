//! Model names and quantities: the keys that state a parameter count, name a model or state a
//! GPU's memory, and the parameter count written in a model's name (`Llama-2-7b-hf`).

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
    fn gpu_memory_names() {
        assert!(is_gpu_memory_name("GPU_MEMORY_GB"));
        assert!(is_gpu_memory_name("--gpu-mem-gib"));
        assert!(!is_gpu_memory_name("gpu_memory_utilization"));
        assert!(!is_gpu_memory_name("free_gpu_gb"));
        assert!(!is_gpu_memory_name("max_memory_gb"));
    }
}
