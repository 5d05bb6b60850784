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
    /// The total parameter count (published, or computed from the shape: `params_source`).
    pub params: f64,
    #[serde(default)]
    pub params_source: String,
    #[serde(default)]
    pub source: String,
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
        matches!(
            self.arch.as_str(),
            "llama" | "mixtral" | "gemma" | "qwen2" | "qwen3" | "mistral" | "phi3"
        )
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

    /// Parameters of the largest single module: the embedding, or one MLP matrix. ZeRO-3 and
    /// FSDP gather at least this much at once.
    pub fn largest_module(&self) -> f64 {
        let experts = self.experts.unwrap_or(1).max(1);
        let embedding = (self.vocab * self.hidden) as f64;
        let mlp = (self.hidden * self.intermediate * experts) as f64;
        embedding.max(mlp)
    }

    /// Parameters in linear layers (what 4-bit or 8-bit quantization stores quantized): all but
    /// the embeddings, the head and the norms.
    pub fn linear_params(&self) -> f64 {
        let h = self.hidden as f64;
        let kv = (self.kv_heads() * self.head_dim()) as f64;
        let q = (self.heads * self.head_dim()) as f64;
        let ff = self.intermediate as f64;
        let experts = self.experts.unwrap_or(1).max(1) as f64;
        let attention = h * q + 2.0 * h * kv + q * h;
        let mlp = if self.gated() { 3.0 } else { 2.0 } * h * ff * experts;
        (attention + mlp) * self.all_layers() as f64
    }

    /// Parameters of LoRA adapters of rank `r` on the named projections of every layer
    /// (`q`, `k`, `v`, `o`, `gate`, `up`, `down`; `all` for every linear layer).
    pub fn lora_params(&self, r: u64, targets: &[String]) -> f64 {
        let h = self.hidden;
        let q = self.heads * self.head_dim();
        let kv = self.kv_heads() * self.head_dim();
        let ff = self.intermediate;
        let experts = self.experts.unwrap_or(1).max(1);
        let mut per_layer = 0u64;
        let all = targets.iter().any(|t| t == "all" || t == "all-linear");
        let dims: [(&str, u64, u64, u64); 7] = [
            ("q", h, q, 1),
            ("k", h, kv, 1),
            ("v", h, kv, 1),
            ("o", q, h, 1),
            ("gate", h, ff, experts),
            ("up", h, ff, experts),
            ("down", ff, h, experts),
        ];
        for (name, inp, out, n) in dims {
            if name == "gate" && !self.gated() {
                continue;
            }
            let wanted = all
                || targets.iter().any(|t| {
                    let t = t.trim_end_matches("_proj");
                    t == name || (name == "up" && t == "fc1") || (name == "down" && t == "fc2")
                });
            if wanted {
                per_layer += r * (inp + out) * n;
            }
        }
        (per_layer * self.all_layers()) as f64
    }

    /// The parameter count of a decoder in the Llama or GPT-2 style, from the shape alone (for a
    /// local `config.json`, which carries no count).
    pub fn params_from_shape(&self) -> f64 {
        let h = self.hidden as f64;
        let v = self.vocab as f64;
        let embeddings = v * h * if self.tied_embeddings { 1.0 } else { 2.0 };
        let positions = match self.arch.as_str() {
            "gpt2" | "opt" | "bert" => self.max_positions.unwrap_or(0) as f64 * h,
            _ => 0.0,
        };
        // Biases and norms: two norms per layer and one at the end; GPT-2-style layers carry a
        // bias on every linear layer.
        let layers = self.all_layers() as f64;
        // Phi's and Falcon's attention and MLP share one norm; Phi's head carries a bias.
        let shared_norm = matches!(self.arch.as_str(), "phi" | "falcon");
        let per_layer_norms = if shared_norm { 1.0 } else { 2.0 };
        let norms = (per_layer_norms * layers + 1.0) * h * if self.gated() { 1.0 } else { 2.0 };
        let head_bias = if self.arch == "phi" { v } else { 0.0 };
        let biases = if self.gated() || self.arch == "falcon" {
            0.0
        } else {
            layers * (4.0 * h + self.intermediate as f64 + h)
        };
        self.linear_params() + embeddings + positions + norms + biases + head_bias
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
fn from_json(root: &serde_json::Value, id: &str) -> Result<Shape, String> {
    let num = |keys: &[&str]| keys.iter().find_map(|k| root.get(*k)?.as_u64());
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
    let model_type = root
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let gpt2_style = root.get("n_embd").is_some();
    let arch = match model_type.as_str() {
        "gpt2" | "gpt_bigcode" => "gpt2",
        "bert" | "roberta" => "bert",
        "t5" | "mt5" => "t5",
        "opt" => "opt",
        "mixtral" => "mixtral",
        "gemma" | "gemma2" | "gemma3_text" => "gemma",
        "phi" => "phi",
        "falcon" => "falcon",
        "gpt_neox" => "gpt-neox",
        _ if gpt2_style => "gpt2",
        _ => "llama",
    };
    let intermediate =
        num(&["intermediate_size", "n_inner", "d_ff", "ffn_dim"]).unwrap_or(4 * hidden);
    let tied = root
        .get("tie_word_embeddings")
        .and_then(|v| v.as_bool())
        .unwrap_or(matches!(arch, "gpt2" | "bert" | "t5" | "opt" | "gemma"));
    let mut shape = Shape {
        id: id.to_string(),
        aliases: Vec::new(),
        arch: arch.to_string(),
        layers,
        decoder_layers: num(&["num_decoder_layers"]).filter(|_| arch == "t5"),
        hidden,
        heads,
        kv_heads: num(&["num_key_value_heads", "num_kv_heads"]),
        head_dim: num(&["head_dim"]),
        intermediate,
        vocab,
        tied_embeddings: tied,
        experts: num(&["num_local_experts", "num_experts"]),
        experts_per_token: num(&["num_experts_per_tok"]),
        max_positions: num(&["max_position_embeddings", "n_positions", "n_ctx"]),
        params: 0.0,
        params_source: "computed from the shape".into(),
        source: id.to_string(),
    };
    shape.params = shape.params_from_shape();
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_cites_and_its_count_follows_from_its_shape() {
        let models = known_models();
        assert!(models.len() >= 5, "models.toml did not parse");
        for m in models {
            assert!(!m.source.trim().is_empty(), "{} has no source", m.id);
            let computed = m.params_from_shape();
            let off = (computed - m.params).abs() / m.params;
            println!(
                "{:40} table {:>15} shape {:>15.0} {:+.3}%",
                m.id,
                m.params,
                computed,
                off * 100.0
            );
            // Encoder extras (token types, pooler) aside, the shape gives the count.
            assert!(
                off < 0.01,
                "{}: {computed} from the shape, {} in the table",
                m.id,
                m.params
            );
            if m.params_source.starts_with("computed") {
                assert!(
                    off < 1e-9,
                    "{}: a computed count must match the shape",
                    m.id
                );
            }
        }
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
