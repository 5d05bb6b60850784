//! Model shapes: the cited table of well-known open models (`rules/knowledge/models.toml`), found
//! by hub id or short name, and a local Hugging Face `config.json` read in either key style
//! (Llama's `hidden_size`/`num_hidden_layers`, GPT-2's `n_embd`/`n_layer`).

use crate::knowledge::TABLES;
use serde::Deserialize;
use std::path::Path;
use std::sync::OnceLock;

/// What the memory model needs of an architecture.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Shape {
    /// The hub id, or the path of the config it was read from.
    pub id: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub arch: String,
    pub layers: u64,
    /// Decoder layers of an encoder-decoder (T5); `layers` are then the encoder's.
    #[serde(default)]
    pub decoder_layers: Option<u64>,
    pub hidden: u64,
    pub heads: u64,
    #[serde(default)]
    pub kv_heads: Option<u64>,
    #[serde(default)]
    pub head_dim: Option<u64>,
    pub intermediate: u64,
    pub vocab: u64,
    #[serde(default)]
    pub tied_embeddings: bool,
    #[serde(default)]
    pub experts: Option<u64>,
    #[serde(default)]
    pub experts_per_token: Option<u64>,
    #[serde(default)]
    pub max_positions: Option<u64>,
    /// Whether the MLP is gated, where the architecture leaves it open (T5's `feed_forward_proj`
    /// `gated-gelu`); `None` takes the architecture's own.
    #[serde(default)]
    pub gated_mlp: Option<bool>,
    /// Width of one routed expert (`moe_intermediate_size`), when not `intermediate`.
    #[serde(default)]
    pub expert_intermediate: Option<u64>,
    /// Width of the shared expert beside the routed ones (Qwen2-MoE's
    /// `shared_expert_intermediate_size`, DeepSeek's `n_shared_experts` x `moe_intermediate_size`).
    #[serde(default)]
    pub shared_intermediate: Option<u64>,
    /// Leading layers with a dense MLP of `intermediate` (DeepSeek's `first_k_dense_replace`).
    #[serde(default)]
    pub dense_layers: Option<u64>,
    /// Every how many layers an MoE layer comes (Qwen's `decoder_sparse_step`, DeepSeek's
    /// `moe_layer_freq`); 1 when not said.
    #[serde(default)]
    pub moe_every: Option<u64>,
    /// Multi-head latent attention (DeepSeek-V2 and V3).
    #[serde(default)]
    pub mla: Option<Mla>,
    /// Token types of a BERT-style encoder (`type_vocab_size`: 2 for BERT, 1 for RoBERTa).
    #[serde(default)]
    pub type_vocab: Option<u64>,
    /// T5's relative-attention buckets (`relative_attention_num_buckets`).
    #[serde(default)]
    pub relative_buckets: Option<u64>,
    /// The total parameter count (published, or computed from the shape: `params_source`).
    pub params: f64,
    /// The parameters one token uses, for a mixture of experts (published, or from the shape).
    #[serde(default)]
    pub active: Option<f64>,
    #[serde(default)]
    pub params_source: String,
    #[serde(default)]
    pub source: String,
}

/// The shapes of multi-head latent attention: queries through a low-rank projection (or
/// none), keys and values through one shared latent of `kv_lora_rank`, and a rotary part of each
/// head beside the rest.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Mla {
    #[serde(default)]
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

#[derive(Deserialize)]
struct Table {
    model: Vec<Shape>,
}

impl Shape {
    pub fn kv_heads(&self) -> u64 {
        self.kv_heads.unwrap_or(self.heads)
    }

    pub fn head_dim(&self) -> u64 {
        self.head_dim.unwrap_or(self.hidden / self.heads.max(1))
    }

    /// Whether the MLP is gated (three matrices: gate, up, down), as in Llama and its kin.
    pub fn gated(&self) -> bool {
        self.gated_mlp.unwrap_or(matches!(
            self.arch.as_str(),
            "llama"
                | "mixtral"
                | "gemma"
                | "gemma2"
                | "gemma3"
                | "qwen2"
                | "qwen2-moe"
                | "qwen3"
                | "qwen3-moe"
                | "mistral"
                | "phi3"
                | "deepseek-v2"
                | "deepseek-v3"
        ))
    }

    /// Whether the architecture trains with dropout by default (GPT-2, BERT, T5, OPT), which
    /// keeps a 1-byte mask per element (Korthikanti et al. 2022).
    pub fn dropout(&self) -> bool {
        matches!(self.arch.as_str(), "gpt2" | "bert" | "t5" | "opt" | "bloom")
    }

    /// Transformer layers that hold activations (encoder and decoder together).
    pub fn all_layers(&self) -> u64 {
        self.layers + self.decoder_layers.unwrap_or(0)
    }

    /// Routed experts per MoE layer (1 for a dense model).
    pub fn experts(&self) -> u64 {
        self.experts.unwrap_or(1).max(1)
    }

    /// Width of one routed expert's MLP.
    pub fn expert_width(&self) -> u64 {
        self.expert_intermediate.unwrap_or(self.intermediate)
    }

    /// MLP width one token goes through in an MoE layer: its routed experts and the shared
    /// one; `intermediate` in a dense model.
    pub fn active_intermediate(&self) -> u64 {
        if self.experts() <= 1 {
            return self.intermediate;
        }
        let k = self.experts_per_token.unwrap_or(1).min(self.experts());
        k * self.expert_width() + self.shared_intermediate.unwrap_or(0)
    }

    /// Widths of the queries, keys and values of one token over all heads.
    pub fn qkv_widths(&self) -> (u64, u64, u64) {
        match &self.mla {
            Some(m) => {
                let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
                (self.heads * qk, self.heads * qk, self.heads * m.v_head_dim)
            }
            None => {
                let kv = self.kv_heads() * self.head_dim();
                (self.heads * self.head_dim(), kv, kv)
            }
        }
    }
}

fn table() -> &'static [Shape] {
    static T: OnceLock<Vec<Shape>> = OnceLock::new();
    T.get_or_init(|| {
        let text = TABLES
            .iter()
            .find(|(n, _)| *n == "models")
            .map_or("", |(_, t)| *t);
        toml::from_str::<Table>(text)
            .map(|t| t.model)
            .unwrap_or_default()
    })
}

/// Every model of the table.
pub fn known_models() -> &'static [Shape] {
    table()
}

/// The model named by a hub id (`meta-llama/Llama-3.2-3B`), its last part or a short name
/// (`llama-3.2-3b`), case and `_`/`-` aside.
pub fn by_name(name: &str) -> Option<&'static Shape> {
    let key = |s: &str| s.to_ascii_lowercase().replace('_', "-");
    let n = key(name.trim());
    let last = n.rsplit('/').next().unwrap_or(&n).to_string();
    table().iter().find(|m| {
        let id = key(&m.id);
        id == n
            || id.rsplit('/').next() == Some(last.as_str())
            || m.aliases.iter().any(|a| key(a) == n || key(a) == last)
    })
}

/// A sequence length beyond the positions the model was built for: the model would need its
/// position embeddings extended (RoPE scaling) or would fail, and the estimate is for a run
/// that cannot start as given.
pub fn longer_than_the_model(inputs: &super::Inputs) -> Option<String> {
    let shape = inputs.shape.as_ref()?;
    let max = shape.value.max_positions?;
    let seq = inputs.seq_len.as_ref()?;
    (seq.value > max).then(|| {
        format!(
            "sequence length {} ({}) is longer than the {max} positions {} was built for (max_position_embeddings, {}): the run needs the positions extended first (RoPE scaling for a rotary model)",
            seq.value, seq.why, shape.value.id, shape.why
        )
    })
}

/// Read a Hugging Face `config.json` (a file, or a folder holding one).
pub fn from_config(path: &Path) -> Result<Shape, String> {
    let file = if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
    from_config_text(&text, &file.display().to_string())
}

/// A shape from the text of a `config.json`; `id` names the model in the shape and in errors.
pub fn from_config_text(text: &str, id: &str) -> Result<Shape, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{id}: not valid JSON: {e}"))?;
    // Multimodal configs nest the language model's shape.
    from_json(json.get("text_config").unwrap_or(&json), id)
}

/// A GPT-2-style shape from `GPTConfig`'s fields (`block_size` is its positions); `None`
/// without the layers, heads and width.
pub fn gpt_from_fields(fields: &[(&str, u64)], vocab: u64, id: &str) -> Option<Shape> {
    let get = |k: &str| fields.iter().find(|(f, _)| *f == k).map(|(_, v)| *v);
    let mut json = serde_json::json!({
        "model_type": "gpt2",
        "n_layer": get("n_layer")?,
        "n_head": get("n_head")?,
        "n_embd": get("n_embd")?,
        "vocab_size": get("vocab_size").unwrap_or(vocab),
    });
    if let Some(b) = get("block_size") {
        json["n_positions"] = b.into();
    }
    from_json(&json, id).ok()
}

/// A shape from a config's keys (Hugging Face names, or GPT-2's `n_layer`, `n_embd`).
pub fn from_json(root: &serde_json::Value, id: &str) -> Result<Shape, String> {
    let num = |keys: &[&str]| keys.iter().find_map(|k| root.get(*k)?.as_u64());
    let flag = |key: &str| root.get(key).and_then(|v| v.as_bool());
    let missing =
        |what: &str, keys: &[&str]| format!("{id}: no {what} (looked for {})", keys.join(", "));
    let field = |what: &str, keys: &[&str]| num(keys).ok_or_else(|| missing(what, keys));
    let hidden = field("hidden size", &["hidden_size", "n_embd", "d_model"])?;
    let layers = field(
        "layer count",
        &["num_hidden_layers", "n_layer", "num_layers"],
    )?;
    let heads = field(
        "attention heads",
        &["num_attention_heads", "n_head", "num_heads"],
    )?;
    let vocab = field("vocabulary size", &["vocab_size"])?;
    if hidden == 0 || layers == 0 || heads == 0 || vocab == 0 {
        return Err(format!(
            "{id}: hidden size, layers, heads and vocabulary must be above 0"
        ));
    }
    let model_type = root
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let gpt2_style = root.get("n_embd").is_some();
    let arch = match model_type.as_str() {
        "gpt2" | "gpt_bigcode" => "gpt2",
        "bert" | "roberta" | "xlm-roberta" => "bert",
        "t5" | "mt5" => "t5",
        "opt" => "opt",
        "mixtral" => "mixtral",
        "mistral" => "mistral",
        "qwen2" => "qwen2",
        "qwen2_moe" => "qwen2-moe",
        "qwen3" => "qwen3",
        "qwen3_moe" => "qwen3-moe",
        "gemma" => "gemma",
        "gemma2" => "gemma2",
        "gemma3" | "gemma3_text" => "gemma3",
        "phi" => "phi",
        "phi3" => "phi3",
        "falcon" => "falcon",
        "gpt_neox" => "gpt-neox",
        "deepseek_v2" => "deepseek-v2",
        "deepseek_v3" => "deepseek-v3",
        _ if gpt2_style => "gpt2",
        _ => "llama",
    };
    let intermediate =
        // Saturating: the dimension check below refuses what would not fit.
        num(&["intermediate_size", "n_inner", "d_ff", "ffn_dim"]).unwrap_or(hidden.saturating_mul(4));
    let tied = flag("tie_word_embeddings").unwrap_or(matches!(
        arch,
        "gpt2" | "bert" | "t5" | "opt" | "gemma" | "gemma2" | "gemma3" | "falcon"
    ));
    // Multi-query attention (Falcon-7B, StarCoder) says so instead of counting key heads.
    let kv_heads = num(&["num_key_value_heads", "num_kv_heads"])
        .or_else(|| flag("multi_query").filter(|m| *m).map(|_| 1));
    let t5 = arch == "t5";
    let experts = num(&["num_local_experts", "num_experts", "n_routed_experts"]).filter(|e| *e > 1);
    let expert_intermediate = num(&["moe_intermediate_size"]).filter(|_| experts.is_some());
    let shared_intermediate = match arch {
        "deepseek-v2" | "deepseek-v3" => num(&["n_shared_experts"])
            .zip(expert_intermediate)
            .map(|(n, w)| n.saturating_mul(w)),
        _ => num(&["shared_expert_intermediate_size"]),
    }
    .filter(|_| experts.is_some());
    let mla = num(&["kv_lora_rank"]).map(|kv_lora_rank| Mla {
        q_lora_rank: num(&["q_lora_rank"]),
        kv_lora_rank,
        qk_nope_head_dim: num(&["qk_nope_head_dim"]).unwrap_or(128),
        qk_rope_head_dim: num(&["qk_rope_head_dim"]).unwrap_or(64),
        v_head_dim: num(&["v_head_dim"]).unwrap_or(128),
    });
    let gated_mlp = root
        .get("feed_forward_proj")
        .and_then(|v| v.as_str())
        .map(|p| p.starts_with("gated-"))
        .filter(|_| t5);
    let mut shape = Shape {
        id: id.to_string(),
        aliases: Vec::new(),
        arch: arch.to_string(),
        layers,
        // T5's decoder has as many layers as its encoder unless said.
        decoder_layers: t5.then(|| num(&["num_decoder_layers"]).unwrap_or(layers)),
        hidden,
        heads,
        kv_heads,
        head_dim: num(&["head_dim", "d_kv"]),
        intermediate,
        vocab,
        tied_embeddings: tied,
        experts,
        experts_per_token: num(&["num_experts_per_tok"]).filter(|_| experts.is_some()),
        // T5's attention is relative: `n_positions` is no limit.
        max_positions: num(&["max_position_embeddings", "n_positions", "n_ctx"]).filter(|_| !t5),
        gated_mlp,
        expert_intermediate,
        shared_intermediate,
        dense_layers: num(&["first_k_dense_replace"]).filter(|_| experts.is_some()),
        moe_every: num(&["decoder_sparse_step", "moe_layer_freq"]).filter(|_| experts.is_some()),
        mla,
        type_vocab: num(&["type_vocab_size"]).filter(|_| arch == "bert"),
        relative_buckets: num(&["relative_attention_num_buckets"]).filter(|_| t5),
        params: 0.0,
        active: None,
        params_source: "computed from the shape".into(),
        source: id.to_string(),
    };
    let dims = [
        shape.layers,
        shape.decoder_layers.unwrap_or(0),
        shape.hidden,
        shape.heads,
        shape.kv_heads(),
        shape.head_dim(),
        shape.intermediate,
        shape.vocab,
        shape.experts(),
        shape.experts_per_token.unwrap_or(0),
        shape.expert_width(),
        shape.shared_intermediate.unwrap_or(0),
        shape.max_positions.unwrap_or(0),
        shape.type_vocab.unwrap_or(0),
        shape.relative_buckets.unwrap_or(0),
    ];
    let mla = shape.mla.as_ref().map_or([0; 5], |m| {
        [
            m.q_lora_rank.unwrap_or(0),
            m.kv_lora_rank,
            m.qk_nope_head_dim,
            m.qk_rope_head_dim,
            m.v_head_dim,
        ]
    });
    if dims.iter().chain(&mla).any(|d| *d > MAX_DIMENSION) {
        return Err(format!(
            "{id}: a dimension above {MAX_DIMENSION} is not a model's shape"
        ));
    }
    shape.params = shape.params_from_shape();
    shape.active = shape.active_params();
    Ok(shape)
}

/// No width, count or length of a real config comes near this (2^24); it keeps the arithmetic
/// of a malformed one in range.
const MAX_DIMENSION: u64 = 1 << 24;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_cites_and_its_count_follows_from_its_shape() {
        let models = known_models();
        assert!(models.len() >= 50, "models.toml did not parse");
        let mut published = 0;
        for m in models {
            assert!(!m.source.trim().is_empty(), "{} has no source", m.id);
            let count = m.count();
            println!(
                "{:40} table {:>15} shape {:>15} active {:>15}  {}",
                m.id, m.params, count.total, count.active, m.params_source
            );
            // Every row's count, published or not, is its shape's to the parameter.
            assert_eq!(
                count.total as f64, m.params,
                "{}: {} from the shape, {} in the table",
                m.id, count.total, m.params
            );
            assert!(
                m.params_source.starts_with("published: ")
                    || m.params_source.starts_with("computed from the shape"),
                "{}: params_source says where the count comes from",
                m.id
            );
            if let Some(n) = m.params_source.strip_prefix("published: ") {
                // The published number is the table's, written with its commas.
                let digits: String = n
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .filter(char::is_ascii_digit)
                    .collect();
                assert_eq!(digits.parse::<f64>().ok(), Some(m.params), "{}", m.id);
                published += 1;
            }
            // A mixture of experts says what one token uses, and the shape agrees.
            if m.experts.is_some_and(|e| e > 1) {
                let active = m.active_params();
                assert!(active.is_some_and(|a| a < m.params), "{}", m.id);
                if let Some(a) = m.active {
                    assert_eq!(active, Some(a), "{}: active parameters", m.id);
                }
            } else {
                assert_eq!(m.active_params(), None, "{}", m.id);
            }
        }
        assert!(published >= 45, "{published} rows with a published count");
    }

    #[test]
    fn configs_give_the_counts_of_the_table() {
        // Each family read from its config.json keys lands on its row's count.
        let cases = [
            (
                "google/gemma-2-9b",
                r#"{"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000, "max_position_embeddings": 8192}"#,
            ),
            (
                "google-t5/t5-base",
                r#"{"model_type": "t5", "d_model": 768, "d_kv": 64, "d_ff": 3072, "num_layers": 12, "num_heads": 12, "vocab_size": 32128, "feed_forward_proj": "relu", "relative_attention_num_buckets": 32, "n_positions": 512}"#,
            ),
            (
                "google/flan-t5-large",
                r#"{"model_type": "t5", "d_model": 1024, "d_kv": 64, "d_ff": 2816, "num_layers": 24, "num_decoder_layers": 24, "num_heads": 16, "vocab_size": 32128, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false}"#,
            ),
            (
                "FacebookAI/roberta-large",
                r#"{"model_type": "roberta", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096, "vocab_size": 50265, "type_vocab_size": 1, "max_position_embeddings": 514}"#,
            ),
            (
                "deepseek-ai/DeepSeek-V2-Lite",
                r#"{"model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400, "tie_word_embeddings": false}"#,
            ),
            (
                "tiiuae/falcon-7b",
                r#"{"model_type": "falcon", "hidden_size": 4544, "n_layer": 32, "n_head": 71, "multi_query": true, "parallel_attn": true, "vocab_size": 65024}"#,
            ),
        ];
        for (id, json) in cases {
            let value: serde_json::Value = serde_json::from_str(json).expect("json");
            let shape = from_json(&value, "config.json").expect("shape");
            let row = by_name(id).expect("row");
            assert_eq!(shape.params, row.params, "{id}");
            assert_eq!(shape.active, row.active, "{id}");
        }
    }

    #[test]
    fn a_malformed_config_is_an_error_not_an_overflow() {
        let value = serde_json::json!({
            "hidden_size": u64::MAX, "num_hidden_layers": 2, "num_attention_heads": 2,
            "vocab_size": 10,
        });
        assert!(from_json(&value, "c").is_err());
        let zero = serde_json::json!({
            "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 0, "vocab_size": 10,
        });
        assert!(from_json(&zero, "c").is_err());
    }

    #[test]
    fn names_find_rows() {
        for name in [
            "meta-llama/Llama-2-7b-hf",
            "Llama-2-7b-hf",
            "llama-2-7b",
            "LLAMA2-7B",
        ] {
            assert_eq!(
                by_name(name).map(|m| m.id.as_str()),
                Some("meta-llama/Llama-2-7b-hf")
            );
        }
        assert!(by_name("no-such-model").is_none());
    }
}
