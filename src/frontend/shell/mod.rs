//! Shell: tree-sitter-bash, one parse and one iterative walk per file. Lowers `$(( ))` arithmetic
//! into the shared expression form, and reads launch commands and their flags: words are expanded
//! through the variables set earlier in the script (see `expand.rs`), `eval "$CMD"` and `$OPTS`
//! are followed, branches whose condition is known are taken or skipped, and heredocs that write
//! a config file become configs of their own.
//!
//! The walk (here) hands each node to the part that reads it:
//! - `assign.rs`: assignments, as values and as text;
//! - `values.rs`: arithmetic, functions, calls and comparisons as a program valued at the end
//!   (the same valuing as Python's);
//! - `arith.rs`: the arithmetic of `let`, `expr` and `bc` words;
//! - `units.rs`: the memory unit each value is in (GB or GiB), for MEM004;
//! - `expand.rs`: words expanded through the variables, as the shell would;
//! - `flow.rs`: which statements run when the script runs as written;
//! - `launch.rs`: commands, the launchers among them, and `#SBATCH` directives;
//! - `heredoc.rs`: heredocs that write a config file.

mod arith;
mod assign;
mod expand;
mod flow;
mod heredoc;
mod launch;
mod units;
mod values;

use crate::expr::program::Program;
use crate::facts::{Comment, Facts, ScopeFacts, Topics};
use crate::frontend::fields::ShField;
use expand::Env;
use flow::StatusFrame;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use tree_sitter::{Node, Parser, Tree};
use values::{Function, Pending, PendingKind};

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

pub fn parse(text: &str) -> Result<Tree, String> {
    super::parse_with(&PARSER, tree_sitter_bash::LANGUAGE.into(), text)
}

pub fn extract(text: &str) -> Result<Facts, String> {
    let tree = parse(text)?;
    let mut w = Walker {
        src: text,
        stack: Vec::new(),
        program: Program::new(text),
        pending: Vec::new(),
        functions: HashMap::new(),
        assigned: HashSet::new(),
        consumed: Vec::new(),
        next_test: 0,
        scales: HashMap::new(),
        vars: Env::default(),
        frames: Vec::new(),
        facts: Facts::default(),
    };
    w.facts.scopes.push(ScopeFacts {
        name: String::new(),
        tests: Topics::default(),
    });
    w.walk(&tree);
    w.value_formulas();
    w.facts.syntax_error |= tree.root_node().has_error();
    Ok(w.facts)
}

struct Walker<'s> {
    src: &'s str,
    /// The functions around the node being visited: (node id, scope).
    stack: Vec<(usize, usize)>,
    /// The script's arithmetic, its bindings and functions, valued once it is read.
    program: Program<'s>,
    pending: Vec<Pending>,
    functions: HashMap<&'s str, Function<'s>>,
    /// Every name assigned so far.
    assigned: HashSet<&'s str>,
    /// Words read as what a function prints: their arithmetic is not a formula of its own.
    consumed: Vec<usize>,
    /// The next id for the tests of `if`s, `case`s and `&&` lists.
    next_test: u32,
    /// The unit each variable (and each function's output, as `f()`) is in.
    scales: HashMap<String, units::Scaled>,
    /// What each variable holds as text, for expanding command words.
    vars: Env,
    /// One frame per node on the path from the root to the node being visited: whether it
    /// runs, and what its children need to know (kept during the walk, so no lookup climbs the
    /// tree).
    frames: Vec<StatusFrame>,
    facts: Facts,
}

impl<'s> Walker<'s> {
    fn text(&self, n: Node) -> &'s str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    fn walk(&mut self, tree: &Tree) {
        let mut cursor = tree.walk();
        loop {
            let node = cursor.node();
            let field = cursor.field_name();
            self.push_frame(node, field);
            self.enter(node);
            if cursor.goto_first_child() {
                continue;
            }
            loop {
                let n = cursor.node();
                while self.stack.last().is_some_and(|(id, _)| *id == n.id()) {
                    self.stack.pop();
                }
                while self.frames.last().is_some_and(|f| f.id == n.id()) {
                    self.frames.pop();
                }
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return;
                }
            }
        }
    }

    fn scope(&self) -> usize {
        self.stack.last().map_or(0, |(_, s)| *s)
    }

    fn enter(&mut self, node: Node) {
        match node.kind() {
            "comment" => {
                self.facts.comments.push(Comment {
                    text: self.text(node).to_string(),
                    range: node.byte_range(),
                });
                self.sbatch(node);
            }
            "for_statement" => self.for_variable(node),
            "case_statement" => self.case_table(node),
            "redirected_statement" => self.heredoc(node),
            "function_definition" => self.function_scope(node),
            "variable_assignment" => self.assignment(node),
            "arithmetic_expansion" => {
                // Assignments, comparisons and what a function prints record their own
                // formula; here only bare expansions.
                let inside = self.frames.iter().rev().skip(1).any(|f| {
                    matches!(
                        f.kind,
                        "variable_assignment"
                            | "arithmetic_expansion"
                            | "test_command"
                            | "compound_statement"
                    ) || self.consumed.contains(&f.id)
                });
                let running = self.status(node) != flow::Status::Dead;
                if let (false, true, Some(expr)) = (inside, running, node.named_child(0)) {
                    self.combined(expr, 0);
                    let id = self.value_of(expr, 0);
                    self.pend(PendingKind::Expr, id, expr.byte_range());
                }
            }
            "test_command" => self.comparisons(node, 0, false),
            "compound_statement" => self.arithmetic_command(node),
            "command" => {
                match node.field("name").map(|n| self.text(n)) {
                    Some("let") => self.let_command(node),
                    Some("echo" | "printf") if self.scope() != 0 => self.function_output(node),
                    Some(_) => self.function_call(node),
                    None => {}
                }
                self.command(node)
            }
            "ERROR" => self.facts.syntax_error = true,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Value;
    use crate::facts::InlineKind;

    #[test]
    fn budget_in_arithmetic() {
        let src = "local model_size_gb=14\navail=$((gpu_memory_gb - model_size_gb - 4))\n";
        let facts = extract(src).expect("parses");
        assert_eq!(facts.formulas.len(), 1);
        assert_eq!(facts.formulas[0].lin.terms[1].value, Some(14.0));
        let src =
            "avail=$((gpu_memory_gb - model_size_gb - 4))\npython train.py --optimizer adamw\n";
        let facts = extract(src).expect("parses");
        assert_eq!(facts.formulas.len(), 1);
        assert_eq!(facts.evidence.optimizers[0].value.name, "adamw");
        assert_eq!(facts.invocations[0].script.as_deref(), Some("train.py"));
    }

    #[test]
    fn eval_of_a_command_string_with_options_and_a_heredoc_config() {
        let src = r#"#!/bin/bash
TP=1
PP=1
DP=2
WORLD_SIZE=$((TP*PP*DP))
GLOBAL_BATCH=1
MICRO_BATCH=1
CONFIG_JSON="/tmp/ds_config.json"
USE_DEEPSPEED=1
options=" \
        --tensor-model-parallel-size $TP \
        --global-batch-size $GLOBAL_BATCH"
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-deepspeed) USE_DEEPSPEED=0; shift ;;
  esac
done
if [[ ${USE_DEEPSPEED} -eq 1 ]]; then
  options="${options} \
      --deepspeed_config=${CONFIG_JSON}"
fi
cat <<EOT > $CONFIG_JSON
{
  "train_batch_size" : $GLOBAL_BATCH,
  "train_micro_batch_size_per_gpu": $MICRO_BATCH,
  "zero_optimization": {"stage": $ZERO_STAGE}
}
EOT
WORKER_STR="--num_nodes 1 --num_gpus $WORLD_SIZE"
run_cmd="deepspeed --master_port 29600 $WORKER_STR ${DIR}/pretrain_gpt.py $@ ${options}"
eval ${run_cmd}
"#;
        let facts = extract(src).expect("parses");
        assert_eq!(facts.invocations.len(), 1);
        let inv = &facts.invocations[0];
        assert_eq!(inv.launcher, "deepspeed");
        assert!(!inv.conditional);
        let words: Vec<&str> = inv.args.iter().map(|a| a.value.as_str()).collect();
        assert_eq!(
            words,
            [
                "--master_port",
                "29600",
                "--num_nodes",
                "1",
                "--num_gpus",
                "2",
                "${DIR}/pretrain_gpt.py",
                "$@",
                "--tensor-model-parallel-size",
                "1",
                "--global-batch-size",
                "1",
                "--deepspeed_config=/tmp/ds_config.json"
            ]
        );
        let gpus = &inv.args[5];
        assert!(gpus.known);
        assert_eq!(gpus.via[0].name, "WORLD_SIZE");
        assert_eq!(&src[gpus.span.clone()], "$((TP*PP*DP))");
        assert!(!inv.args[7].known);
        assert_eq!(facts.inline_configs.len(), 1);
        let cfg = &facts.inline_configs[0];
        assert_eq!(
            cfg.kind,
            InlineKind::Heredoc {
                path: Some("/tmp/ds_config.json".into())
            }
        );
        let tbs = cfg.root.get("train_batch_size").unwrap();
        assert_eq!(tbs.as_number(), Some(1.0));
        assert_eq!(&src[tbs.span.clone()], "$GLOBAL_BATCH");
        let stage = cfg
            .root
            .get("zero_optimization")
            .unwrap()
            .get("stage")
            .unwrap();
        assert!(matches!(stage.value, Value::Unknown(_)));
        assert!(cfg
            .via
            .iter()
            .any(|(s, b)| *s == tbs.span && b.name == "GLOBAL_BATCH"));
    }

    #[test]
    fn branches_defaults_wrappers_and_sbatch() {
        let src = r#"#SBATCH --nodes=2
#SBATCH --gres=gpu:a100:4
MODE=${1:-full}
BS=${2:-8}
if [ "$MODE" = "lora" ]; then GAS=4; else GAS=2; fi
if [ "$X" = "y" ]; then LR=1; fi
srun --ntasks-per-node=1 torchrun --nnodes $SLURM_NNODES --nproc_per_node $SLURM_GPUS_ON_NODE train.py --bs $BS --gas $GAS --lr $LR
"#;
        let facts = extract(src).expect("parses");
        let inv = &facts.invocations[0];
        assert_eq!(inv.launcher, "torchrun");
        assert_eq!(inv.wrappers[0].0, "srun");
        let v: Vec<(&str, bool)> = inv
            .args
            .iter()
            .map(|a| (a.value.as_str(), a.known))
            .collect();
        assert_eq!(
            v,
            [
                ("--nnodes", true),
                ("2", true),
                ("--nproc_per_node", true),
                ("4", true),
                ("train.py", true),
                ("--bs", true),
                ("8", true),
                ("--gas", true),
                ("2", true),
                ("--lr", true),
                ("1", false)
            ]
        );
        assert!(inv.args[6].via[0].default);
        let src = "export LAUNCHER=\"python -u -m torch.distributed.run --nproc_per_node 4 --nnodes 2\"\nexport CMD=\" pretrain_gpt.py --micro-batch-size 2\"\nsrun --jobid $SLURM_JOBID bash -c \"$LAUNCHER --node_rank \\$SLURM_PROCID $CMD\"\n";
        let inner = extract(src).expect("parses");
        let inv = &inner.invocations[0];
        assert_eq!(inv.launcher, "python");
        assert_eq!(inv.wrappers[0].0, "srun");
        assert_eq!(inv.script.as_deref(), Some("pretrain_gpt.py"));
        assert_eq!(facts.sbatch.len(), 2);
    }
}
#[cfg(test)]
mod dump {
    /// `MEMLINT_DUMP=run.sh cargo test shell::dump -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn dump_formulas() {
        let Ok(path) = std::env::var("MEMLINT_DUMP") else {
            return;
        };
        let text = std::fs::read_to_string(path).expect("readable");
        let facts = super::extract(&text).expect("parses");
        for f in &facts.formulas {
            println!(
                "{:?} @{:?} feeds={}",
                f.kind,
                &text[f.span.clone()],
                f.feeds
            );
            for t in &f.lin.terms {
                println!(
                    "    {} role={:?} part={:?} coef={} opaque={} value={:?} at={:?}",
                    t.symbol,
                    t.role,
                    t.part,
                    t.coef,
                    t.opaque,
                    t.value,
                    text.get(t.symbol_span.clone())
                );
            }
            println!("    + {}", f.lin.constant);
        }
    }
}
