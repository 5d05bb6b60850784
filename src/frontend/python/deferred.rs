//! A file whose memory arithmetic calls helpers imported from other modules (`from
//! utils.precision import gb_from_bytes`, `import units as U; U.gib(n)`) is valued once the
//! project says what they return: its walk keeps what valuing needs ([`Deferred`]), and
//! [`finish_values`] values it with the helpers found ([`crate::expr::imports`]). A helper that
//! is not found stays a call of unknown value, as it would be without the project.

use super::valuing::value_pending;
use super::*;
use crate::expr::imports::{submodule, Export, Kept};
use crate::expr::sizes_memory;

/// What valuing a file's memory arithmetic needs once its walk is over.
pub struct Deferred {
    kept: Kept,
    pending: Vec<Pending>,
    /// Each condition's scope and text, for what the functions with formulas test.
    cond_spans: Vec<(usize, Range<usize>)>,
    /// The calls of imported names: the call, the module as written and the name in it.
    calls: Vec<Imported>,
    /// The imported names read as numbers: where one is read, the module and the name.
    names: Vec<Imported>,
}

/// Where an imported name is used, the module as written and the name in it.
type Imported = (Range<usize>, String, String);

impl Deferred {
    /// The imported names the file's arithmetic calls, by module as written and name.
    pub fn imports(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .calls
            .iter()
            .chain(&self.names)
            .map(|(_, m, n)| (m.clone(), n.clone()))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

impl Walker<'_> {
    /// Value the file's memory arithmetic now, or, when the walk was asked to and it calls
    /// names imported from other modules in calculations about memory, keep it for
    /// [`finish_values`].
    pub(super) fn value_or_defer(&mut self) -> Option<Deferred> {
        let (calls, names) = if self.defer {
            self.imported_in_memory()
        } else {
            Default::default()
        };
        if calls.is_empty() && names.is_empty() {
            self.value_formulas();
            return None;
        }
        Some(Deferred {
            kept: self.program.keep(),
            pending: std::mem::take(&mut self.pending),
            cond_spans: self.cond_spans.clone(),
            calls,
            names,
        })
    }

    /// The calls of imported names in the file's calculations that show something of memory:
    /// by what a value is derived from or called (a parameter count, `model_gb`), in the
    /// calculation, the call's arguments or the callee's own name. The helper's module is read
    /// for those alone: a call in a calculation that shows nothing of memory (`logger =
    /// get_logger(__name__)`) leaves nothing for a memory rule whatever it returns.
    /// The imported names read as numbers in those calculations (`need / GIB` after `from units
    /// import GIB`), one read of each, come second.
    fn imported_in_memory(&self) -> (Vec<Imported>, Vec<Imported>) {
        let mut out: Vec<Imported> = Vec::new();
        let mut names: Vec<Imported> = Vec::new();
        if self.pending.is_empty() {
            return (out, names);
        }
        let valuer = self.program.valuer();
        let shows = |lin: &Lin| {
            lin.terms.iter().any(|t| t.role != Role::Unknown)
                || lin.roles_seen.iter().any(|r| *r != Role::Unknown)
        };
        let named = |name: &str| role_of(name) != Role::Unknown || sizes_memory(name);
        for p in &self.pending {
            let (name, ids) = match &p.kind {
                PendingKind::Assign { target }
                | PendingKind::Checkpointed { target, .. }
                | PendingKind::Constant { name: target } => (Some(target.as_str()), vec![p.value]),
                PendingKind::Return { function } => (Some(function.as_str()), vec![p.value]),
                PendingKind::Compare { other, .. } => (None, vec![p.value, *other]),
                PendingKind::Printed { figures } => (None, figures.iter().map(|f| f.0).collect()),
                PendingKind::Expr => (None, vec![p.value]),
            };
            for id in ids {
                let calls = self.program.outside_calls_within(id);
                let read = self.program.unbound_names_within(id);
                if calls.is_empty() && read.is_empty() {
                    continue;
                }
                let calculation = name.is_some_and(named) || shows(&valuer.lin(id, None));
                for (local, span) in read {
                    if names.iter().any(|(s, ..)| self.text_at(s) == local) {
                        continue;
                    }
                    let Some((module, constant)) = self.imported_name(local) else {
                        continue;
                    };
                    if calculation || named(last_segment(local)) {
                        names.push((span, module, constant));
                    }
                }
                for (callee, args, span) in calls {
                    if out.iter().any(|(s, ..)| *s == span) {
                        continue;
                    }
                    let Some((module, function)) = self.imported_name(callee) else {
                        continue;
                    };
                    let memory = calculation
                        || named(last_segment(callee))
                        || args.iter().any(|a| shows(&valuer.lin(*a, None)));
                    if memory {
                        out.push((span, module, function));
                    }
                }
            }
        }
        (out, names)
    }

    fn text_at(&self, span: &Range<usize>) -> &str {
        self.src.get(span.clone()).unwrap_or("")
    }

    /// The module (as written) and name a name imported from another module stands for: `f`
    /// after `from m import f`, `m.f` after `import m` or `from pkg import m`.
    fn imported_name(&self, callee: &str) -> Option<(String, String)> {
        if let Some((module, Some(name))) = self.imports.get(callee) {
            return Some((module.clone(), name.clone()));
        }
        let (alias, name) = callee.rsplit_once('.')?;
        let module = match self.imports.get(alias)? {
            (module, Some(sub)) => submodule(module, sub),
            (module, None) => module.clone(),
        };
        Some((module, name.to_string()))
    }
}

/// Value a file kept by its walk: `text` is the text it was read from, `found` what the helpers
/// it imports from the project return (those not in it stay unknown).
pub fn finish_values(
    text: &str,
    facts: &mut Facts,
    deferred: &Deferred,
    found: &[((String, String), Export)],
) {
    let mut program = Program::resume(&deferred.kept, text);
    for (span, module, name) in &deferred.names {
        let export = found.iter().find(|((m, n), _)| m == module && n == name);
        let value = export
            .filter(|(_, e)| e.params.is_empty())
            .and_then(|(_, e)| e.returns.folded());
        if let (Some(value), Some(local)) = (value, text.get(span.clone())) {
            program.bind_imported(local, value, span.clone());
        }
    }
    for (span, module, name) in &deferred.calls {
        if let Some((_, export)) = found.iter().find(|((m, n), _)| m == module && n == name) {
            program.import(span.clone(), export);
        }
    }
    value_pending(&deferred.pending, &program, facts);
    scope_tests(facts, &deferred.cond_spans, text);
}

/// What the conditions of each function with memory formulas test.
pub(super) fn scope_tests(facts: &mut Facts, cond_spans: &[(usize, Range<usize>)], src: &str) {
    let mut read = vec![false; facts.scopes.len()];
    for f in &facts.formulas {
        if let Some(r) = read.get_mut(f.scope) {
            *r = true;
        }
    }
    for (scope, span) in cond_spans {
        if read.get(*scope).copied().unwrap_or(false) {
            let topics = topics_in(src, span);
            if let Some(s) = facts.scopes.get_mut(*scope) {
                s.tests = s.tests.union(topics);
            }
        }
    }
}
