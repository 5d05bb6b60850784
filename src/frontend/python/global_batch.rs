//! Global batches written as products (BS004): `global_batch = micro * world_size` or
//! `effective_batch = batch_size * accum`, what each product leaves out, and the step counts or
//! learning rates computed from them.

use super::*;

#[derive(Debug)]
pub(super) struct Product {
    name: String,
    span: Range<usize>,
    text: String,
    world: bool,
    accum: bool,
    /// Holds a node count or the whole world size.
    nodes: bool,
}

/// A name for a count of processes holding a data-parallel replica.
fn names_world(word: &str) -> bool {
    let w = word.to_ascii_lowercase();
    [
        "world",
        "num_processes",
        "n_gpu",
        "num_gpu",
        "ngpu",
        "nproc",
        "num_replicas",
        "dp_size",
        "data_parallel",
        "num_devices",
        "n_devices",
        "devices",
        "num_nodes",
        "dp_degree",
        "dp_world",
    ]
    .iter()
    .any(|k| w.contains(k))
}

impl<'s> Walker<'s> {
    /// `name = a * b * c` where the name says it is a global, effective or total batch and one
    /// factor is a batch size.
    pub(super) fn note_global_batch(&mut self, target: &str, right: Node) {
        if !contains_word(target, "batch") {
            return;
        }
        // `(micro * accum * world)` across lines: the product itself.
        let right = unparen(right);
        let t = target.to_ascii_lowercase();
        if !t.contains("batch")
            || !["global", "effective", "total"]
                .iter()
                .any(|k| t.contains(k))
            || ["batches", "num", "count", "token", "idx", "index"]
                .iter()
                .any(|k| t.contains(k))
        {
            return;
        }
        let text = self.text(right);
        // A plain product of names, attributes and calls without arguments that compute.
        if !text.contains('*')
            || text.chars().any(|c| {
                matches!(
                    c,
                    '+' | '-' | '/' | '%' | ',' | '[' | '"' | '\'' | '<' | '>'
                )
            })
            || text.contains(" if ")
            || text.contains("**")
        {
            return;
        }
        let words: Vec<&str> = text
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .filter(|w| !w.is_empty())
            .collect();
        let batch = words.iter().any(|w| {
            let l = w.to_ascii_lowercase();
            l.contains("batch") || l == "bs" || l.ends_with(".bs") || l.ends_with("_bs")
        });
        if !batch {
            return;
        }
        self.global_products.push(Product {
            name: target.to_string(),
            span: right.byte_range(),
            text: text.split_whitespace().collect::<Vec<_>>().join(" "),
            world: words.iter().any(|w| names_world(w)),
            nodes: words.iter().any(|w| {
                let w = w.to_ascii_lowercase();
                w.contains("node") || w.contains("world")
            }),
            accum: words
                .iter()
                .any(|w| names_accumulation(w) || w.contains("micro_batches")),
        });
    }

    /// The products that leave out a factor this file shows is in play, and are read by a step
    /// count, a warm-up or a learning rate.
    pub(super) fn global_batches(&self, loops: &[AccumLoop]) -> Vec<GlobalBatch> {
        let mut out = Vec::new();
        if self.global_products.is_empty() || contains_word(self.src, "split_batches") {
            return out;
        }
        let distributed = self.trains_data_parallel();
        // An `IterableDataset`'s length is often one rank's shard: a count of it is not judged.
        let iterable = super::batch_model::defines_iterable_dataset(self.src);
        let lightning = self.lightning();
        let readers: &[&str] = match iterable {
            true => &["lr", "learning_rate"],
            false => &["step", "warmup", "iters", "lr", "learning_rate"],
        };
        for p in &self.global_products {
            // What the file does not show, the launches that start it may: the rule decides.
            let missing = if p.accum && !p.world {
                match distributed {
                    true => Missing::World,
                    false => Missing::WorldIfLaunched,
                }
            } else if p.world && !p.accum {
                match loops.first() {
                    Some(lp) if !lp.factor_value.is_some_and(|v| v <= 1.0) => {
                        Missing::Accumulation(lp.factor.clone(), lp.header.clone())
                    }
                    Some(_) => continue,
                    None => Missing::AccumulationIfLaunched,
                }
            } else if p.world && p.accum && lightning && !p.nodes {
                // Confirmed by value: the data-parallel factor is the devices of one node.
                Missing::Nodes
            } else {
                continue;
            };
            // Read by a count of steps or a learning rate: the first such assignment in the
            // file (the map of assignments has no order of its own).
            let Some((user, _)) = self
                .assigned_text
                .iter()
                .filter(|(name, text)| {
                    let n = name.to_ascii_lowercase();
                    **name != p.name
                        && readers.iter().any(|k| n.contains(k))
                        && text
                            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                            .any(|w| w == p.name)
                })
                .min_by_key(|(name, text)| (super::batch_model::offset_in(self.src, text), *name))
            else {
                continue;
            };
            out.push(GlobalBatch {
                name: p.name.clone(),
                span: p.span.clone(),
                text: p.text.clone(),
                missing,
                used_by: user.clone(),
            });
        }
        out.sort_by_key(|g| g.span.start);
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::python::extract;

    #[test]
    fn a_global_batch_is_said_to_be_read_by_its_first_reader() {
        // Several readers: the message names the first in the file on every run, whatever the
        // order of the map the walk keeps assignments in.
        let src = "import torch.distributed as dist\ndist.init_process_group('nccl')\nworld = dist.get_world_size()\nfor step, b in enumerate(loader):\n    loss = model(b)\n    loss.backward()\n    if (step + 1) % accum == 0:\n        opt.step()\nglobal_batch = micro_batch * world\nlr = base_lr * global_batch / 256\nwarmup_steps = 1000 * global_batch\ntotal_steps = n // global_batch\nmax_iters = n // global_batch\n";
        for _ in 0..8 {
            let facts = extract(src).expect("parses");
            let users: Vec<&str> = facts
                .global_batches
                .iter()
                .map(|g| g.used_by.as_str())
                .collect();
            assert_eq!(users, ["lr"]);
        }
    }
}
