//! Helpers of the file, inlined at their call sites: a `self.backward(loss)`, a
//! `self.optimizer_step()` or a `train_step(batch)` defined in the same file runs its training
//! calls inside the loops and branches of the call, so the loop model sees them there.

use super::provenance::{given_for, Args};
use super::{Invoke, Walker};
use crate::facts::Prov;
use crate::frontend::loops::{CallEvent, CallKind, Ctx};
use std::collections::{HashMap, HashSet};

/// How many helpers deep calls are followed.
const MAX_INLINE_DEPTH: usize = 4;

/// One thing a function does, in source order: a training call, or a call of a helper.
enum Item<'a> {
    Event(&'a CallEvent),
    Invoke(&'a Invoke),
}

impl<'s> Walker<'s> {
    /// Every training call of the file with its provenance resolved, plus the calls of helpers
    /// at each call site that reaches them.
    pub(super) fn inlined_calls(&self) -> Vec<CallEvent> {
        // A call site whose helper is found runs the helper's calls, not a framework's backward
        // (`self.backward(loss)` is the class's own method).
        let mut found: HashMap<usize, Vec<&Invoke>> = HashMap::new();
        for i in &self.invokes {
            if self.function(&i.callee).is_some() {
                found.entry(i.ctx.scope).or_default().push(i);
            }
        }
        // Only helpers that reach a training call, directly or through their own helpers, are
        // worth inlining: the rest would only repeat work.
        let mut reaches: HashSet<usize> = self.calls.iter().map(|e| e.ctx.scope).collect();
        loop {
            let before = reaches.len();
            for (scope, invokes) in &found {
                if invokes
                    .iter()
                    .filter_map(|i| self.function(&i.callee))
                    .any(|t| reaches.contains(&t))
                {
                    reaches.insert(*scope);
                }
            }
            if reaches.len() == before {
                break;
            }
        }
        for invokes in found.values_mut() {
            invokes.retain(|i| {
                self.function(&i.callee)
                    .is_some_and(|t| reaches.contains(&t))
            });
        }
        // A site runs its helper's calls instead of its own only when the helper is inlined
        // (`warm.step()` of a local scheduler class that reaches no training call is the
        // scheduler's step).
        let sites: HashSet<(usize, usize)> = found
            .values()
            .flatten()
            .map(|i| (i.call.start, i.call.end))
            .collect();
        let mut items: HashMap<usize, Vec<(usize, Item)>> = HashMap::new();
        for e in &self.calls {
            if !sites.contains(&(e.call.span.start, e.call.span.end)) {
                items
                    .entry(e.ctx.scope)
                    .or_default()
                    .push((e.call.span.start, Item::Event(e)));
            }
        }
        for (scope, invokes) in &found {
            let list = items.entry(*scope).or_default();
            list.extend(invokes.iter().map(|i| (i.call.start, Item::Invoke(i))));
        }
        for list in items.values_mut() {
            list.sort_by_key(|(at, _)| *at);
        }
        let mut scopes: Vec<usize> = items.keys().copied().collect();
        scopes.sort();
        let mut out = Vec::new();
        for scope in scopes {
            self.expand(scope, None, None, 0, &mut Vec::new(), &items, &mut out);
        }
        out.sort_by_key(|e| e.order);
        out
    }

    /// The calls of `scope`, seen from `site` (the call of it being inlined), with `env` the
    /// arguments it was given.
    #[allow(clippy::too_many_arguments)]
    fn expand(
        &self,
        scope: usize,
        env: Option<(&[String], &Args)>,
        site: Option<&Site>,
        depth: usize,
        visiting: &mut Vec<usize>,
        items: &HashMap<usize, Vec<(usize, Item)>>,
        out: &mut Vec<CallEvent>,
    ) {
        let Some(list) = items.get(&scope) else {
            return;
        };
        visiting.push(scope);
        for (sub, (_, item)) in list.iter().enumerate() {
            let order = site.map(|s| (s.order.0, s.order.1 * 1024 + sub));
            match *item {
                Item::Event(e) => {
                    let mut ev = e.clone();
                    if let CallKind::Backward {
                        loss,
                        loss_text,
                        prov,
                        in_helper,
                        ..
                    } = &mut ev.kind
                    {
                        // A loss the loop's own call handed in is judged, and fixed, there.
                        let handed_loss = match (&*prov, site) {
                            (Prov::Param(name), Some(s)) if std::ptr::eq(s.call, s.outer) => {
                                env.and_then(|(params, _)| handed(s.call, params, name))
                            }
                            _ => None,
                        };
                        *prov = self.resolve(prov, env, 0);
                        // Divided by a parameter the loop's own call hands the factor to
                        // (`nll / n_micro` with `step(model, batch, args.accum)`): divided by
                        // the argument as the loop writes it.
                        if let (Some(s), Some((params, _))) = (site, env) {
                            if std::ptr::eq(s.call, s.outer) {
                                rename_divisors(prov, &|d| handed(s.call, params, d).map(|h| h.1));
                            }
                        }
                        match handed_loss {
                            Some((span, text)) => {
                                *loss = span;
                                *loss_text = text;
                            }
                            None => *in_helper = site.is_some(),
                        }
                    }
                    if let (Some(s), CallKind::Unscale { key }) = (site, &mut ev.kind) {
                        // `scaler.unscale_(optimizer)` in `clip(model, adam, scaler)` unscales
                        // `adam`: told apart from other optimizers by what the caller passed.
                        *key = rename_names(key, &s.names);
                    }
                    if let (Some(s), Some(order)) = (site, order) {
                        ev.ctx = e.ctx.inside(&s.ctx);
                        ev.order = order;
                        ev.inlined = true;
                        ev.depth = depth;
                        ev.site_loops = s.ctx.loops.len();
                        // The calls stay where the helper has them: nothing may be moved there
                        // on behalf of one caller.
                        ev.call.statement = None;
                        if matches!(ev.kind, CallKind::Backward { .. }) {
                            ev.call.span = s.outer.call.clone();
                        }
                    }
                    out.push(ev);
                }
                Item::Invoke(inv) => {
                    let Some(target) = self.function(&inv.callee) else {
                        continue;
                    };
                    if depth >= MAX_INLINE_DEPTH || visiting.contains(&target) {
                        continue;
                    }
                    let args: Args = inv
                        .args
                        .iter()
                        .map(|(k, p, ..)| (k.clone(), self.resolve(p, env, 0)))
                        .collect();
                    let params = &self.scopes[target].params;
                    let names = params
                        .iter()
                        .filter_map(|p| {
                            let (_, text) = handed(inv, params, p)?;
                            let text: String = text.split_whitespace().collect();
                            let text = site.map_or(text.clone(), |s| rename_names(&text, &s.names));
                            Some((p.clone(), text))
                        })
                        .collect();
                    let inner = Site {
                        ctx: match site {
                            Some(s) => inv.ctx.inside(&s.ctx),
                            None => inv.ctx.clone(),
                        },
                        order: order.unwrap_or((inv.call.start, 0)),
                        call: inv,
                        outer: site.map_or(inv, |s| s.outer),
                        names,
                    };
                    self.expand(
                        target,
                        Some((params, &args)),
                        Some(&inner),
                        depth + 1,
                        visiting,
                        items,
                        out,
                    );
                }
            }
        }
        visiting.pop();
    }
}

/// Where a helper is being inlined.
struct Site<'a> {
    ctx: Ctx,
    order: (usize, usize),
    /// The call of the helper.
    call: &'a Invoke,
    /// The call in the code being analysed that led here.
    outer: &'a Invoke,
    /// The helper's parameters and the arguments they were given, as the code being analysed
    /// names them (without spaces).
    names: Vec<(String, String)>,
}

/// `text` with each name that `names` binds replaced by what it is bound to; attributes
/// (`.optimizer`) keep their names.
fn rename_names(text: &str, names: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_alphabetic() || c == '_') {
        let (before, word) = rest.split_at(start);
        out.push_str(before);
        let end = word
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(word.len());
        let name = &word[..end];
        let attribute = out.ends_with('.');
        match names.iter().find(|(p, _)| p == name) {
            Some((_, given)) if !attribute => out.push_str(given),
            _ => out.push_str(name),
        }
        rest = &word[end..];
    }
    out.push_str(rest);
    out
}

/// `prov` with each divisor `rename` knows replaced by what it returns.
fn rename_divisors(prov: &mut Prov, rename: &impl Fn(&str) -> Option<String>) {
    match prov {
        Prov::DividedBy(d) => {
            if let Some(to) = rename(d.trim()) {
                *d = to;
            }
        }
        Prov::Summed(inner) | Prov::Averaged(inner) => rename_divisors(inner, rename),
        Prov::Combined(parts) | Prov::Tuple(parts) => {
            parts.iter_mut().for_each(|p| rename_divisors(p, rename))
        }
        _ => {}
    }
}

/// The argument `call` gave for parameter `name`: its span and text.
fn handed(
    call: &Invoke,
    params: &[String],
    name: &str,
) -> Option<(std::ops::Range<usize>, String)> {
    given_for(params, &call.args, |(k, ..)| k.as_deref(), name)
        .map(|(_, _, span, text)| (span.clone(), text.clone()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_renamed_but_attributes_keep_theirs() {
        let names = vec![
            ("optimizer".to_string(), "adam".to_string()),
            ("scaler".to_string(), "self.scaler".to_string()),
        ];
        assert_eq!(
            super::rename_names("scaler.unscale_(optimizer)", &names),
            "self.scaler.unscale_(adam)"
        );
        assert_eq!(
            super::rename_names("amp.unscale_(self.optimizer)", &names),
            "amp.unscale_(self.optimizer)"
        );
    }
}
