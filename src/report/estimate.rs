//! `memlint estimate` output: a table per run (with a bar per component on a terminal), or JSON
//! (one object per run, in an array).

use crate::estimate::{Component, Estimate};
use serde_json::{json, Map, Value};
use std::fmt::Write;

/// One run's estimate and how the run is named ("train.sh: train.py with ds_config.json").
pub struct EstimatedRun {
    pub name: String,
    pub estimate: Estimate,
}

const BAR_WIDTH: f64 = 30.0;

fn gb(bytes: f64) -> String {
    format!("{:.2}", bytes / 1e9)
}

pub fn render_estimate_table(runs: &[EstimatedRun], bars: bool) -> String {
    let mut out = String::new();
    for (k, run) in runs.iter().enumerate() {
        if k > 0 {
            out.push('\n');
        }
        let e = &run.estimate;
        let _ = writeln!(out, "{}", run.name);
        let _ = writeln!(
            out,
            "  parameters {}{}",
            thousands(e.params),
            e.active_params.map_or(String::new(), |a| format!(
                ", {} active per token",
                thousands(a)
            ))
        );
        let _ = writeln!(out, "  per GPU                     GB");
        for (c, bytes) in &e.breakdown {
            if *bytes <= 0.0 {
                continue;
            }
            let bar = if bars && e.total_bytes > 0.0 {
                let n = (bytes / e.total_bytes * BAR_WIDTH).round().max(1.0) as usize;
                format!("  {}", "█".repeat(n))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:22} {:>9}{bar}",
                c.key().replace('_', " "),
                gb(*bytes)
            );
        }
        let verdict = match (e.gpu_memory, e.fits) {
            (Some(g), Some(true)) => format!(" of {} GB: fits", gb(g)),
            (Some(g), Some(false)) => format!(" of {} GB: does not fit", gb(g)),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  {:22} {:>9}{verdict}",
            format!("peak ({})", e.peak.name()),
            gb(e.total_bytes)
        );
        if e.host_bytes > 0.0 {
            let _ = writeln!(
                out,
                "  {:22} {:>9} per node",
                "host (offload)",
                gb(e.host_bytes)
            );
        }
        let _ = writeln!(out, "  the {} peak: {}", e.peak.name(), e.peak.meaning());
        let _ = writeln!(
            out,
            "  peaks: allocated {} GB, reserved {} GB, device {} GB (--peak allocated|reserved|device)",
            gb(e.peaks.allocated),
            gb(e.peaks.reserved),
            gb(e.peaks.device)
        );
        let _ = writeln!(
            out,
            "  allocated = weights, master weights and states, plus gathered parameters, autocast copies and the larger of (activations + logits) and the gradients{}, or the gradients and the step's temporaries; reserved adds the allocator's cache (at the step, the working set's blocks too), device the overhead",
            if e.get(Component::Gradients) > 0.0 && accumulating(e) { " (their sum: gradients accumulate)" } else { "" }
        );
        if !e.inputs.is_empty() {
            let _ = writeln!(out, "  inputs:");
            for (name, value, why) in &e.inputs {
                let _ = writeln!(out, "    {name} {value} ({why})");
            }
        }
        if !e.assumptions.is_empty() {
            let _ = writeln!(out, "  assumed:");
            for a in &e.assumptions {
                let _ = writeln!(out, "    {a}");
            }
        }
    }
    out
}

/// A count with its thousands separated: `46,702,792,704`.
fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn accumulating(e: &Estimate) -> bool {
    e.inputs
        .iter()
        .any(|(n, v, _)| n == "gradient accumulation" && v != "1")
}

pub fn render_estimate_json(runs: &[EstimatedRun]) -> String {
    let all: Vec<Value> = runs
        .iter()
        .map(|run| {
            let e = &run.estimate;
            let mut breakdown = Map::new();
            for (c, bytes) in &e.breakdown {
                breakdown.insert(c.key().into(), json!(bytes.round() as u64));
            }
            let mut inputs = Map::new();
            for (name, value, why) in &e.inputs {
                inputs.insert(
                    name.to_ascii_lowercase().replace([' ', '-'], "_"),
                    json!({"value": value, "from": why}),
                );
            }
            json!({
                "run": run.name,
                "total_bytes": e.total_bytes.round() as u64,
                "peak": e.peak.name(),
                "peaks": {
                    "allocated": e.peaks.allocated.round() as u64,
                    "reserved": e.peaks.reserved.round() as u64,
                    "device": e.peaks.device.round() as u64,
                },
                "breakdown": breakdown,
                "host_bytes": e.host_bytes.round() as u64,
                "gpu_memory_bytes": e.gpu_memory.map(|g| g.round() as u64),
                "fits": e.fits,
                "parameters": e.params.round() as u64,
                "active_parameters": e.active_params.map(|a| a.round() as u64),
                "trainable_parameters": e.trainable.round() as u64,
                "inputs": inputs,
                "assumptions": e.assumptions,
                "warnings": e.warnings,
            })
        })
        .collect();
    let mut s = serde_json::to_string_pretty(&all).unwrap_or_else(|_| "[]".into());
    s.push('\n');
    s
}
