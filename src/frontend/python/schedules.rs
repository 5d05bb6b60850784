//! Learning-rate schedules sized in micro-batches (GA004's reverse case): a scheduler whose
//! length is the batch count of a loader (`len(train_loader) * epochs`), with no division on the
//! way, stepped at the boundary of a loop over that loader. And BS004's plain shape: a schedule
//! sized by the dataset's samples over the per-device batch (`len(train_ds) // batch_size`) in a
//! file that accumulates or shards its data across processes.

use super::*;

#[derive(Debug)]
pub(super) struct MicroSized {
    /// The scheduler's name as assigned (`scheduler`, `self.lr_sched`).
    name: String,
    /// The function it is built in: a plain name is another function's scheduler elsewhere.
    scope: usize,
    built: Range<usize>,
    length: String,
    /// Where the length is written: the assignment's value that holds the `len()`, or the
    /// constructor's length argument.
    length_at: Range<usize>,
    /// The loader whose `len()` sizes the schedule, as written; empty when a product with
    /// the accumulation factor does.
    loader: String,
    /// The warm-up's length rather than the schedule's.
    warmup: bool,
    /// The names the length multiplies (`steps * accum`): a loop's factor among them makes it
    /// a count of micro-batches.
    multiplied: Vec<String>,
}

#[derive(Debug)]
pub(super) struct SampleSized {
    scheduler: String,
    built: Range<usize>,
    /// `len(dataset) // batch` as written, where it is, its dataset and its batch.
    division: String,
    span: Range<usize>,
    dataset: String,
    batch: String,
}

impl<'s> Walker<'s> {
    /// `name = Scheduler(..., len(dataset) // batch ...)`, followed through the names it reads,
    /// with no other division on the way.
    pub(super) fn note_sample_schedule(&mut self, name: &str, ctor: Node) {
        let mut texts: Vec<&'s str> = Vec::new();
        self.gather(self.text(ctor), 0, &mut texts);
        let Some((text, (at, len, dataset, batch))) =
            texts.iter().find_map(|t| Some((*t, sample_division(t)?)))
        else {
            return;
        };
        // Another division, a choice, or a name divided in place may bring the factor in.
        let other_division = texts.iter().any(|t| {
            let rest = match *t == text {
                true => [&t[..at], &t[at + len..]].concat(),
                false => t.to_string(),
            };
            rest.contains('/') || rest.contains(" if ")
        });
        if other_division || self.divided_in_place(&texts) {
            return;
        }
        // Where the division is in the file: `text` is a slice of the source.
        let Some(start) = batch_model::offset_in(self.src, text).map(|s| s + at) else {
            return;
        };
        self.sample_sized.push(SampleSized {
            scheduler: name.to_string(),
            built: ctor.byte_range(),
            division: text[at..at + len].to_string(),
            span: start..start + len,
            dataset: dataset.to_string(),
            batch: batch.to_string(),
        });
    }

    /// The schedules sized by `len(dataset) // batch` whose batch is a data loader's, and what
    /// each leaves out: the accumulation factor when a loop with a factor above 1 steps the
    /// scheduler at its boundary, the world size when a `DistributedSampler` shards the data
    /// (not through accelerate, whose prepared scheduler steps once per process).
    pub(super) fn sample_schedules(&self, loops: &[AccumLoop]) -> Vec<SampleSchedule> {
        let mut out = Vec::new();
        let src = self.src;
        if self.sample_sized.is_empty()
            || contains_word(src, "split_batches")
            || contains_word(src, "IterableDataset")
            || contains_word(src, "Accelerator")
        {
            return out;
        }
        let distributed = !self.facts.ddp_wraps.is_empty()
            || memchr::memmem::find(src.as_bytes(), b"init_process_group").is_some();
        for s in &self.sample_sized {
            // The loader's batch, possibly passed on under its last name (`args.batch_size` to a
            // `batch_size` parameter).
            let batch = last_segment(&s.batch);
            if !self
                .loader_batch_args
                .iter()
                .any(|l| last_segment(l.text) == batch)
            {
                continue;
            }
            let mut missing = Vec::new();
            let boundary = loops.iter().find(|lp| {
                !lp.factor_value.is_some_and(|v| v <= 1.0)
                    && lp.boundary_scheduler_steps.iter().any(|step| {
                        self.scheduler_steps
                            .iter()
                            .any(|(span, recv)| *span == step.span && *recv == s.scheduler)
                    })
            });
            if let Some(lp) = boundary {
                missing.push(Missing::Accumulation(lp.factor.clone(), lp.header.clone()));
            }
            if shards(src, &s.dataset) {
                missing.push(match distributed {
                    true => Missing::World,
                    false => Missing::WorldIfLaunched,
                });
            }
            if !missing.is_empty() {
                out.push(SampleSchedule {
                    span: s.span.clone(),
                    division: s.division.clone(),
                    scheduler: s.scheduler.clone(),
                    built: s.built.clone(),
                    missing,
                });
            }
        }
        out
    }

    /// `name = Scheduler(..., len(loader) * epochs ...)` with no division and no accumulation
    /// factor, followed through the names it reads.
    pub(super) fn note_micro_schedule(&mut self, name: &str, ctor: Node) {
        if !self.loop_model || self.helper_divides(ctor) {
            return;
        }
        // What sizes the schedule: its length argument, not the optimizer or the warm-up.
        let length = self.schedule_length(ctor);
        if let Some(length) = length {
            self.note_multiplied(name, ctor, length, false);
        }
        if let Some(m) = self.micro_length(name, ctor, length.unwrap_or(ctor), false, &|_| false) {
            self.micro_schedules.push(m);
        }
    }

    /// The scheduler's warm-up, judged as its length is, whatever the length counts.
    pub(super) fn note_micro_warmup(&mut self, name: &str, ctor: Node) {
        if !self.loop_model || self.helper_divides(ctor) {
            return;
        }
        if let Some(warmup) = self.warmup_length(ctor) {
            if let Some(m) = self.micro_length(name, ctor, warmup, true, &|_| false) {
                self.micro_schedules.push(m);
            }
            self.note_multiplied(name, ctor, warmup, true);
        }
    }

    /// A warm-up length handed to a scheduler: a keyword naming the warm-up
    /// (`num_warmup_steps=`), the second argument of a `*_with_warmup` constructor, or the
    /// place `get_scheduler` takes it (the third in transformers, the fourth in diffusers).
    fn warmup_length<'t>(&self, ctor: Node<'t>) -> Option<Node<'t>> {
        let callee = ctor.field("function").map(|f| self.text(f)).unwrap_or("");
        let args = ctor.field("arguments")?;
        let mut c = args.walk();
        let all: Vec<Node> = args
            .named_children(&mut c)
            .filter(|a| a.ty() != "comment")
            .collect();
        let keyword = all.iter().find_map(|a| {
            let k = (a.ty() == "keyword_argument").then(|| a.field("name"))??;
            let k = self.text(k).to_ascii_lowercase();
            (k.contains("warmup") && (k.contains("step") || k.contains("iter")))
                .then(|| a.field("value"))?
        });
        keyword.or_else(|| {
            let at = match last_segment(callee) {
                "get_scheduler" => match self.library_of(callee) {
                    "transformers" => 2,
                    "diffusers" => 3,
                    _ => return None,
                },
                c if c.ends_with("_with_warmup") => 1,
                _ => return None,
            };
            all.get(at)
                .copied()
                .filter(|a| a.ty() != "keyword_argument")
        })
    }

    /// What the function `scope` returns is assigned to `recv` somewhere in the file
    /// (`model, opt, scheduler = build(...)`): its scheduler of that name is the caller's.
    fn returned_into(&self, scope: usize, recv: &str) -> bool {
        let Some(f) = self.scopes.get(scope).map(|s| s.name.as_str()) else {
            return false;
        };
        !f.is_empty() && self.call_targets.contains(&(f, recv))
    }

    /// `call` is of a function or method of this file (`make_schedule(opt, len(loader))`)
    /// that divides: it may size what it builds in optimizer steps from the count it is
    /// handed, so the call is no schedule of known length.
    fn helper_divides(&self, call: Node) -> bool {
        let callee = call.field("function").map_or("", |f| self.text(f));
        let name = callee.strip_prefix("self.").unwrap_or(callee);
        self.def_texts.contains_key(name) && self.dividing_defs.contains(name)
    }

    /// A length that multiplies names (`warmup_steps * accum`), none of them divided: recorded
    /// with the names, for the loops whose factor is among them.
    fn note_multiplied(&mut self, name: &str, ctor: Node, length: Node, warmup: bool) {
        let Some((multiplied, span)) = self.length_product(length) else {
            return;
        };
        self.micro_schedules.push(MicroSized {
            name: name.to_string(),
            scope: self.scope(),
            built: ctor.byte_range(),
            length: batch_model::compact_spaced(&self.src[span.clone()]),
            length_at: span,
            loader: String::new(),
            warmup,
            multiplied,
        });
    }

    /// The names a schedule's length multiplies with no division, and where the product is
    /// written: in the call, or where the name the call reads was given it (`warmup = n *
    /// accum`). How its other factors were derived (`max_steps` from `len(dl) / accum`) does
    /// not matter.
    pub(super) fn length_product(&self, length: Node) -> Option<(Vec<String>, Range<usize>)> {
        let own = self.text(length);
        let held = match self.assigned_text.get(own.trim()) {
            Some(held) if !own.contains('*') => Some(*held),
            _ => None,
        };
        let text = held.unwrap_or(own);
        if text.contains('/') || text.contains(" if ") {
            return None;
        }
        let multiplied = multiplied_names(text);
        let span = held
            .and_then(|h| batch_model::offset_in(self.src, h).map(|at| at..at + h.len()))
            .unwrap_or_else(|| length.byte_range());
        (!multiplied.is_empty()).then_some((multiplied, span))
    }

    /// `name = Scheduler(..., len(loader) * epochs ...)`: `length` counts the loader's batches.
    /// `per_process` tells a text whose divisions keep the count in micro-batches (one
    /// process's share of them).
    fn micro_length(
        &self,
        name: &str,
        ctor: Node,
        length_node: Node,
        warmup: bool,
        per_process: &dyn Fn(&str) -> bool,
    ) -> Option<MicroSized> {
        let mut texts: Vec<&'s str> = Vec::new();
        let length = length_node;
        self.gather(self.text(length), 0, &mut texts);
        // Most schedules are not sized by a `len()`: look for one first.
        let (text, loader) = texts.iter().find_map(|t| Some((*t, len_argument(t)?)))?;
        // A helper that counts, called in the length (`def steps(loader, epochs): return
        // len(loader) * epochs`): its returned count, and its loader as the caller names it.
        let (text, loader) = match self.counting_helper(text, loader, &texts) {
            Some(Some((count, loader))) => (count, loader),
            Some(None) => return None,
            None => (text, loader.to_string()),
        };
        // How the loader was built (its batch size, its sampler) is not the schedule's length,
        // and a lambda's own arithmetic (`1 - s / total`) is the progress through it.
        let loader_name = loader.as_str();
        texts.clear();
        self.gather_skipping(self.text(length), 0, &[loader_name], &mut texts);
        texts.retain(|t| {
            let t = t.trim_start();
            !t.starts_with("lambda") && !t.starts_with("def ")
        });
        // What a function handed over by name (`LambdaLR(opt, lr_lambda)`) computes on its own
        // lines (`progress = (s - warmup) / total`) is the progress through the schedule.
        let ctor_text = self.text(ctor);
        let handed: Vec<Range<usize>> = words(ctor_text)
            .filter(|w| !called_in(ctor_text, w))
            .filter_map(|w| self.def_texts.get(w))
            .filter_map(|d| batch_model::offset_in(self.src, d).map(|at| at..at + d.len()))
            .collect();
        texts.retain(|t| {
            let at = batch_model::offset_in(self.src, t);
            !at.is_some_and(|at| {
                handed
                    .iter()
                    .any(|f| f.start <= at && at + t.len() <= f.end)
            })
        });
        // What is assigned in another arm of a test than the count (`if args.max_steps > 0:
        // ... else: t_total = len(dl) * epochs`) is not on its path.
        let count_at = batch_model::offset_in(self.src, text);
        texts.retain(|t| {
            let at = batch_model::offset_in(self.src, t);
            !matches!((at, count_at), (Some(a), Some(b)) if super::conditions::other_arms(self.src, a, b))
        });
        // A division, a choice or an explicit step count may size the schedule in optimizer
        // steps: not known.
        // A count read from outside (`args.max_steps`) is not followed.
        let unknown = texts.iter().any(|t| {
            (t.contains('/') && !per_process(t))
                || t.contains(" if ")
                || words(t).any(|w| {
                    !self.assigned_text.contains_key(w)
                        && [
                            "max_steps",
                            "total_steps",
                            "update_steps",
                            "optimizer_steps",
                        ]
                        .iter()
                        .any(|k| contains_word(w, k))
                })
        });
        if unknown || self.divided_in_place(&texts) {
            return None;
        }
        // The assignment that holds the count, or the count alone when it is written in the
        // constructor.
        let (length, length_at) = if text == self.text(ctor) {
            (format!("len({loader})"), length_node.byte_range())
        } else if let Some(start) = batch_model::offset_in(self.src, text) {
            (batch_model::compact_spaced(text), start..start + text.len())
        } else {
            return None;
        };
        Some(MicroSized {
            name: name.to_string(),
            scope: self.scope(),
            built: ctor.byte_range(),
            length,
            length_at,
            loader: loader.to_string(),
            warmup,
            multiplied: Vec::new(),
        })
    }

    /// A scheduler's construction, wherever it is (assigned, returned, passed on): what its
    /// length reads, and whether it counts optimizer steps.
    pub(super) fn note_schedule_call(&mut self, call: Node, last: &str) {
        let lower = last.to_ascii_lowercase();
        let constructor = lower.contains("schedule") && lower != "scheduler"
            || (last.ends_with("LR") && last.starts_with(|c: char| c.is_ascii_uppercase()));
        if !constructor {
            return;
        }
        let length = self
            .schedule_length(call)
            .map_or(self.text(call), |a| self.text(a));
        let mut texts = Vec::new();
        self.gather(length, 0, &mut texts);
        self.schedule_lengths.push(texts.join(" "));
        if self.counts_accumulation(length, 0) {
            self.facts.schedule_in_optimizer_steps = true;
        }
    }

    /// `next(it)` in a `while` loop: the loop iterates over `it`.
    pub(super) fn note_next(&mut self, call: Node) {
        let Some(arg) = call
            .field("arguments")
            .and_then(|a| a.named_child(0))
            .map(|a| self.text(a).to_string())
        else {
            return;
        };
        let innermost = self.stack.iter().rev().find_map(|(_, f)| match f {
            Frame::Loop(l) => Some(Some(*l)),
            Frame::Scope(_) => Some(None),
            _ => None,
        });
        if let Some(Some(l)) = innermost {
            if let Some(info) = self.loops.get_mut(l) {
                if info.iterates.is_empty() {
                    info.iterates = arg;
                }
            }
        }
    }

    /// The argument of a scheduler's constructor that sizes it: a keyword that counts steps
    /// (`num_training_steps`, `T_max`, `total_iters`, `steps_per_epoch`...), else the first
    /// positional argument after the optimizer that reads a `len()`, else any argument but a
    /// warm-up that does.
    pub(super) fn schedule_length<'t>(&self, ctor: Node<'t>) -> Option<Node<'t>> {
        if let Some(length) = self.named_length(ctor) {
            return Some(length);
        }
        let all = arguments(ctor);
        let reads_len = |a: &Node| {
            let mut texts = Vec::new();
            self.gather(self.text(*a), 0, &mut texts);
            texts.iter().any(|t| len_argument(t).is_some())
        };
        all.iter()
            .skip(1)
            .filter(|a| self.keyword_name(a).is_none())
            .chain(all.iter().filter(|a| {
                self.keyword_name(a)
                    .is_some_and(|k| !k.contains("warmup") && k != "optimizer")
            }))
            .find(|a| reads_len(a))
            .and_then(|a| argument_value(*a))
    }

    /// The length a scheduler's constructor is given where it takes one: a keyword for its
    /// steps, iterations or total (`num_training_steps=`, `T_max=`), or the place a known
    /// constructor takes it (`get_cosine_schedule_with_warmup(opt, warmup, total)`).
    pub(super) fn named_length<'t>(&self, ctor: Node<'t>) -> Option<Node<'t>> {
        let all = arguments(ctor);
        let total = all.iter().find(|a| {
            self.keyword_name(a).is_some_and(|k| {
                (k.contains("steps") || k.contains("iters") || k.contains("total") || k == "t_max")
                    && !k.contains("warmup")
                    && !k.contains("lr")
            })
        });
        if let Some(a) = total {
            return argument_value(*a);
        }
        let callee = ctor.field("function").map_or("", |f| self.text(f));
        let positional = positional_length(last_segment(callee), self.library_of(callee))
            .and_then(|i| all.get(i))
            .filter(|a| a.ty() != "keyword_argument");
        positional.copied()
    }

    /// A keyword argument's name, lowercased.
    fn keyword_name(&self, a: &Node) -> Option<String> {
        (a.ty() == "keyword_argument")
            .then(|| a.field("name").map(|n| self.text(n).to_ascii_lowercase()))
            .flatten()
    }

    /// A name the texts read is divided in place somewhere (`total //= accum`).
    fn divided_in_place(&self, texts: &[&str]) -> bool {
        let src = self.src.as_bytes();
        texts.iter().any(|t| {
            words(t)
                .filter(|w| self.assigned_text.contains_key(*w))
                .any(|w| {
                    memchr::memmem::find(src, format!("{w} //=").as_bytes()).is_some()
                        || memchr::memmem::find(src, format!("{w} /=").as_bytes()).is_some()
                })
        })
    }

    /// `text` and the values of the names it reads, three names deep.
    /// [`Self::gather`] for a text that is not a slice of the source: the values of the names
    /// it reads.
    pub(super) fn gather_owned(&self, text: &str, out: &mut Vec<&'s str>) {
        for w in words(text) {
            if let Some(t) = self.assigned_text.get(w) {
                self.gather(t, 1, out);
            }
        }
    }

    pub(super) fn gather(&self, text: &'s str, depth: usize, out: &mut Vec<&'s str>) {
        self.gather_skipping(text, depth, &[], out)
    }

    /// [`Self::gather`], not following the names in `skip`.
    fn gather_skipping(&self, text: &'s str, depth: usize, skip: &[&str], out: &mut Vec<&'s str>) {
        if out.contains(&text) {
            return;
        }
        out.push(text);
        if depth >= 3 {
            return;
        }
        for w in words(text).filter(|w| !skip.contains(w)) {
            if let Some(t) = self.assigned_text.get(w) {
                self.gather_skipping(t, depth + 1, skip, out);
            }
            // A function handed over by name (`LambdaLR(opt, lr_lambda)`): what it reads.
            if let Some(t) = self.def_texts.get(w) {
                self.gather_skipping(t, depth + 1, skip, out);
            }
        }
    }

    /// Each loop's schedulers stepped at the boundary whose length counts the batches of the
    /// loader the loop iterates.
    pub(super) fn match_micro_schedules(&self, loops: &mut [AccumLoop]) {
        if self.micro_schedules.is_empty() {
            return;
        }
        for lp in loops {
            let Some(iterates) = lp.iterates.clone() else {
                continue;
            };
            for step in &lp.boundary_scheduler_steps {
                let Some((_, recv)) = self.scheduler_steps.iter().find(|(s, _)| *s == step.span)
                else {
                    continue;
                };
                // In a helper the loop's loader and scheduler are its parameters: the caller
                // hands them over (`train_one_epoch(model, train_loader, opt, sched)`).
                let header = lp.header.clone();
                let handed = |param: &str, arg: &str| self.handed(param, arg, &header);
                // A count of the loader's batches, or a product with the loop's factor (a
                // count of optimizer steps turned into micro-batches), for the schedule and for
                // its warm-up.
                let factor = lp.factor.as_str();
                for (m, helper) in self.micro_schedules.iter().rev().filter_map(|m| {
                    // Built here, handed over, or returned by a helper the caller passes the
                    // loader to (`sched = make_scheduler(opt, train_loader, epochs)`).
                    // A plain name is the scheduler of the function that builds it (or of the
                    // module).
                    let local = !m.name.contains('.') && !m.name.ends_with("()");
                    let same = m.name == *recv
                        && (!local
                            || m.scope == 0
                            || m.scope == lp.scope
                            || self.returned_into(m.scope, recv));
                    let (loader, helper) = match same || handed(recv, &m.name) {
                        true => (m.loader.clone(), false),
                        false => (self.built_by_helper(recv, m)?, true),
                    };
                    let sized = match loader.is_empty() {
                        true => m.multiplied.iter().any(|w| same_operand(w, factor)),
                        false => {
                            self.iterates_over(&iterates, &loader, 0)
                                || words(&iterates).any(|w| handed(w, &loader))
                        }
                    };
                    sized.then_some((m, helper))
                }) {
                    // accelerate steps a prepared scheduler on the iterations that sync, so a
                    // loader's length counts optimizer steps; a length read from the prepared
                    // loader counts one process's share, which depends on the launch. A
                    // scheduler never prepared steps once per call, here once per sync.
                    let by_factor = m.loader.is_empty();
                    let prepared = match helper {
                        true => self.scheduler_prepared(recv),
                        false => self.scheduler_prepared(&m.name),
                    };
                    let counts_syncs = prepared && (helper || !self.unprepared_length(m));
                    if lp.accelerate && !by_factor && counts_syncs {
                        continue;
                    }
                    // One finding per length and per part.
                    if lp.micro_sized_schedules.iter().any(|s| {
                        s.warmup == m.warmup && (s.length_at == m.length_at || s.built == m.built)
                    }) {
                        continue;
                    }
                    lp.micro_sized_schedules.push(MicroSchedule {
                        step: step.clone(),
                        built: m.built.clone(),
                        length: m.length.clone(),
                        length_at: m.length_at.clone(),
                        warmup: m.warmup,
                        by_factor,
                        prepared,
                        counter: None,
                        ends_training: false,
                        micro_bound: None,
                    });
                }
            }
        }
    }
}

impl<'s> Walker<'s> {
    /// Schedules written by hand: what a loop's counter of optimizer steps is compared with or
    /// divides (`g["lr"] = base * (1 - updates / total)`), when it counts the batches of the
    /// loader the loop iterates, read as a scheduler's length is.
    pub(super) fn match_counter_schedules(
        &self,
        tree: &Tree,
        loops: &mut [AccumLoop],
        counter_uses: &[Vec<batch_model::CounterUse>],
    ) {
        let root = tree.root_node();
        // A counter of optimizer steps counts one process's: a count divided by the
        // data-parallel size alone is still in micro-batches.
        let per_process = |t: &str| self.divides_by_world_only(tree, loops, t);
        // Found against the loops as read, then added (the batch model reads them all).
        let mut found: Vec<(usize, MicroSchedule)> = Vec::new();
        for (i, (lp, uses)) in loops.iter().zip(counter_uses).enumerate() {
            let Some(iterates) = &lp.iterates else {
                continue;
            };
            let node = |r: &Range<usize>| root.descendant_for_byte_range(r.start, r.end);
            let ends_training = |u: &batch_model::CounterUse, used: Node| {
                used.ty() == "comparison_operator"
                    && self
                        .step_bounds
                        .iter()
                        .any(|b| b.counter == u.counter && contains_word(self.text(used), &b.total))
            };
            // The comparison that ends the training first: it says most of what the length is.
            let mut uses: Vec<&batch_model::CounterUse> = uses.iter().collect();
            uses.sort_by_key(|u| !node(&u.used).is_some_and(|used| ends_training(u, used)));
            for u in uses {
                let (Some(count), Some(used)) = (node(&u.count), node(&u.used)) else {
                    continue;
                };
                let Some(m) = self.micro_length(&u.counter, used, count, false, &per_process)
                else {
                    continue;
                };
                let once = !lp
                    .micro_sized_schedules
                    .iter()
                    .chain(found.iter().filter(|(j, _)| *j == i).map(|(_, s)| s))
                    .any(|s| s.length_at == m.length_at);
                if once && self.iterates_over(iterates, &m.loader, 0) {
                    let ends_training = ends_training(u, used);
                    found.push((
                        i,
                        MicroSchedule {
                            step: Call {
                                span: u.used.clone(),
                                statement: None,
                            },
                            built: u.used.clone(),
                            length: m.length,
                            length_at: m.length_at,
                            warmup: false,
                            by_factor: false,
                            prepared: false,
                            counter: Some(u.counter.clone()),
                            ends_training,
                            micro_bound: None,
                        },
                    ));
                }
            }
        }
        for (i, schedule) in found {
            loops[i].micro_sized_schedules.push(schedule);
        }
    }

    /// The loop's iterable reads the loader as a whole word (`enumerate(train_loader)`,
    /// `tqdm(dl)`), or a name bound to it (`self.loader = loader`) or to a wrapper of it
    /// (`bar = tqdm(loader, total=...)`).
    fn iterates_over(&self, iterates: &str, loader: &str, depth: usize) -> bool {
        words(iterates).any(|w| {
            w == loader
                || self
                    .assigned_text
                    .get(loader)
                    .is_some_and(|t| t.trim() == w)
                || (depth < 2
                    && self
                        .assigned_text
                        .get(w)
                        .and_then(|t| first_argument(t).or(Some(t.trim())))
                        .is_some_and(|t| t != iterates && self.iterates_over(t, loader, depth + 1)))
        })
    }

    /// `a, b, loader, sched = accelerator.prepare(a, b, loader, sched)`, or a helper that does
    /// it for them: a call that rebinds two or more of the objects it is handed
    /// (`self.model, self.optimizer = self.setup(self.accelerator, self.model, self.optimizer)`).
    pub(super) fn note_prepare(&mut self, at: usize, left: Node, right: Node) {
        let Some(func) = right.field("function") else {
            return;
        };
        let names = |n: Node| -> Vec<&'s str> {
            let mut c = n.walk();
            match n.ty() {
                "pattern_list" | "tuple_pattern" | "list_pattern" | "argument_list" => n
                    .named_children(&mut c)
                    .filter(|k| k.ty() != "comment")
                    .map(|k| self.text(k))
                    .collect(),
                _ => vec![self.text(n)],
            }
        };
        let args = right.field("arguments").map(names).unwrap_or_default();
        let bound = names(left);
        let rebinds = bound.len() >= 2 && bound.iter().all(|b| args.contains(b));
        if self.text(func).ends_with(".prepare") || rebinds {
            self.prepares.push((at, bound, args));
        }
    }

    /// The schedule was prepared, and its length read a loader before `prepare` rebound it.
    fn unprepared_length(&self, m: &MicroSized) -> bool {
        let prepared = |name: &str| {
            self.prepares
                .iter()
                .filter(|(_, bound, _)| bound.contains(&name))
                .map(|(at, _, _)| *at)
                .min()
        };
        self.scheduler_prepared(&m.name) && prepared(&m.loader).is_some_and(|at| m.built.start < at)
    }

    /// `text` is a function's definition that counts (`def steps(loader, epochs): return
    /// len(loader) * epochs`) and a text of the length calls it: `Some` of its returned count and
    /// the loader the caller hands it, or `Some(None)` when the count is not plain (a division,
    /// a choice, several returns). `None` when `text` is not such a helper (a lambda's closure
    /// handed over by name is read as before).
    fn counting_helper(
        &self,
        text: &'s str,
        loader: &str,
        texts: &[&'s str],
    ) -> Option<Option<(&'s str, String)>> {
        let def = text.trim_start().strip_prefix("def ")?;
        let name = def.split('(').next()?.trim();
        let call = texts.iter().find(|t| **t != text && called_in(t, name))?;
        if text.contains('/') || text.contains(" if ") || text.matches("return ").count() != 1 {
            return Some(None);
        }
        let open = text.find('(')?;
        let params = top_level_args(&text[open + 1..])?;
        let returned = text.find("return ")? + "return ".len();
        let rest = &text[returned..];
        // The logical line ends at a newline, a character boundary.
        let count = rest[..crate::source::logical_line(rest.as_bytes(), 0).len()].trim_end();
        if !count.contains("len(") {
            return Some(None);
        }
        let at = call.find(&format!("{name}("))? + name.len() + 1;
        let args = top_level_args(&call[at..])?;
        Some(argument_for(&params, &args, loader).map(|l| (count, l.to_string())))
    }

    /// `recv = f(...)` where `f` returns the schedule `m` (named `f()`): the loader its length
    /// reads as the caller names it (the argument given to `f`'s parameter of that name), or as
    /// written when it is not a parameter.
    fn built_by_helper(&self, recv: &str, m: &MicroSized) -> Option<String> {
        let f = m.name.strip_suffix("()")?;
        let call = self.assigned_text.get(recv)?.trim();
        let open = call.find('(')?;
        if last_segment(call[..open].trim()) != f || !call.ends_with(')') {
            return None;
        }
        let args = top_level_args(&call[open + 1..])?;
        let def = self.def_texts.get(f)?;
        let params = top_level_args(&def[def.find('(')? + 1..])?;
        argument_for(&params, &args, &m.loader).map(str::to_string)
    }

    /// The scheduler is handed to `prepare` (or to a helper that rebinds it), or the file
    /// prepares a scheduler on its own (`prepare_scheduler`).
    pub(super) fn scheduler_prepared(&self, name: &str) -> bool {
        self.prepares
            .iter()
            .any(|(_, _, args)| args.contains(&name))
            || contains_word(self.src, "prepare_scheduler")
    }

    /// `completed_steps += 1` under `if accelerator.sync_gradients:` or the accumulation
    /// boundary: the counter counts optimizer steps.
    pub(super) fn note_step_counter(&mut self, node: Node, counter: &str) {
        let at_step = self.ctx(node.start_byte()).branches.iter().any(|b| {
            self.conds.get(b.cond).is_some_and(|c| {
                c.sync == Some(b.taken)
                    || c.accum
                        .as_ref()
                        .is_some_and(|a| a.boundary_when_true == b.taken)
            })
        });
        if at_step {
            self.step_counters
                .push((counter.to_string(), node.start_byte()));
        }
    }

    /// `while c < total:` and `if c >= total: break` (or `return`, `exit()`): training ends
    /// when `c` reaches `total`.
    pub(super) fn note_step_bound(&mut self, node: Node) {
        let Some(cond) = node.field("condition").map(unparen) else {
            return;
        };
        if cond.ty() != "comparison_operator" {
            return;
        }
        let mut c = cond.walk();
        let kids: Vec<Node> = cond.children(&mut c).collect();
        let [counter, op, total] = kids.as_slice() else {
            return;
        };
        let bound = match (node.ty(), self.text(*op)) {
            ("while_statement", "<" | "<=") => true,
            ("if_statement", ">=" | ">" | "==") => node.field("consequence").is_some_and(|b| {
                // Bound first: the iterator borrows the cursor.
                let mut c = b.walk();
                let ends = b.named_children(&mut c).any(|n| self.ends_run(n));
                ends
            }),
            _ => false,
        };
        if bound {
            self.step_bounds.push(StepBound {
                counter: self.text(*counter).to_string(),
                total: self.text(*total).to_string(),
                at: cond.byte_range(),
            });
        }
    }

    /// A statement that leaves the training: `break`, `return`, or a call of `exit()`.
    fn ends_run(&self, stmt: Node) -> bool {
        match stmt.ty() {
            "break_statement" | "return_statement" => true,
            "expression_statement" => stmt
                .named_child(0)
                .filter(|c| c.ty() == "call")
                .and_then(|c| c.field("function"))
                .is_some_and(|f| matches!(self.text(f), "exit" | "sys.exit" | "quit" | "os._exit")),
            _ => false,
        }
    }

    /// A schedule's length is the count of a loop whose every iteration steps the optimizer
    /// once (`for it in range(max_iters):` around the micro-step loop): it counts optimizer steps.
    pub(super) fn length_counts_updates(&self, iterates: &str) -> bool {
        let Some(args) = iterates
            .trim()
            .strip_prefix("range(")
            .and_then(|r| r.strip_suffix(')'))
        else {
            return false;
        };
        // `range(stop)` or `range(start, stop[, step])`.
        let parts: Vec<&str> = args.split(',').collect();
        let stop = parts
            .get(usize::from(parts.len() > 1))
            .copied()
            .unwrap_or("");
        self.schedule_length_reads(stop)
    }

    /// A schedule's length reads this setting, however it is reached (`cfg.max_train_steps`
    /// and `self.cfg.max_train_steps` are the same setting).
    fn schedule_length_reads(&self, setting: &str) -> bool {
        let name = last_segment(setting.trim());
        !name.is_empty()
            && name.starts_with(|c: char| c.is_alphabetic() || c == '_')
            && self
                .schedule_lengths
                .iter()
                .any(|l| words(l).any(|w| last_segment(w) == name))
    }

    /// A schedule's length is the total that ends training, counted by a counter of optimizer
    /// steps (`while completed_steps < max_train_steps`): the schedule counts optimizer steps.
    pub(super) fn length_bounds_optimizer_steps(&self) -> bool {
        self.step_bounds.iter().any(|b| {
            self.step_counters.iter().any(|(c, _)| *c == b.counter)
                && self.schedule_length_reads(&b.total)
        })
    }
}

impl<'s> Walker<'s> {
    /// `param`, a parameter of the function of this file that holds `within`, is given `arg`
    /// by a call of that function (by position or by keyword).
    fn handed(&self, param: &str, arg: &str, within: &Range<usize>) -> bool {
        let src = self.src;
        // The innermost function that holds it (a nested function is held by its outer one too).
        let holder = self
            .def_texts
            .iter()
            .filter(|(_, text)| {
                batch_model::offset_in(src, text)
                    .is_some_and(|at| at <= within.start && within.end <= at + text.len())
            })
            .min_by_key(|(_, text)| text.len());
        let Some((name, text)) = holder else {
            return false;
        };
        let Some(params) = text
            .find('(')
            .and_then(|open| top_level_args(&text[open + 1..]))
        else {
            return false;
        };
        // A name the function reads from outside is not handed to it.
        if !param_names(&params).contains(&param) {
            return false;
        }
        let bytes = src.as_bytes();
        memchr::memmem::find_iter(bytes, format!("{name}(").as_bytes()).any(|at| {
            let before = at.checked_sub(1).map(|i| bytes[i]);
            let def = src[..at].trim_end().ends_with("def");
            if def || before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return false;
            }
            top_level_args(&src[at + name.len() + 1..])
                .is_some_and(|args| argument_for(&params, &args, param) == Some(arg))
        })
    }
}

/// The arguments of a call (or the parameters of a definition) that starts just after its `(`,
/// split at the commas of its own level, up to its `)`.
pub(super) fn top_level_args(text: &str) -> Option<Vec<&str>> {
    let mut depth = 0usize;
    let mut start = 0;
    let mut out = Vec::new();
    for (i, b) in text.bytes().enumerate() {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' if depth > 0 => depth -= 1,
            b')' => {
                let last = text[start..i].trim();
                if !last.is_empty() {
                    out.push(last);
                }
                return Some(out);
            }
            b',' if depth == 0 => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    None
}

/// What a call hands a function's parameter `param` (by keyword or by position), when it is a
/// name or an attribute; `param` itself when the function has no such parameter (a name the
/// function reads from outside).
fn argument_for<'a>(params: &[&str], args: &[&'a str], param: &'a str) -> Option<&'a str> {
    let Some(index) = param_names(params).iter().position(|p| *p == param) else {
        return Some(param);
    };
    let keyword = args.iter().find_map(|a| {
        let (k, v) = a.split_once('=')?;
        (k.trim() == param && !v.starts_with('=')).then_some(v.trim())
    });
    let given = keyword.or_else(|| {
        args.iter()
            .filter(|a| !a.contains('='))
            .nth(index)
            .map(|a| a.trim())
    })?;
    given
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
        .then_some(given)
}

/// The names of a definition's parameters as written (`loader: DataLoader = None` → `loader`),
/// without `self`.
fn param_names<'a>(params: &[&'a str]) -> Vec<&'a str> {
    params
        .iter()
        .map(|p| p.split([':', '=']).next().unwrap_or("").trim())
        .filter(|p| *p != "self")
        .collect()
}

/// `name` is called somewhere in `text` (`name(`).
fn called_in(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let whole = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.');
        whole && text[at + name.len()..].trim_start().starts_with('(')
    })
}

/// Where a scheduler of torch or transformers takes its length as a positional argument, the
/// optimizer being the first: `CosineAnnealingLR(opt, T_max)`, `PolynomialLR(opt,
/// total_iters)`, `OneCycleLR(opt, max_lr, total_steps)`, `ConstantLR(opt, factor,
/// total_iters)`, `LinearLR(opt, start, end, total_iters)`, and every
/// `get_*_schedule_with_warmup(opt, num_warmup_steps, num_training_steps)` but the constant and
/// inverse-square-root ones, which take no length; `get_scheduler(name, opt,
/// num_warmup_steps, num_training_steps)` in transformers, with `step_rules` before the
/// warm-up in diffusers.
fn positional_length(constructor: &str, library: &str) -> Option<usize> {
    match constructor {
        "get_scheduler" if library == "transformers" => Some(3),
        "get_scheduler" if library == "diffusers" => Some(4),
        "CosineAnnealingLR" | "PolynomialLR" => Some(1),
        "OneCycleLR" | "ConstantLR" => Some(2),
        "LinearLR" => Some(3),
        c if c.ends_with("_schedule_with_warmup")
            && !c.contains("constant")
            && !c.contains("inverse_sqrt") =>
        {
            Some(2)
        }
        _ => None,
    }
}

/// The first positional argument of a call as written: `tqdm(loader, total=n)` → `loader`.
fn first_argument(text: &str) -> Option<&str> {
    let open = text.find('(')?;
    let inner = text.get(open + 1..text.rfind(')')?)?;
    let first = inner.split(',').next()?.trim();
    (!first.is_empty() && !first.contains('=') && !first.contains('(')).then_some(first)
}

/// `X` of the first `len(X)` in `text`, when it is a plain name or attribute.
fn len_argument(text: &str) -> Option<&str> {
    len_calls(text).next().map(|(_, arg, _)| arg)
}

/// Each `len(X)` in `text` whose X is a plain name or attribute: where it starts, X, and the
/// text after its `)`.
fn len_calls(text: &str) -> impl Iterator<Item = (usize, &str, &str)> {
    let bytes = text.as_bytes();
    memchr::memmem::find_iter(bytes, b"len(").filter_map(move |at| {
        let before = at.checked_sub(1).and_then(|i| bytes.get(i));
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.') {
            return None;
        }
        let rest = text.get(at + 4..)?;
        let close = rest.find(')')?;
        let arg = rest.get(..close)?.trim();
        plain_name(arg).then(|| (at, arg, &rest[close + 1..]))
    })
}

/// A `DistributedSampler` is built over `dataset` (its first argument): each process reads its
/// share of it.
pub(super) fn shards(src: &str, dataset: &str) -> bool {
    memchr::memmem::find_iter(src.as_bytes(), b"DistributedSampler(").any(|at| {
        let arg = src[at + "DistributedSampler(".len()..].trim_start();
        let arg = arg.strip_prefix("dataset").map_or(arg, |r| {
            r.trim_start()
                .strip_prefix('=')
                .map_or(arg, str::trim_start)
        });
        arg.strip_prefix(dataset)
            .is_some_and(|r| !r.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.'))
    })
}

/// `len(X) // D` or `len(X) / D` in `text`, X a dataset (not a loader or a list of batches)
/// and D a plain name or attribute that does not say it is a global batch: where it starts,
/// its length, X and D.
fn sample_division(text: &str) -> Option<(usize, usize, &str, &str)> {
    len_calls(text).find_map(|(at, arg, after)| {
        let lower = arg.to_ascii_lowercase();
        if ["loader", "dl", "batches", "iter"]
            .iter()
            .any(|k| lower.contains(k))
        {
            return None;
        }
        let op = after.trim_start();
        let divisor = op.strip_prefix("//").or_else(|| op.strip_prefix('/'))?;
        let divisor = divisor.trim_start();
        let d_len = divisor
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(divisor.len());
        let batch = &divisor[..d_len];
        let b = batch.to_ascii_lowercase();
        if !plain_name(batch)
            || !(b.contains("batch") || b == "bs" || b.ends_with("_bs") || b.ends_with(".bs"))
            || ["global", "total", "effective"]
                .iter()
                .any(|k| b.contains(k))
            || divisor[d_len..].trim_start().starts_with(['(', '['])
        {
            return None;
        }
        // From `len(` to the divisor's end, all within `text`.
        let end = text.len() - (divisor.len() - d_len);
        Some((at, end - at, arg, batch))
    })
}

/// The names and attributes in `text` (`train_loader`, `args.epochs`).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .filter(|w| !w.is_empty())
}

/// The names a text multiplies (`a * b` gives `a` and `b`; `2 * n` gives `n`), as written.
pub(super) fn multiplied_names(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let name = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
    let mut out = Vec::new();
    for (at, _) in text.match_indices('*') {
        if bytes.get(at + 1) == Some(&b'*') || (at > 0 && bytes[at - 1] == b'*') {
            continue;
        }
        let before = text[..at].trim_end().trim_end_matches(')');
        let mut start = before.len();
        // Back over names and subscripts (`hp["accum"]`, `cfg.train.accum`).
        loop {
            let b = &before.as_bytes()[..start];
            if b.last() == Some(&b']') {
                match before[..start].rfind('[') {
                    Some(open) if !before[open + 1..start - 1].contains(['[', ']']) => start = open,
                    _ => break,
                }
            } else {
                match b.iter().rposition(|c| !name(*c)) {
                    Some(i) if i + 1 < start => start = i + 1,
                    None if start > 0 => start = 0,
                    _ => break,
                }
            }
        }
        let after = text[at + 1..].trim_start().trim_start_matches('(');
        let mut end = 0;
        loop {
            let rest = &after[end..];
            if rest.starts_with('[') {
                match rest.find(']') {
                    Some(close) if !rest[1..close].contains('[') => end += close + 1,
                    _ => break,
                }
            } else {
                let n = rest.bytes().position(|c| !name(c)).unwrap_or(rest.len());
                if n == 0 {
                    break;
                }
                end += n;
            }
        }
        for w in [&before[start..], &after[..end]] {
            if w.starts_with(|c: char| c.is_alphabetic() || c == '_') {
                out.push(w.to_string());
            }
        }
    }
    out
}

/// Two operands written alike, whichever quotes their subscripts use (`hp['accum']`).
pub(crate) fn same_operand(a: &str, b: &str) -> bool {
    let quote = |c: u8| c == b'\'' || c == b'"';
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .all(|(x, y)| x == y || (quote(x) && quote(y)))
}

/// A call's arguments, without comments.
fn arguments(call: Node) -> Vec<Node> {
    let Some(args) = call.field("arguments") else {
        return Vec::new();
    };
    let mut c = args.walk();
    args.named_children(&mut c)
        .filter(|a| a.ty() != "comment")
        .collect()
}

/// What an argument hands over: a keyword's value, or the argument itself.
fn argument_value(a: Node) -> Option<Node> {
    match a.ty() {
        "keyword_argument" => a.field("value"),
        _ => Some(a),
    }
}
