//! Learning-rate schedules sized in micro-batches (GA004's reverse case): a scheduler whose
//! length is the batch count of a loader (`len(train_loader) * epochs`), with no division on the
//! way, stepped at the boundary of a loop over that loader.

use super::*;

#[derive(Debug)]
pub(super) struct MicroSized {
    /// The scheduler's name as assigned (`scheduler`, `self.lr_sched`).
    name: String,
    built: Range<usize>,
    length: String,
    /// The loader whose `len()` sizes the schedule, as written.
    loader: String,
}

impl<'s> Walker<'s> {
    /// `name = Scheduler(..., len(loader) * epochs ...)` with no division and no accumulation
    /// factor, followed through the names it reads.
    pub(super) fn note_micro_schedule(&mut self, name: &str, ctor: Node) {
        if !self.loop_model {
            return;
        }
        let mut texts: Vec<&'s str> = Vec::new();
        self.gather(self.text(ctor), 0, &mut texts);
        // Most schedules are not sized by a `len()`: look for one first.
        let Some((text, loader)) = texts.iter().find_map(|t| Some((*t, len_argument(t)?))) else {
            return;
        };
        // A division, a choice or an explicit step count may size the schedule in optimizer
        // steps: not known.
        // A count read from outside (`args.max_steps`) is not followed.
        let unknown = texts.iter().any(|t| {
            t.contains('/')
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
        // A name divided in place later (`total //= accum`).
        let divided_later = texts.iter().any(|t| {
            words(t)
                .filter(|w| self.assigned_text.contains_key(*w))
                .any(|w| {
                    memchr::memmem::find(self.src.as_bytes(), format!("{w} //=").as_bytes())
                        .is_some()
                        || memchr::memmem::find(self.src.as_bytes(), format!("{w} /=").as_bytes())
                            .is_some()
                })
        });
        if unknown || divided_later {
            return;
        }
        // The assignment that holds the count, or the count alone when it is written in the
        // constructor.
        let length = if text == self.text(ctor) {
            format!("len({loader})")
        } else {
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        self.micro_schedules.push(MicroSized {
            name: name.to_string(),
            built: ctor.byte_range(),
            length,
            loader: loader.to_string(),
        });
    }

    /// `text` and the values of the names it reads, three names deep.
    fn gather(&self, text: &'s str, depth: usize, out: &mut Vec<&'s str>) {
        if out.contains(&text) {
            return;
        }
        out.push(text);
        if depth >= 3 {
            return;
        }
        for w in words(text) {
            if let Some(t) = self.assigned_text.get(w) {
                self.gather(t, depth + 1, out);
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
                let Some(m) = self
                    .micro_schedules
                    .iter()
                    .rev()
                    .find(|m| m.name == *recv && self.iterates_over(&iterates, &m.loader))
                else {
                    continue;
                };
                lp.micro_sized_schedules.push(MicroSchedule {
                    step: step.clone(),
                    built: m.built.clone(),
                    length: m.length.clone(),
                });
            }
        }
    }
}

impl Walker<'_> {
    /// The loop's iterable reads the loader as a whole word (`enumerate(train_loader)`,
    /// `tqdm(dl)`), or a name bound to it (`self.loader = loader`).
    fn iterates_over(&self, iterates: &str, loader: &str) -> bool {
        words(iterates).any(|w| {
            w == loader
                || self
                    .assigned_text
                    .get(w)
                    .is_some_and(|t| t.trim() == loader)
                || self
                    .assigned_text
                    .get(loader)
                    .is_some_and(|t| t.trim() == w)
        })
    }
}

/// `X` of the first `len(X)` in `text`, when it is a plain name or attribute.
fn len_argument(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    memchr::memmem::find_iter(bytes, b"len(").find_map(|at| {
        let before = at.checked_sub(1).and_then(|i| bytes.get(i));
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.') {
            return None;
        }
        let rest = text.get(at + 4..)?;
        let end = rest.find(')')?;
        let arg = rest.get(..end)?.trim();
        (!arg.is_empty()
            && arg
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.'))
        .then_some(arg)
    })
}

/// The names and attributes in `text` (`train_loader`, `args.epochs`).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .filter(|w| !w.is_empty())
}
