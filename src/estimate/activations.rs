//! Activations kept for the backward and the logits, per GPU. Per layer and token, in bytes of
//! 16-bit activations, after Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
//! Transformer Models", arXiv:2205.05198, §4): `sbh(34 + 5as/h)` for a GPT layer, taken apart
//! so that it holds for grouped-query attention, gated MLPs and layers without dropout:
//!
//! - replicated across tensor-parallel ranks: the inputs of the two norms (4h), of the QKV and
//!   MLP projections (2h each), and one-byte dropout masks after attention and MLP (2h);
//! - split over `t` ranks: Q (2h), K and V (4 x kv), the attention output (2h), the MLP's
//!   saved tensors (2 per element of `ff`: two for a plain MLP, four for a gated one; for a
//!   mixture of experts, `ff` of each expert a token is routed to and of the shared one);
//! - the attention scores, `5as` per token (softmax output, dropout mask and output), or `2as`
//!   without dropout, none with SDPA or flash attention, which never store them.
//!
//! For GPT (kv = h, ff = 4h, dropout) this is `10h + 24h/t + 5as/t`, the paper's equation 2.
//! Selective recomputation drops the scores; full recomputation keeps each layer's input (2h)
//! and one layer's activations during its recompute (§4.1).
//!
//! A quantized base prepared by PEFT's `prepare_model_for_kbit_training` has fp32 embeddings
//! and norms, so the residual stream is fp32: the norms' inputs and each layer's kept input
//! take 4 bytes an element, and without autocast the head's logits come out fp32
//! (`rules/knowledge/runtime.toml`, [kbit]).

use super::{Attention, Checkpointing, Inputs, Noted, Regime, Shape};

pub(super) struct Activations {
    pub activations: f64,
    pub logits: f64,
}

/// Sequence length and micro-batch when nothing says: one sequence of the model's context up to
/// 2,048 tokens (named as an assumption).
const DEFAULT_SEQ_LEN: u64 = 2048;

pub(super) fn activations(
    inputs: &Inputs,
    regime: &Regime,
    detail: &super::states::Detail,
    shape: Option<&Shape>,
    noted: &mut Noted,
) -> Activations {
    let none = Activations {
        activations: 0.0,
        logits: 0.0,
    };
    let Some(shape) = shape else {
        noted.assume("activations and logits not counted: they need the model's shape");
        return none;
    };
    let default_seq = shape
        .max_positions
        .map_or(DEFAULT_SEQ_LEN, |m| m.min(DEFAULT_SEQ_LEN));
    let count = |v: &u64| v.to_string();
    let s = noted.take(&inputs.seq_len, "sequence length", default_seq, count) as f64;
    let b = noted.take(&inputs.micro_batch, "micro-batch", 1, count) as f64;
    let checkpointing = noted.take(
        &inputs.checkpointing,
        "checkpointing",
        Checkpointing::None,
        |c| {
            match c {
                Checkpointing::None => "none",
                Checkpointing::Selective => "selective",
                Checkpointing::Full => "full",
            }
            .into()
        },
    );
    let attention = noted.take(&inputs.attention, "attention", Attention::Sdpa, |a| {
        match a {
            Attention::Eager => "eager",
            Attention::Sdpa => "sdpa",
            Attention::Flash => "flash",
        }
        .into()
    });
    let precision = inputs
        .precision
        .as_ref()
        .map_or(super::Precision::Bf16Mixed, |p| p.value);
    let t = inputs.tp.as_ref().map_or(1.0, |g| g.value.max(1) as f64);
    let h = shape.hidden as f64;
    let a = shape.heads as f64;
    let (q, k, v) = shape.qkv_widths();
    let (q, k, v) = (q as f64, k as f64, v as f64);
    // A mixture of experts keeps what each token's experts (and the shared one) saved.
    let ff = shape.active_intermediate() as f64;
    let dropout = shape.dropout();
    // Per token of one layer, in bytes at 2 bytes per element; an fp32 residual stream doubles
    // the norms' inputs.
    let stream = if detail.kbit_upcast && precision != super::Precision::Fp32 {
        2.0
    } else {
        1.0
    };
    let replicated = 4.0 * h * stream + 2.0 * h + 2.0 * h + if dropout { 2.0 * h } else { 0.0 };
    let mlp = if shape.gated() { 8.0 } else { 4.0 } * ff;
    let split = (2.0 * q + 2.0 * k + 2.0 * v + 2.0 * q + mlp) / t;
    let scores = match attention {
        Attention::Eager if dropout => 5.0 * a * s / t,
        Attention::Eager => 2.0 * a * s / t,
        _ => 0.0,
    };
    // 16-bit activations; fp32 training keeps 4-byte ones (the masks aside, a small error).
    let scale = precision.activation_bytes() / 2.0;
    let layer = (replicated + split + scores) * scale;
    let layers = shape.all_layers() as f64;
    let per_token = match checkpointing {
        Checkpointing::None => layers * layer,
        Checkpointing::Selective => layers * (layer - scores * scale),
        Checkpointing::Full => layers * 2.0 * h * stream * scale + layer,
    };
    // Pipeline stages: the first holds `pp` micro-batches in flight of L/pp layers each
    // (1F1B, Korthikanti et al. §4.2.3), so L layers' worth whatever `pp`.
    let activations = per_token * s * b;
    // Logits: 16-bit logits, their fp32 upcast for the loss and the fp32 log-softmax kept for
    // the backward (10 bytes per element; 8 in fp32), split over tensor-parallel ranks.
    // An fp32 head over an fp32 stream, outside autocast, gives fp32 logits at once.
    let per_logit =
        if precision == super::Precision::Fp32 || (detail.kbit_upcast && !precision.mixed()) {
            8.0
        } else {
            10.0
        };
    let logits = b * s * shape.vocab as f64 * per_logit / t;
    if regime.trainable < regime.params {
        noted.assume("activations counted as for full training (a frozen layer's saved inputs are not subtracted)");
    }
    Activations {
        activations,
        logits,
    }
}
