//! YAML and JSON files: a config can matter only through a key some reader of configs looks at
//! (the evidence of [`crate::frontend::config`], the project's runs, the batch rules, the
//! estimate's inputs). A test data file, a tokenizer's vocabulary or a table of golden values
//! holds none of them, and reading it whole (a tree of nodes, each with its span) is the largest
//! cost of a run over a repository that keeps hundreds of them under `tests/`.
//!
//! A key is the word written before a `:`, quoted or not; each is compared, lowercased with `_`
//! for `-` and no leading dashes, whole and by its dotted segments, with the words below. The
//! words are wider than the readers' lists (a key holding `batch`, `optim` or `zero` is kept
//! whatever follows), so a reader that learns a new key of an old family still sees its files;
//! a reader of a new family adds its word here (the tests hold every key list the readers use
//! against this scan). A file with more keys than anyone writes in a config is data. A file a
//! run names is read whole whatever this scan says.

use super::scan::contains;
use crate::source::Language;

/// Keys that matter wherever a part of them is written: the families the readers look at.
const PARTS: &[&str] = &[
    "batch",
    "accum",
    "optim",
    "zero_",
    "tp_",
    "pp_",
    "autotp",
    "zero1",
    "zero2",
    "zero3",
    "_component_",
    "_target_",
    "class_path",
    "deepspeed",
    "ds_",
    "fsdp",
    "shard",
    "offload",
    "checkpoint",
    "recompute",
    "parallel",
    "precision",
    "dtype",
    "16",
    "fp8",
    "fp32",
    "lora",
    "peft",
    "adapter",
    "tuning",
    "quant",
    "bit",
    "param",
    "model",
    "seq",
    "len",
    "block_size",
    "context",
    "micro",
    "node",
    "machines",
    "processes",
    "nproc",
    "gpu",
    "vram",
    "hbm",
    "device_mem",
    "accelerator_mem",
    "world",
    "distributed",
    "compute_environment",
    "packing",
    "group_texts",
    "grad",
    "learning_rate",
    "schedul",
    "elastic",
    "steps_per_print",
    "wall_clock",
    "weight_decay",
    "adam",
    "momentum",
    "ulysses",
    "virtual_tokens",
    "do_train",
    "do_eval",
    "do_predict",
    "target_modules",
    "modules_to_save",
    "ntasks",
    "recipe",
    "config_file",
    "dist_config",
];

/// Keys that matter only written whole (too short to be looked for inside other words).
const WHOLE: &[&str] = &[
    "zero", "lr", "r", "tp", "pp", "cp", "ep", "opt", "half", "float", "moe", "ema", "sft",
];

/// More keys than anyone writes in a config: a file with more `:` than this is data (a
/// tokenizer's vocabulary holds every short word as a key).
const MAX_KEYS: usize = 10_000;

/// Whether the config's text holds a key some reader looks at, or a directive (in YAML: JSON
/// has no comments to hold one, and a vocabulary may hold `noqa` as a word).
pub(super) fn holds_known_key(text: &str, language: Language) -> bool {
    let bytes = text.as_bytes();
    if language != Language::Json && (contains(bytes, b"memlint") || contains(bytes, b"noqa")) {
        return true;
    }
    if memchr::memchr_iter(b':', bytes).nth(MAX_KEYS).is_some() {
        return false;
    }
    let mut key = Vec::with_capacity(64);
    memchr::memchr_iter(b':', bytes).any(|colon| {
        let mut end = colon;
        while end > 0 && matches!(bytes[end - 1], b' ' | b'\t') {
            end -= 1;
        }
        if end > 0 && matches!(bytes[end - 1], b'"' | b'\'') {
            end -= 1;
        } else if language == Language::Json {
            // A JSON key is a string: a colon after anything else sits inside a value (a data
            // file's text, "Answer: ...").
            return false;
        }
        let mut start = end;
        while start > 0 && end - start < 128 && is_key_byte(bytes[start - 1]) {
            start -= 1;
        }
        // Numbers (`"10": 1.5`, a golden value's step) are never keys a reader looks at.
        if start == end || bytes[start].is_ascii_digit() {
            return false;
        }
        key.clear();
        let word = &bytes[start..end];
        let word = &word[word.iter().take_while(|b| **b == b'-').count()..];
        key.extend(word.iter().map(|b| match b {
            b'-' => b'_',
            b => b.to_ascii_lowercase(),
        }));
        known(&key)
    })
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// A normalised key, or one of its dotted segments, is one the readers look at.
fn known(key: &[u8]) -> bool {
    // One automaton for every part: a data file asks about each of its keys.
    static PARTS_SEARCH: std::sync::OnceLock<Option<aho_corasick::AhoCorasick>> =
        std::sync::OnceLock::new();
    let parts = PARTS_SEARCH.get_or_init(|| aho_corasick::AhoCorasick::new(PARTS).ok());
    let has_part = |k: &[u8]| match parts {
        Some(ac) => ac.is_match(k),
        None => PARTS.iter().any(|p| contains(k, p.as_bytes())),
    };
    // No part holds a `.`, so a part in the key is a part in one of its segments; a key without
    // a `.` is its own only segment.
    has_part(key)
        || key
            .split(|b| *b == b'.')
            .any(|k| WHOLE.iter().any(|w| k == w.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(text: &str) -> bool {
        holds_known_key(text, Language::Yaml)
    }

    #[test]
    fn data_files_hold_no_key() {
        let golden = "{\n  \"lm loss\": {\n    \"start_step\": 1,\n    \"values\": {\"1\": 10.8, \"5\": 9.1}\n  },\n  \"mem-allocated-bytes\": {\"values\": {\"1\": 1e9}},\n  \"iteration-time\": {\"values\": {}}\n}\n";
        assert!(!holds(golden));
        assert!(!holds("[{\"text\": \"a: b\", \"label\": 1}]"));
        let records = "[{\"instruction\": \"Name the model: GPT\", \"output\": \"lr: 1e-4\"}]";
        assert!(!holds_known_key(records, Language::Json));
        assert!(holds_known_key("{\"lr\" : 1e-4}", Language::Json));
        assert!(!holds("name: ci\non:\n  push:\n    branches: [main]\n"));
        // A vocabulary holds every short word, and more keys than any config.
        let vocab: String = (0..20_000).map(|i| format!("\"w{i}\": {i}, ")).collect();
        assert!(!holds(&format!("{{\"lr\": 0, \"model\": 1, {vocab}}}")));
        // A vocabulary with `noqa` among its words: JSON has no comment to hold a directive.
        let words = "{\"the\": 1, \"noqa\": 2, \"memlint\": 3}";
        assert!(!holds_known_key(words, Language::Json));
        assert!(holds_known_key("# noqa\nx: 1\n", Language::Yaml));
    }

    #[test]
    fn configs_hold_their_keys() {
        assert!(holds("{\"train_micro_batch_size_per_gpu\": 4}"));
        assert!(holds("optimizer:\n  type: AdamW\n"));
        assert!(holds("- --learning-rate: 1e-4\n"));
        assert!(holds("{\"zero_optimization\": {\"stage\": 3}}"));
        assert!(holds("lr: 0.1\n"));
        assert!(holds("tp: 2\n"));
        assert!(holds("'bf16': true"));
        assert!(holds("trainer.precision: bf16-mixed\n"));
        assert!(holds("# memlint: ignore[BS001]\nx: 1\n"));
        assert!(!holds("lrs: 0.1\n"));
    }

    /// Every key list a reader of configs compares with is kept by the scan: a key added to one
    /// of them fails here until this scan knows its family. `INLINE` holds the keys the readers
    /// compare in place (a `match` on the key, a `get`).
    #[test]
    fn every_key_the_readers_look_at() {
        const INLINE: &[&str] = &[
            "optimizer",
            "optim",
            "_component_",
            "_target_",
            "class_path",
            "zero_optimization",
            "bf16",
            "fp16",
            "bfloat16",
            "dtype",
            "torch_dtype",
            "mixed_precision",
            "half",
            "deepspeed",
            "deepspeed_config",
            "deepspeed_config_file",
            "ds_config",
            "zero_stage",
            "zero",
            "deepspeed_zero_stage",
            "fsdp",
            "fsdp_config",
            "fsdp_sharding_strategy",
            "sharding_strategy",
            "use_distributed_optimizer",
            "zero_hpz_partition_size",
            "mics_shard_size",
            "offload_optimizer",
            "offload_param",
            "offload_optimizer_device",
            "offload_param_device",
            "cpu_offload",
            "cpu_offload_params",
            "optimizer_in_bwd",
            "gradient_checkpointing",
            "use_gradient_checkpointing",
            "enable_activation_checkpointing",
            "activation_checkpointing",
            "checkpoint_activations",
            "fsdp_activation_checkpointing",
            "recompute_granularity",
            "recompute_activations",
            "enable_activation_offloading",
            "offload_activations",
            "cpu_checkpointing",
            "sequence_parallel_size",
            "ds_sequence_parallel_size",
            "ulysses_degree",
            "context_parallel_size",
            "tensor_model_parallel_size",
            "pipeline_model_parallel_size",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "pipe_parallel_size",
            "model_parallel_size",
            "tp_size",
            "pp_size",
            "autotp_size",
            "compute_environment",
            "distributed_type",
            "num_processes",
            "num_machines",
            "nnodes",
            "nproc_per_node",
            "num_nodes",
            "num_gpus",
            "num_gpus_per_node",
            "n_nodes",
            "pre_seq_len",
            "prefix_tuning",
            "prompt_tuning",
            "p_tuning",
            "ptuning",
            "num_virtual_tokens",
            "quantization_bit",
            "load_in_4bit",
            "load_in_8bit",
            "bits",
            "double_quant",
            "do_predict",
            "do_eval",
            "do_train",
            "train_batch_size",
            "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps",
            "steps_per_print",
            "wall_clock_breakdown",
            "zero_allow_untested_optimizer",
            "gradient_clipping",
            "scheduler",
            "auto_find_batch_size",
            "split_batches",
            "elasticity",
            "config_file",
            "dist_config",
            "gpu_memory_gb",
            "vram_gb",
            "gpu_mem_gib",
            "hbm_gb",
            "lora_r",
            "target_modules",
            "modules_to_save",
            "finetuning_type",
            "max_grad_norm",
            "learning_rate",
            "lr",
            "weight_decay",
            "adam_beta1",
            "adam_epsilon",
            "momentum",
            "base_model",
            "micro_batch_size",
        ];
        let lists = crate::project::config_key_lists()
            .into_iter()
            .chain(crate::rules::config_key_lists())
            .chain([
                crate::frontend::LORA_KEYS,
                crate::frontend::python_config::BATCH_KEY_NAMES,
                super::super::BATCH_KEYS,
                INLINE,
            ]);
        for list in lists {
            // LoRA's rank (`r`) is read only in a run that trains LoRA, which a key of the same
            // file shows (`lora_alpha`, `peft`), or a launcher that names the file (a file a run
            // names is read whole).
            for key in list.iter().filter(|k| **k != "r") {
                assert!(holds(&format!("{key}: 1\n")), "{key}");
                assert!(holds(&format!("{{\"{key}\": 1}}")), "{key}");
            }
        }
    }
}
