//! MEM003 wrong-dtype-bytes: a bytes-per-element value that contradicts the dtype it is keyed by,
//! in a dict or in the arms of an `if` chain. Documentation: `rules/MEM003.toml`.

use super::{fmt_num, Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::knowledge::{knowledge, DtypeRow};

pub struct WrongDtypeBytes;

/// Whether `value` is a storage size the dtype can have: its size, or for the formats of a
/// byte or less, which quantize, a size that includes their scales (NF4 with blocksize 64:
/// 0.5625; LLM.int8 with one fp32 scale per row: 1.001), at most a fifth more.
fn bytes_ok(row: &DtypeRow, value: f64) -> bool {
    if row.bytes <= 1.0 {
        (row.bytes - 1e-9..=row.bytes * 1.2).contains(&value)
    } else {
        (value - row.bytes).abs() < 1e-9
    }
}

fn bytes_words(v: f64) -> String {
    if v == 1.0 {
        "1 byte".to_string()
    } else {
        format!("{} bytes", fmt_num(v))
    }
}

impl Rule for WrongDtypeBytes {
    fn code(&self) -> &'static str {
        "MEM003"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        let k = knowledge();
        for table in cx.facts.tables.iter().filter(|t| !t.counts_states()) {
            let rows: Vec<_> = table
                .entries
                .iter()
                .filter_map(|e| k.dtype(&e.key).map(|r| (e, r)))
                .collect();
            let named_bytes = table
                .name
                .as_deref()
                .is_some_and(|n| n.to_ascii_lowercase().contains("byte"));
            if rows.is_empty() || (rows.len() < 2 && !named_bytes) {
                continue;
            }
            let bytes = rows.iter().filter(|(e, r)| bytes_ok(r, e.value)).count();
            let bits = rows.iter().filter(|(e, r)| e.value == r.bits).count();
            let wrong: Vec<_> = rows.iter().filter(|(e, r)| !bytes_ok(r, e.value)).collect();
            // A table of bits, of ratios, or of something else: the unit is not bytes.
            let reads_as_bytes = if named_bytes {
                bytes >= wrong.len() || rows.len() == 1
            } else {
                bytes > wrong.len()
            };
            if wrong.is_empty() || bits > bytes || !reads_as_bytes {
                continue;
            }
            let mut seen: Vec<&std::ops::Range<usize>> = Vec::new();
            for (e, r) in wrong {
                // One number under several keys (`case "bf16" | "fp16": return 4`): one finding.
                if seen.contains(&&e.value_span) {
                    continue;
                }
                seen.push(&e.value_span);
                let right = fmt_num(r.bytes);
                let message = format!(
                    "`{}` is {} here, but {} is stored in {}",
                    e.key,
                    bytes_words(e.value),
                    r.id,
                    bytes_words(r.bytes)
                );
                let help = if r.id == "tf32" {
                    "TF32 is a matmul mode, not a storage dtype: tensors stay fp32, 4 bytes"
                        .to_string()
                } else {
                    format!("{} takes {right} bytes per element ({})", r.id, r.source)
                };
                out.push(
                    Diagnostic::new("MEM003", e.value_span.clone(), message)
                        .with_help(help)
                        .with_fix(Some(Fix {
                            applicability: Applicability::Safe,
                            message: format!("use {right} bytes for {}", r.id),
                            edits: vec![Edit::replace(e.value_span.clone(), right.clone())],
                        })),
                );
            }
        }
    }
}
