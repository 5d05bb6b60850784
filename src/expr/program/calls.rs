//! Values across functions and classes: a helper's return valued at each call site with its
//! arguments bound, the call sites a helper's own formulas are valued for, and what the
//! constructions of a class hand to the attributes its `__init__` binds and to its fields.

use super::*;

impl Valuer<'_, '_> {
    /// The value bound to an attribute (`self.n = n`). One left open where it is bound, by a
    /// method's parameter, takes what every call of the method (for `__init__`, every
    /// construction of the class) hands over, when they agree.
    pub(super) fn attribute(&self, value: Id) -> Value {
        let as_bound = self.value(value, None);
        let fallback = as_bound.clone();
        self.remembered(Bind::Attribute(value), Some(as_bound.clone()), || {
            Some(self.attribute_called(value, as_bound))
        })
        .unwrap_or(fallback)
    }

    /// Valued once per binding and alternative: what `work` gives, or `meanwhile` when it is
    /// asked for again while it is being worked out.
    fn remembered(
        &self,
        key: Bind,
        meanwhile: Option<Value>,
        work: impl FnOnce() -> Option<Value>,
    ) -> Option<Value> {
        let key = (key, self.pick.get());
        if let Some((v, wide)) = self.bound.borrow().get(&key) {
            self.widest.set(self.widest.get().max(*wide));
            return v.clone();
        }
        self.bound.borrow_mut().insert(key.clone(), (meanwhile, 1));
        let outer = self.widest.replace(1);
        let v = work();
        let wide = self.widest.get();
        self.widest.set(outer.max(wide));
        self.bound.borrow_mut().insert(key, (v.clone(), wide));
        v
    }

    #[inline(never)]
    fn attribute_called(&self, value: Id, as_bound: Value) -> Value {
        // A term with no known value (a parameter, even one named for what it holds) takes
        // what the calls hand over.
        let open = match &as_bound {
            Value::Scalar(l) | Value::Text(_, l) => l
                .terms
                .iter()
                .any(|t| t.opaque || t.role == Role::Unknown || t.value.is_none()),
            _ => false,
        };
        let Some(method) = self.p.entries.get(value as usize).map(|e| e.scope) else {
            return as_bound;
        };
        if !open || !self.p.is_function(method) {
            return as_bound;
        }
        let called = self
            .frames(method)
            .into_iter()
            .map(|f| Some(self.value(value, Some(&f))));
        match agreed(called) {
            Some(Some(v)) => v,
            _ => as_bound,
        }
    }

    /// A field of a class body (`bytes_per_weight: int = 2` in a dataclass) read as
    /// `self.bytes_per_weight`: what every construction of the class hands over by keyword (or,
    /// where it hands nothing, the default the body gives it), when they agree.
    pub(super) fn field(&self, class: usize, field: &str) -> Option<Value> {
        self.remembered(Bind::Field(class, field.to_string()), None, || {
            self.field_handed(class, field)
        })
    }

    #[inline(never)]
    fn field_handed(&self, class: usize, field: &str) -> Option<Value> {
        let p = self.p;
        let default = || {
            let list = p.bindings.get(&(class, field))?;
            list.last().map(|b| self.value(b.value, None))
        };
        let handed = p
            .calls
            .iter()
            .filter_map(|&c| match p.entries.get(c as usize)? {
                Entry {
                    node:
                        Node::Call {
                            callee, keywords, ..
                        },
                    scope,
                    ..
                } if p.nearest(p.classes.get(callee)?, *scope) == Some(class) => {
                    Some(match keywords.iter().find(|(k, _)| *k == field) {
                        Some((_, v)) => Some(self.value(*v, None)),
                        None => default(),
                    })
                }
                _ => None,
            });
        agreed(handed).unwrap_or_else(default)
    }

    pub(super) fn call(
        &self,
        callee: &str,
        args: &[Id],
        keywords: &[(&str, Id)],
        e: &Entry,
        frame: Option<&Frame>,
    ) -> Value {
        let span = e.span.clone();
        let text = self.p.text(&span);
        let depth = frame.map_or(0, |f| f.depth);
        let Some(function) = self
            .p
            .resolve(callee, e.scope)
            .or_else(|| self.p.imported.get(&(span.start, span.end)).copied())
            .filter(|_| depth < MAX_CALL_DEPTH)
        else {
            return Value::Scalar(opaque(text, span));
        };
        let inner = self.frame(function, args, keywords, frame, depth + 1, span.clone());
        self.returns_through(function, callee, &inner, text, span)
    }

    /// What a property returns where it is read (`self.w_gb`): its method, called with no
    /// arguments.
    pub(super) fn returned(
        &self,
        function: usize,
        name: &str,
        span: Range<usize>,
        frame: Option<&Frame>,
    ) -> Value {
        let text = self.p.text(&span);
        let depth = frame.map_or(0, |f| f.depth);
        if depth >= MAX_CALL_DEPTH {
            return Value::Scalar(opaque(text, span));
        }
        let inner = self.frame(function, &[], &[], frame, depth + 1, span.clone());
        self.returns_through(function, name, &inner, text, span)
    }

    /// The one value `function`'s returns agree on in `inner`, labelled by `callee`'s name.
    fn returns_through(
        &self,
        function: usize,
        callee: &str,
        inner: &Frame,
        text: &str,
        span: Range<usize>,
    ) -> Value {
        let returns = &self.p.scopes[function].returns;
        // A helper that returns different things on different paths has no one value here;
        // each of its returns is judged where it is written.
        let values = returns.iter().map(|r| Some(self.value(*r, Some(inner))));
        let Some(Some(first)) = agreed(values) else {
            return Value::Scalar(opaque(text, span));
        };
        // A helper named for a component (`self.optimizer()`, `grads_gb(n)`) labels what it
        // returns, as a name bound to the value would.
        // A count handed back as it is (`model_to_params(model)`) is no component's bytes.
        match first {
            Value::Scalar(l) if !l.counts_only() => Value::Scalar(l.through(part_of(callee))),
            other => other,
        }
    }

    /// The arguments of one call of `function`, valued where the call is.
    pub(super) fn frame(
        &self,
        function: usize,
        args: &[Id],
        keywords: &[(&str, Id)],
        caller: Option<&Frame>,
        depth: u8,
        call: Range<usize>,
    ) -> Frame {
        let params = &self.p.scopes[function].params;
        let mut bound: Vec<(String, Value)> = Vec::new();
        for (i, a) in args.iter().enumerate() {
            if let Some((name, _)) = params.get(i) {
                bound.push((name.to_string(), self.value(*a, caller)));
            }
        }
        for (k, a) in keywords {
            if params.iter().any(|(n, _)| n == k) {
                bound.push((k.to_string(), self.value(*a, caller)));
            }
        }
        Frame {
            function,
            args: bound,
            depth,
            call,
        }
    }

    /// The values `id`, written in `scope`, takes: on each path as written and, when a term is
    /// left open (unknown or opaque) in a function and `per_call`, on each path at each call
    /// site of the function (with that call's frame).
    pub fn valuations(&self, id: Id, scope: usize, per_call: bool) -> Vec<(Lin, Option<Frame>)> {
        let written = self.paths(id, None);
        let open = written
            .iter()
            .flat_map(|l| &l.terms)
            .any(|t| t.opaque || t.role == Role::Unknown);
        let mut valued: Vec<(Lin, Option<Frame>)> =
            written.into_iter().map(|l| (l, None)).collect();
        if open && per_call && self.p.is_function(scope) {
            for frame in self.frames(scope) {
                for lin in self.paths(id, Some(&frame)) {
                    if !valued.iter().any(|(l, _)| l == &lin) {
                        valued.push((lin, Some(frame.clone())));
                    }
                }
            }
        }
        valued
    }

    /// Each call site of a helper, its arguments valued: the helper's own formulas are valued
    /// once for each (and once as written). Call sites inside other helpers are valued for
    /// each of their callers' frames in turn.
    pub fn frames(&self, function: usize) -> Vec<Frame> {
        self.frames_at(function, 1)
    }

    pub(super) fn frames_at(&self, function: usize, depth: u8) -> Vec<Frame> {
        if depth > MAX_CALL_DEPTH || !self.p.is_function(function) {
            return Vec::new();
        }
        // Kept by depth too: frames first worked out for a caller's, deeper, leave fewer calls
        // to value under them than the helper's own formulas have.
        if let Some(known) = self.frames.borrow().get(&(function, depth)) {
            return known.clone();
        }
        // Recursion finds no frame while its own are worked out.
        self.frames
            .borrow_mut()
            .insert((function, depth), Vec::new());
        let mut out: Vec<Frame> = Vec::new();
        let calls = self.calls_to(function);
        for &c in calls {
            let Some(Entry {
                node: Node::Call { args, keywords, .. },
                scope,
                span,
                ..
            }) = self.p.entries.get(c as usize)
            else {
                continue;
            };
            let mut callers: Vec<Option<Frame>> = vec![None];
            if *scope != function {
                callers.extend(self.frames_at(*scope, depth + 1).into_iter().map(Some));
            }
            for caller in callers {
                if out.len() >= MAX_FRAMES {
                    break;
                }
                out.push(self.frame(
                    function,
                    args,
                    keywords,
                    caller.as_ref(),
                    depth,
                    span.clone(),
                ));
            }
        }
        self.frames
            .borrow_mut()
            .insert((function, depth), out.clone());
        out
    }

    /// The calls that run `function` (or construct its class), in the program's order.
    fn calls_to(&self, function: usize) -> &[Id] {
        let index = self.call_index.get_or_init(|| {
            let mut index: super::HashMap<usize, Vec<Id>> = Default::default();
            for &c in &self.p.calls {
                let Some(Entry {
                    node: Node::Call { callee, .. },
                    scope,
                    ..
                }) = self.p.entries.get(c as usize)
                else {
                    continue;
                };
                let runs = self.p.resolve(callee, *scope);
                if let Some(f) = runs.or_else(|| self.p.constructed(callee, *scope)) {
                    index.entry(f).or_default().push(c);
                }
            }
            index
        });
        index.get(&function).map_or(&[], Vec::as_slice)
    }
}

/// The one value several valuations give: `None` when there is none, `Some(None)` when they
/// differ (or, among several, one is no number). A lone value is taken as it is.
fn agreed(mut values: impl Iterator<Item = Option<Value>>) -> Option<Option<Value>> {
    let first = values.next()?;
    let same_as_first = |v: &Option<Value>| matches!((v, &first), (Some(Value::Scalar(a)), Some(Value::Scalar(b))) if same(a, b));
    Some(values.all(|v| same_as_first(&v)).then_some(first).flatten())
}
