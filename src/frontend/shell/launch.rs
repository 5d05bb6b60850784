//! Commands: words expanded through the script's variables, `eval "$CMD"` and `bash -c` strings
//! followed, flags read as evidence, wrappers (`nohup`, `srun -N 2`, `env X=1`) looked through to
//! the launcher that starts a training script, and `#SBATCH` directives with the `SLURM_*`
//! variables they set.

use super::expand::{self, join_fields, text_of, Mode, RChar};
use super::flow::Status;
use super::Walker;
use crate::facts::{Arg, Invocation};
use crate::frontend::fields::ShField;
use crate::frontend::flag_evidence;
use std::ops::Range;
use tree_sitter::Node;

/// Programs that start a training script.
const LAUNCHERS: &[&str] = &[
    "python",
    "python3",
    "torchrun",
    "deepspeed",
    "accelerate",
    "srun",
    "mpirun",
    "llamafactory-cli",
    "axolotl",
    "tune",
    "composer",
    "lightning",
    "uv",
    "poetry",
    "pipenv",
];

/// Programs that start other programs: looked through to find the launcher inside.
const WRAPPING: &[&str] = &["srun", "mpirun", "uv", "poetry", "pipenv"];

impl<'s> Walker<'s> {
    /// `#SBATCH --nodes=2`: the directive, and the `SLURM_*` variables it sets for the job.
    pub(super) fn sbatch(&mut self, node: Node) {
        let text = self.text(node);
        let Some(rest) = text.strip_prefix("#SBATCH") else {
            return;
        };
        let words: Vec<&str> = rest
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let mut i = 0;
        while i < words.len() {
            let w = words[i];
            let (key, value) = if let Some(long) = w.strip_prefix("--") {
                match long.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => {
                        i += 1;
                        (
                            long.to_string(),
                            words.get(i).copied().unwrap_or("").to_string(),
                        )
                    }
                }
            } else if let Some(short) = w.strip_prefix('-') {
                let cut = short.chars().next().map_or(0, char::len_utf8);
                let (k, inline) = short.split_at(cut);
                let v = if inline.is_empty() {
                    i += 1;
                    words.get(i).copied().unwrap_or("").to_string()
                } else {
                    inline.trim_start_matches('=').to_string()
                };
                let long = match k {
                    "N" => "nodes",
                    "n" => "ntasks",
                    "G" => "gpus",
                    other => other,
                };
                (long.to_string(), v)
            } else {
                i += 1;
                continue;
            };
            i += 1;
            let span = node.byte_range();
            let gpus = match key.as_str() {
                "gres" => value
                    .split(',')
                    .find(|g| g.starts_with("gpu"))
                    .and_then(|g| g.rsplit(':').next())
                    .filter(|n| n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty())
                    .map(str::to_string),
                "gpus-per-node" => Some(value.rsplit(':').next().unwrap_or("").to_string()),
                _ => None,
            };
            let seeds: &[&str] = match key.as_str() {
                "nodes" => &["SLURM_NNODES", "SLURM_JOB_NUM_NODES"],
                "ntasks-per-node" => &["SLURM_NTASKS_PER_NODE"],
                "ntasks" => &["SLURM_NTASKS"],
                _ => &[],
            };
            for name in seeds {
                if value.chars().all(|c| c.is_ascii_digit()) && !value.is_empty() {
                    let chars = expand::unknown_chars(&value, span.clone())
                        .into_iter()
                        .map(|mut r| {
                            r.flags = 0;
                            r
                        })
                        .collect();
                    self.vars.bind(name, chars, span.clone(), false);
                }
            }
            if let Some(g) = gpus.filter(|g| !g.is_empty() && g.chars().all(|c| c.is_ascii_digit()))
            {
                for name in ["SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"] {
                    let chars = expand::unknown_chars(&g, span.clone())
                        .into_iter()
                        .map(|mut r| {
                            r.flags = 0;
                            r
                        })
                        .collect();
                    self.vars.bind(name, chars, span.clone(), false);
                }
            }
            self.facts.sbatch.push((key, value, span));
        }
    }

    pub(super) fn command(&mut self, node: Node) {
        let status = self.status(node);
        if status == Status::Dead {
            return;
        }
        let mut fields: Vec<Vec<RChar>> = Vec::new();
        if let Some(name) = node.field("name") {
            fields.extend(
                self.vars
                    .expand_source(self.text(name), name.start_byte(), Mode::Word),
            );
        }
        let mut c = node.walk();
        let arg_nodes: Vec<Node> = node.children_by_field_name("argument", &mut c).collect();
        for a in arg_nodes {
            fields.extend(
                self.vars
                    .expand_source(self.text(a), a.start_byte(), Mode::Word),
            );
        }
        // `eval "$CMD"` runs the words as a new command line.
        let mut rounds = 0;
        while fields.first().is_some_and(|f| text_of(f) == "eval") && rounds < 4 {
            let joined = join_fields(&fields[1..]);
            fields = self.vars.expand(&joined, Mode::Word, 1);
            rounds += 1;
        }
        // `srun ... bash -c "$LAUNCHER $CMD"`: the string is a command line of its own.
        if let Some(at) = (0..fields.len().saturating_sub(2)).find(|&i| {
            matches!(text_of(&fields[i]).rsplit('/').next(), Some("bash" | "sh"))
                && text_of(&fields[i + 1]) == "-c"
        }) {
            let inner = self.vars.expand(&fields[at + 2], Mode::Word, 1);
            let mut spliced: Vec<Vec<RChar>> = fields[..at].to_vec();
            spliced.extend(inner);
            spliced.extend(fields[at + 3..].iter().cloned());
            fields = spliced;
        }
        let words: Vec<Arg> = fields.iter().map(|f| self.vars.arg(f)).collect();
        // Flags anywhere in any command: `--optim adamw_torch`, `--optimizer=adamw`, `--bf16`.
        for (i, a) in words.iter().enumerate() {
            let Some(flag) = a.value.strip_prefix("--") else {
                continue;
            };
            if let Some((k, v)) = flag.split_once('=') {
                flag_evidence(k, v, a.span.clone(), &mut self.facts.evidence);
            } else if let Some(next) = words.get(i + 1).filter(|n| !n.value.starts_with('-')) {
                let span = if next.span.start >= a.span.start {
                    a.span.start..next.span.end
                } else {
                    a.span.clone()
                };
                flag_evidence(flag, &next.value, span, &mut self.facts.evidence);
            } else {
                flag_evidence(flag, "", a.span.clone(), &mut self.facts.evidence);
            }
        }
        self.launch(words, node.byte_range(), status == Status::Maybe);
    }

    /// Record a command that starts a training script, looking through wrappers (`nohup`,
    /// `srun -N 2`, `env X=1`).
    fn launch(&mut self, words: Vec<Arg>, span: Range<usize>, conditional: bool) {
        let prog = |a: &Arg| a.value.rsplit('/').next().unwrap_or("").to_string();
        let is_launcher = |p: &str| {
            let base = p.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
            LAUNCHERS.contains(&p) || LAUNCHERS.contains(&base)
        };
        let mut wrappers: Vec<(String, Vec<Arg>)> = Vec::new();
        let mut i = 0;
        while let Some(w) = words.get(i) {
            let p = prog(w);
            if matches!(
                p.as_str(),
                "nohup" | "exec" | "time" | "nice" | "sudo" | "env" | "command" | "stdbuf"
            ) || (w.value.contains('=') && !w.value.starts_with('-') && i > 0)
            {
                wrappers.push((p, Vec::new()));
                i += 1;
                continue;
            }
            if matches!(
                p.as_str(),
                "srun" | "mpirun" | "mpiexec" | "salloc" | "uv" | "poetry" | "pipenv" | "conda"
            ) {
                let inner = (i + 1..words.len()).find(|&j| {
                    is_launcher(&prog(&words[j])) && !WRAPPING.contains(&prog(&words[j]).as_str())
                });
                if let Some(j) = inner {
                    wrappers.push((p, words[i + 1..j].to_vec()));
                    i = j;
                    continue;
                }
            }
            break;
        }
        let Some(first) = words.get(i) else { return };
        let launcher = prog(first);
        if !is_launcher(&launcher) {
            return;
        }
        let args = words[i + 1..].to_vec();
        let script = args
            .iter()
            .map(|a| a.value.as_str())
            .find(|a| a.ends_with(".py") && !a.starts_with('-'))
            .map(str::to_string);
        if script.is_some() {
            self.facts.evidence.trains.push(span.clone());
        }
        self.facts.invocations.push(Invocation {
            launcher,
            script,
            args,
            span,
            wrappers,
            conditional,
        });
    }
}
