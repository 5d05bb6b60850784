//! The module classes of a file (a LightningModule built with a learning rate): where each is
//! defined and what it derives its optimizers' rate from.

use super::*;

/// The root of the tree a node belongs to.
pub(super) fn tree_root(node: Node) -> Node {
    let mut root = node;
    while let Some(up) = root.parent() {
        root = up;
    }
    root
}

impl<'s> Walker<'s> {
    /// The text of the class `name` defined at the top level of the file (the first, if it is
    /// defined twice).
    pub(super) fn module_text(&self, node: Node, name: &str) -> Option<&'s str> {
        let classes = self.batch.classes.get_or_init(|| {
            let root = tree_root(node);
            let mut c = root.walk();
            let mut classes = HashMap::default();
            for top in root.named_children(&mut c) {
                let class = match top.ty() {
                    "decorated_definition" => top.field("definition"),
                    _ => Some(top),
                };
                let Some(class) = class.filter(|c| c.ty() == "class_definition") else {
                    continue;
                };
                if let Some(named) = class.field("name") {
                    let name = self.text(named).to_string();
                    classes.entry(name).or_insert(class.byte_range());
                }
            }
            classes
        });
        self.src.get(classes.get(name)?.clone())
    }

    /// Whether the module class `name` of this file reads one of `words` (a factor: the world
    /// size, the accumulation) into the rate it gives its optimizers (see [`Self::rate_reads`]).
    /// A class that writes no rate the walk can see is taken to read a factor it mentions
    /// anywhere.
    pub(super) fn module_scales_rate(&self, node: Node, name: &str, words: &[&str]) -> bool {
        let mentions = |t: &str| words.iter().any(|w| contains_word(t, w));
        match self.rate_reads(node, name) {
            Some(reads) if !reads.is_empty() => reads.iter().any(|t| mentions(t)),
            Some(_) => self.module_text(node, name).is_some_and(mentions),
            None => false,
        }
    }

    /// What the class `name` of this file derives the rate of its optimizers from: each `lr=`
    /// value (or a scheduler's `max_lr=`), each `"lr"` group entry, and what a name such a value
    /// reads is bound to in the class (`lr = self.hparams.peak * self.trainer.world_size`), two
    /// steps deep. `None` when the file defines no such class; found once per class.
    pub(super) fn rate_reads(&self, node: Node, name: &str) -> Option<Vec<&'s str>> {
        let text = self.module_text(node, name)?;
        if let Some(known) = self.batch.rate_reads.borrow().get(name) {
            return Some(
                known
                    .iter()
                    .filter_map(|r| self.src.get(r.clone()))
                    .collect(),
            );
        }
        let at = offset_in(self.src, text)?;
        let class = tree_root(node).descendant_for_byte_range(at, at + text.len())?;
        let (mut rates, mut bound) = (Vec::new(), Vec::new());
        let rate_key = |k: Node| {
            let k = self.text(k);
            k == "lr" || k.ends_with("_lr") || k == "learning_rate"
        };
        let mut stack = vec![class];
        while let Some(n) = stack.pop() {
            match n.ty() {
                "keyword_argument" if n.field("name").is_some_and(rate_key) => {
                    rates.extend(n.field("value"));
                }
                "pair"
                    if n.field("key")
                        .is_some_and(|k| matches!(self.text(k), "\"lr\"" | "'lr'")) =>
                {
                    rates.extend(n.field("value"));
                }
                // A known optimizer takes its rate second (`AdamW(params, 3e-4)`).
                "call" => {
                    let args = n.field("arguments");
                    let callee = n.field("function").map_or("", |f| self.text(f));
                    let known = last_segment(callee).to_ascii_lowercase();
                    if OPTIMIZER_CLASSES.contains(&known.as_str()) {
                        rates.extend(positional(args, 1));
                    }
                }
                "assignment" | "augmented_assignment" => {
                    if let (Some(l), Some(r)) = (n.field("left"), n.field("right")) {
                        bound.extend(self.bindings(l, r));
                    }
                }
                _ => {}
            }
            let mut c = n.walk();
            stack.extend(n.named_children(&mut c));
        }
        let mut reads: Vec<Node> = rates.clone();
        let mut reading = rates;
        for _ in 0..2 {
            reading = bound
                .iter()
                .filter(|(left, _)| reading.iter().any(|t| word_in(self.text(*t), left)))
                .map(|(_, right)| *right)
                .filter(|r| !reads.contains(r))
                .collect();
            reads.extend(&reading);
        }
        let ranges = reads.iter().map(|r| r.byte_range()).collect();
        self.batch
            .rate_reads
            .borrow_mut()
            .insert(name.to_string(), ranges);
        Some(reads.iter().map(|r| self.text(*r)).collect())
    }

    /// The names an assignment binds, each with its value: `lr = x` binds `lr` to `x`, and
    /// `lr, wd = x, y` binds `lr` to `x`; a target unpacked from one value is left out.
    fn bindings<'t>(&self, left: Node<'t>, right: Node<'t>) -> Vec<(&'s str, Node<'t>)> {
        let targets = ["pattern_list", "tuple_pattern"];
        if !targets.contains(&left.ty()) {
            return vec![(self.text(left), right)];
        }
        if !matches!(right.ty(), "expression_list" | "tuple") {
            return Vec::new();
        }
        let (mut l, mut r) = (left.walk(), right.walk());
        let names: Vec<Node> = left.named_children(&mut l).collect();
        let values: Vec<Node> = right.named_children(&mut r).collect();
        match names.len() == values.len() {
            true => names
                .into_iter()
                .zip(values)
                .map(|(n, v)| (self.text(n), v))
                .collect(),
            false => Vec::new(),
        }
    }
}
