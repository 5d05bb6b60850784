//! World size: how many processes a launch starts (`deepspeed --num_gpus`, `torchrun
//! --nproc_per_node --nnodes`, `accelerate launch --num_processes` or its config, `mpirun -np`,
//! `srun` and `#SBATCH`), and how many of them hold a data-parallel replica.

use super::files::{Fid, Files};
use super::launch::{options, Parsed};
use crate::config::Node;
use crate::context::{ConfigRef, World};
use crate::facts::{Arg, Binding, Invocation};

/// A launcher option's value as a positive integer, with how it reads.
struct IntOpt {
    value: u64,
    written: String,
    via: Vec<Binding>,
}

fn int_option(opts: &[(String, Option<Arg>, Arg)], keys: &[&str]) -> Option<Result<IntOpt, ()>> {
    let (k, v, w) = opts
        .iter()
        .rev()
        .find(|(k, _, _)| keys.contains(&k.as_str()))?;
    let Some(v) = v else { return Some(Err(())) };
    if !v.known {
        return Some(Err(()));
    }
    match v.value.trim().parse::<u64>() {
        Ok(n) if n > 0 => Some(Ok(IntOpt {
            value: n,
            written: if w.value.contains('=') {
                w.value.clone()
            } else {
                format!(
                    "--{} {}",
                    k.replace('_', if w.value.contains('_') { "_" } else { "-" }),
                    v.value
                )
            },
            via: v.via.clone(),
        })),
        _ => Some(Err(())),
    }
}

fn via_text(files: &Files, f: Fid, via: &[Binding]) -> String {
    let parts: Vec<String> = via
        .iter()
        .filter(|b| !b.value.contains(char::is_whitespace))
        .map(|b| {
            let at = files.site(f, b.span.start);
            if b.default {
                format!("{} defaults to {} at {at}", b.name, b.value)
            } else {
                format!("{}={} at {at}", b.name, b.value)
            }
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(", {}", parts.join(", "))
    }
}

pub(super) fn world_of(
    files: &Files,
    origin: Fid,
    inv: &Invocation,
    p: &Parsed,
    configs: &[(Fid, ConfigRef)],
    flags: &Node,
) -> Option<World> {
    let at = files.site(origin, inv.span.start);
    let launcher = p.kind.as_str();
    let o = &p.options;
    let (processes, why) = match launcher {
        "deepspeed" => {
            let gpus = int_option(o, &["num_gpus", "num_gpus_per_node"])?.ok()?;
            let nodes = match int_option(o, &["num_nodes"]) {
                Some(r) => Some(r.ok()?),
                None => None,
            };
            if nodes.is_none()
                && o.iter().any(|(k, _, _)| {
                    matches!(
                        k.as_str(),
                        "hostfile" | "h" | "include" | "i" | "exclude" | "e"
                    )
                })
            {
                return None;
            }
            let n = nodes.as_ref().map_or(1, |n| n.value);
            let mut written = gpus.written.clone();
            let mut via = gpus.via.clone();
            if let Some(nd) = &nodes {
                written = format!("{} {written}", nd.written);
                via.extend(nd.via.clone());
            }
            (
                gpus.value.checked_mul(n)?,
                format!(
                    "`deepspeed {written}` at {at}{}",
                    via_text(files, origin, &via)
                ),
            )
        }
        "torchrun" => {
            let per = match int_option(o, &["nproc_per_node"]) {
                Some(r) => r.ok()?,
                None => IntOpt {
                    value: 1,
                    written: "(no --nproc_per_node: 1 per node)".into(),
                    via: Vec::new(),
                },
            };
            let nodes = match o.iter().rev().find(|(k, _, _)| k == "nnodes") {
                Some((_, Some(v), _)) if v.value.contains(':') => {
                    let (a, b) = v.value.split_once(':')?;
                    if a != b {
                        return None; // elastic: the node count is decided at run time
                    }
                    Some(IntOpt {
                        value: a.parse().ok()?,
                        written: format!("--nnodes {}", v.value),
                        via: v.via.clone(),
                    })
                }
                Some(_) => Some(int_option(o, &["nnodes"])?.ok()?),
                None => None,
            };
            let n = nodes.as_ref().map_or(1, |n| n.value);
            let mut written = per.written.clone();
            let mut via = per.via.clone();
            if let Some(nd) = &nodes {
                written = format!("{} {written}", nd.written);
                via.extend(nd.via.clone());
            }
            (
                per.value.checked_mul(n)?,
                format!(
                    "`torchrun {written}` at {at}{}",
                    via_text(files, origin, &via)
                ),
            )
        }
        "accelerate" => match int_option(o, &["num_processes"]) {
            Some(r) => {
                let n = r.ok()?;
                (
                    n.value,
                    format!(
                        "`accelerate launch {}` at {at}{}",
                        n.written,
                        via_text(files, origin, &n.via)
                    ),
                )
            }
            None => configs.iter().find_map(|(f, c)| {
                let root = files.config(*f, *c)?;
                accelerate_processes(files, *f, root)
            })?,
        },
        "mpirun" | "mpiexec" => {
            let n = int_option(o, &["np", "n"])?.ok()?;
            (n.value, format!("`{launcher} {}` at {at}", n.written))
        }
        _ => {
            // `mpirun -np 16 python train.py`: one process per rank.
            let mpi = inv
                .wrappers
                .iter()
                .find(|(w, _)| w == "mpirun" || w == "mpiexec");
            if let Some((w, words)) = mpi {
                let n = int_option(&options(words), &["np", "n"])?.ok()?;
                (n.value, format!("`{w} {}` at {at}", n.written))
            } else {
                // `srun python train.py`: one process per task.
                let srun = inv.wrappers.iter().find(|(w, _)| w == "srun");
                let (_, words) = srun?;
                let so = options(words);
                let sb = &files.facts(origin).sbatch;
                let from_sbatch = |key: &str| {
                    sb.iter()
                        .rev()
                        .find(|(k, _, _)| k == key)
                        .and_then(|(_, v, s)| Some((v.parse::<u64>().ok()?, s.clone())))
                };
                if let Some(Ok(n)) = int_option(&so, &["ntasks", "n"]) {
                    (n.value, format!("`srun {}` at {at}", n.written))
                } else {
                    let nodes = match int_option(&so, &["nodes", "n_nodes"]) {
                        Some(r) => r.ok()?.value,
                        None => from_sbatch("nodes").map_or(1, |(v, _)| v),
                    };
                    let per = match int_option(&so, &["ntasks_per_node"]) {
                        Some(r) => r.ok()?.value,
                        None => from_sbatch("ntasks-per-node")?.0,
                    };
                    (
                        nodes.checked_mul(per)?,
                        format!("`srun` with {nodes} node(s) x {per} task(s) at {at} (#SBATCH)"),
                    )
                }
            }
        }
    };
    if processes == 0 {
        return None;
    }
    // Model parallelism divides the processes; the data-parallel degree is what batch sizes use.
    let mut divisor = 1u64;
    let mut parts = Vec::new();
    for keys in [
        &[
            "tensor_model_parallel_size",
            "tensor_parallel_size",
            "tp_size",
            "model_parallel_size",
        ][..],
        &[
            "pipeline_model_parallel_size",
            "pipeline_parallel_size",
            "pp_size",
            "pipe_parallel_size",
        ][..],
        &[
            "context_parallel_size",
            "ds_sequence_parallel_size",
            "sequence_parallel_size",
            "ulysses_degree",
        ][..],
    ] {
        let found = keys.iter().find_map(|k| flags.get(k).map(|n| (k, n)));
        if let Some((k, n)) = found {
            let v = n.as_number().filter(|v| *v >= 1.0 && v.fract() == 0.0)? as u64;
            if v > 1 {
                divisor = divisor.checked_mul(v)?;
                parts.push(format!("--{} {v}", k.replace('_', "-")));
            }
        }
    }
    // DeepSpeed's automatic tensor parallelism builds its own mesh: the data-parallel size is
    // not known from the launcher alone. (`sequence_parallel_size` in a DeepSpeed config is
    // applied where that config is checked.)
    for (f, c) in configs {
        let Some(root) = files.config(*f, *c) else {
            continue;
        };
        if root
            .get("tensor_parallel")
            .and_then(|t| t.get("autotp_size"))
            .is_some_and(|a| a.as_number() != Some(1.0) && a.as_number() != Some(0.0))
        {
            return None;
        }
    }
    if processes % divisor != 0 {
        return None;
    }
    let dp = processes / divisor;
    let why = if parts.is_empty() {
        format!("{processes} processes from {why}")
    } else {
        format!(
            "{processes} processes from {why}, divided by {} = {dp} data-parallel",
            parts.join(" x ")
        )
    };
    Some(World {
        processes,
        data_parallel: dp,
        why,
    })
}

/// An accelerate config file (`num_processes: 8`).
pub(super) fn accelerate_world(files: &Files, f: Fid, root: &Node) -> Option<World> {
    let (v, source) = accelerate_processes(files, f, root)?;
    Some(World {
        processes: v,
        data_parallel: v,
        why: format!("{v} processes from {source}"),
    })
}

fn accelerate_processes(files: &Files, f: Fid, root: &Node) -> Option<(u64, String)> {
    let is_accelerate =
        root.get("compute_environment").is_some() || root.get("distributed_type").is_some();
    if !is_accelerate {
        return None;
    }
    let n = root.get("num_processes")?;
    let v = n.as_number().filter(|v| *v >= 1.0 && v.fract() == 0.0)? as u64;
    Some((
        v,
        format!("`num_processes: {v}` at {}", files.site(f, n.span.start)),
    ))
}
