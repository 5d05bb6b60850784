//! Parameter counts from a shape, to the parameter: every weight, bias and norm each architecture
//! builds, the way its Hugging Face implementation (`transformers/models/*/modeling_*.py`) lays
//! the modules out.
//!
//! - Llama and its kin (Mistral, Phi-3, Qwen, Gemma): RMSNorm weights only, no biases; Qwen2
//!   adds biases on q, k and v; Qwen3 and Gemma 3 a norm of `head_dim` on q and on k; Gemma 2
//!   and 3 four norms per layer (before and after attention and MLP).
//! - GPT-2, OPT, BERT, Phi, GPT-NeoX: LayerNorm (weight and bias) and a bias on every linear
//!   layer; learned positions for GPT-2, OPT (two more rows) and BERT; BERT's token types and
//!   pooler (the count of `BertModel`, what `AutoModel` loads).
//! - T5: encoder and decoder layers, the decoder's with cross-attention and a third norm, one
//!   relative-attention bias table in each stack's first layer, a final norm in each, and the
//!   head tied or not (`tie_word_embeddings`).
//! - Mixtures of experts: a router per MoE layer (DeepSeek-V3's carries a bias per expert),
//!   routed experts of `expert_width`, a shared expert (Qwen2-MoE's behind a one-output gate),
//!   and DeepSeek's leading dense layers; DeepSeek's multi-head latent attention.
//!
//! The active count is what one token's forward pass uses: the total less the routed experts it
//! is not sent to (embeddings and head included, as Mistral's 12.9B for Mixtral-8x7B counts).

use super::shapes::Shape;

/// Parameters of a shape by where they sit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    pub total: u128,
    /// What one token uses: the total less the routed experts it is not sent to.
    pub active: u128,
    /// In the layers' linear maps (attention projections, MLPs, experts): what 4-bit and 8-bit
    /// quantization stores quantized; embeddings, head, norms, biases and routers stay.
    pub linear: u128,
}

impl std::ops::AddAssign for Count {
    fn add_assign(&mut self, o: Count) {
        self.total += o.total;
        self.active += o.active;
        self.linear += o.linear;
    }
}

impl std::ops::Add for Count {
    type Output = Count;
    fn add(mut self, o: Count) -> Count {
        self += o;
        self
    }
}

impl std::ops::Mul<u128> for Count {
    type Output = Count;
    fn mul(self, n: u128) -> Count {
        Count {
            total: self.total * n,
            active: self.active * n,
            linear: self.linear * n,
        }
    }
}

/// Parameters outside the linear maps, all used by every token.
fn other(n: u128) -> Count {
    Count {
        total: n,
        active: n,
        linear: 0,
    }
}

/// A linear map's weights, used by every token.
fn linear(n: u128) -> Count {
    Count {
        total: n,
        active: n,
        linear: n,
    }
}

/// Counts are taken in 128 bits: a config's dimensions multiplied together cannot overflow.
fn n(x: u64) -> u128 {
    u128::from(x)
}

impl Shape {
    /// LayerNorm with a bias (GPT-2's kind) rather than RMSNorm's weight alone.
    fn norm_has_bias(&self) -> bool {
        matches!(
            self.arch.as_str(),
            "gpt2" | "bert" | "opt" | "phi" | "gpt-neox" | "falcon" | "bloom"
        )
    }

    /// A bias on every linear layer.
    fn linear_biases(&self) -> bool {
        matches!(
            self.arch.as_str(),
            "gpt2" | "bert" | "opt" | "phi" | "gpt-neox" | "bloom"
        )
    }

    fn norm(&self) -> u128 {
        n(self.hidden) * if self.norm_has_bias() { 2 } else { 1 }
    }

    /// Norms around attention and MLP in one layer (the decoder's cross-attention aside).
    fn norms_per_layer(&self) -> u128 {
        match self.arch.as_str() {
            // Attention and MLP side by side after one norm.
            "phi" | "falcon" => 1,
            "gemma2" | "gemma3" => 4,
            _ => 2,
        }
    }

    /// One attention block: projections, their biases and the norms inside it.
    fn attention(&self) -> Count {
        let h = n(self.hidden);
        let heads = n(self.heads);
        if let Some(m) = &self.mla {
            let qk = n(m.qk_nope_head_dim + m.qk_rope_head_dim);
            let latent = n(m.kv_lora_rank);
            let q = match m.q_lora_rank.map(n) {
                // Down, norm, up.
                Some(r) => linear(h * r + r * heads * qk) + other(r),
                None => linear(h * heads * qk),
            };
            let kv_down = linear(h * (latent + n(m.qk_rope_head_dim))) + other(latent);
            let kv_up = linear(latent * heads * n(m.qk_nope_head_dim + m.v_head_dim));
            let out = linear(heads * n(m.v_head_dim) * h);
            return sum([q, kv_down, kv_up, out]);
        }
        let (q, k, v) = self.qkv_widths();
        let (q, k, v) = (n(q), n(k), n(v));
        let mut c = linear(h * (q + k + v) + q * h);
        if self.linear_biases() {
            c += other(q + k + v + h);
        } else if matches!(self.arch.as_str(), "qwen2" | "qwen2-moe") {
            c += other(q + k + v);
        }
        if matches!(self.arch.as_str(), "qwen3" | "qwen3-moe" | "gemma3") {
            c += other(2 * n(self.head_dim()));
        }
        c
    }

    fn matrices(&self) -> u128 {
        if self.gated() {
            3
        } else {
            2
        }
    }

    /// A dense MLP of width `ff`.
    fn mlp(&self, ff: u64) -> Count {
        let (h, ff) = (n(self.hidden), n(ff));
        let mut c = linear(self.matrices() * h * ff);
        if self.linear_biases() {
            c += other(ff + h);
        }
        c
    }

    /// An MoE block: router, routed experts (of which a token uses `experts_per_token`) and the
    /// shared expert.
    fn moe(&self) -> Count {
        let h = n(self.hidden);
        let e = n(self.experts());
        let mut router = h * e;
        if self.arch == "deepseek-v3" {
            // `e_score_correction_bias`.
            router += e;
        }
        let one = self.matrices() * h * n(self.expert_width());
        let k = n(self.experts_per_token.unwrap_or(1)).min(e);
        let mut c = other(router)
            + Count {
                total: e * one,
                active: k * one,
                linear: e * one,
            };
        if let Some(s) = self.shared_intermediate.filter(|s| *s > 0) {
            c += linear(self.matrices() * h * n(s));
            if self.arch == "qwen2-moe" {
                // `shared_expert_gate`: hidden -> 1.
                c += other(h);
            }
        }
        c
    }

    /// Whether layer `i` (from 0) holds experts rather than a dense MLP.
    fn is_moe_layer(&self, i: u64) -> bool {
        if self.experts() <= 1 || i < self.dense_layers.unwrap_or(0) {
            return false;
        }
        let step = self.moe_every.unwrap_or(1).max(1);
        match self.arch.as_str() {
            // Qwen's MoE: `(layer_idx + 1) % decoder_sparse_step == 0`.
            "qwen2-moe" | "qwen3-moe" => (i + 1).is_multiple_of(step),
            // DeepSeek's: `layer_idx % moe_layer_freq == 0` past the dense ones.
            _ => i.is_multiple_of(step),
        }
    }

    /// Layers that hold experts.
    pub fn moe_layers(&self) -> u64 {
        if self.experts() <= 1 {
            return 0;
        }
        (0..self.layers).filter(|i| self.is_moe_layer(*i)).count() as u64
    }

    /// Every parameter of the shape, the active ones and those in linear maps.
    pub fn count(&self) -> Count {
        let h = n(self.hidden);
        let v = n(self.vocab);
        let mut c = other(v * h);
        let has_head = self.arch != "bert" && !self.tied_embeddings;
        if has_head {
            c += other(v * h);
        }
        if self.arch == "phi" {
            c += other(v);
        }
        let positions = n(self.max_positions.unwrap_or(0));
        match self.arch.as_str() {
            "gpt2" | "bert" => c += other(positions * h),
            // OPT's learned positions start at an offset of 2.
            "opt" => c += other((positions + 2) * h),
            _ => {}
        }
        if self.arch == "bert" {
            // Token types and the pooler (dense hidden x hidden with its bias).
            c += other(n(self.type_vocab.unwrap_or(2)) * h + h * h + h);
        }
        // The final norm (BERT's sits after the embeddings instead).
        c += other(self.norm());
        let norms = other(self.norms_per_layer() * self.norm());
        let moe_layers = self.moe_layers();
        let dense = self.layers.saturating_sub(moe_layers);
        let layer = self.attention() + norms;
        c += (layer + self.mlp(self.intermediate)) * n(dense);
        if moe_layers > 0 {
            c += (layer + self.moe()) * n(moe_layers);
        }
        if self.arch == "t5" {
            let buckets = n(self.relative_buckets.unwrap_or(32)) * n(self.heads);
            c += other(buckets);
            if let Some(d) = self.decoder_layers.filter(|d| *d > 0) {
                // Self-attention, cross-attention, three norms, the MLP; the stack's own
                // relative-attention table and final norm.
                let decoder_layer =
                    self.attention() * 2 + other(3 * self.norm()) + self.mlp(self.intermediate);
                c += decoder_layer * n(d) + other(buckets + self.norm());
            }
        }
        c
    }

    /// The total parameter count from the shape.
    pub fn params_from_shape(&self) -> f64 {
        self.count().total as f64
    }

    /// The parameters one token uses, for a mixture of experts.
    pub fn active_params(&self) -> Option<f64> {
        let c = self.count();
        (c.active < c.total).then_some(c.active as f64)
    }

    /// Parameters in linear layers (what 4-bit or 8-bit quantization stores quantized): all but
    /// the embeddings, the head, the norms, the biases and the routers.
    pub fn linear_params(&self) -> f64 {
        self.count().linear as f64
    }

    /// Parameters of the largest transformer block (attention, norms, and the MLP or the
    /// experts) and of what lies outside the blocks (embeddings, head, final norm): the units
    /// FSDP all-gathers when it wraps each block, as its transformer auto-wrap policy does,
    /// and its root unit (`docs/knowledge.md` §3.5).
    pub fn blocks_and_rest(&self) -> (f64, f64) {
        let norms = other(self.norms_per_layer() * self.norm());
        let layer = self.attention() + norms;
        let dense = (layer + self.mlp(self.intermediate)).total;
        let moe_layers = self.moe_layers();
        let moe = if moe_layers > 0 {
            (layer + self.moe()).total
        } else {
            0
        };
        let mut block = dense.max(moe);
        let mut in_blocks = dense * n(self.layers.saturating_sub(moe_layers)) + moe * n(moe_layers);
        if let (true, Some(d)) = (self.arch == "t5", self.decoder_layers) {
            let decoder =
                (self.attention() * 2 + other(3 * self.norm()) + self.mlp(self.intermediate)).total;
            block = block.max(decoder);
            in_blocks += decoder * n(d);
        }
        let rest = self.count().total.saturating_sub(in_blocks);
        (block as f64, rest as f64)
    }

    /// Parameters of the largest single module: the embedding, or one MLP matrix over all
    /// experts. ZeRO-3 and FSDP gather at least this much at once.
    pub fn largest_module(&self) -> f64 {
        let h = n(self.hidden);
        let embedding = n(self.vocab) * h;
        let dense = h * n(self.intermediate);
        let experts = h * n(self.expert_width()) * n(self.experts());
        embedding.max(dense).max(experts) as f64
    }

    /// Parameters of LoRA adapters of rank `r` on the named projections of every layer
    /// (`q`, `k`, `v`, `o`, `gate`, `up`, `down`; `all` for every linear layer), experts included.
    pub fn lora_params(&self, r: u64, targets: &[String]) -> f64 {
        let (r, h) = (n(r), n(self.hidden));
        let (q, k, v) = self.qkv_widths();
        let o_in = match &self.mla {
            Some(m) => self.heads * m.v_head_dim,
            None => q,
        };
        let all = targets.iter().any(|t| t == "all" || t == "all-linear");
        let wanted = |name: &str| {
            all || targets.iter().any(|t| {
                let t = t.trim_end_matches("_proj");
                t == name || (name == "up" && t == "fc1") || (name == "down" && t == "fc2")
            })
        };
        let pair = |name: &str, inp: u128, out: u128| {
            if wanted(name) {
                r * (inp + out)
            } else {
                0
            }
        };
        let attention =
            pair("q", h, n(q)) + pair("k", h, n(k)) + pair("v", h, n(v)) + pair("o", n(o_in), h);
        let mlp = |ff: u64| {
            let ff = n(ff);
            let gate = if self.gated() { pair("gate", h, ff) } else { 0 };
            gate + pair("up", h, ff) + pair("down", ff, h)
        };
        let moe_layers = self.moe_layers();
        let dense_layers = self.all_layers().saturating_sub(moe_layers);
        let moe = mlp(self.expert_width()) * n(self.experts())
            + self.shared_intermediate.filter(|s| *s > 0).map_or(0, mlp);
        // T5's decoder layers attend twice (self and cross), with the same projection names.
        let attention_blocks = self.all_layers() + self.decoder_layers.unwrap_or(0);
        (attention * n(attention_blocks)
            + mlp(self.intermediate) * n(dense_layers)
            + moe * n(moe_layers)) as f64
    }
}

fn sum<const N: usize>(parts: [Count; N]) -> Count {
    let mut c = Count::default();
    for p in parts {
        c += p;
    }
    c
}
