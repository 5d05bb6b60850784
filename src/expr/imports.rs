//! Arithmetic across the files of a project. A module's top-level function whose return is
//! arithmetic over its parameters (`def gb_from_bytes(b): return b / 1024**3`) is an
//! [`Export`]; a file that imports it values each call as it values a helper of its own
//! ([`Program::import`]): the function's return, with the call's arguments bound.
//!
//! What a file imports is known only once the project around it is joined, after its walk; a
//! program that calls names imported from other modules is [`Kept`] until then, its names copied
//! out of the text it borrowed, and resumed over the same text to be valued.

use super::program::{
    Bound, EntryOf, Id, KeyOf, Node, NodeOf, Path, Program, ScopeDef, ScopeDefOf,
};
use super::Role;
use std::ops::Range;

/// The module `from module import sub` names when `sub` is a module: `pkg.sub`, and `.sub`
/// for `from . import sub` (a sibling, not a module one package up).
pub fn submodule(module: &str, sub: &str) -> String {
    if module.ends_with('.') {
        format!("{module}{sub}")
    } else {
        format!("{module}.{sub}")
    }
}

/// What an exported function returns, over its parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    Num(f64),
    /// The function's parameter at this position.
    Param(usize),
    /// A name as written, while the function is read: a parameter, a name it binds once or a
    /// constant of the module, which only the whole function says.
    Name(String),
    Neg(Box<Shape>),
    /// `a op b` for `+ - * / // ** % << >>`.
    Bin(&'static str, Box<Shape>, Box<Shape>),
    /// A call of another top-level function of the same module, by name, with positional
    /// arguments: inlined once the module is read (see [`Shape::inline`]).
    Call(String, Vec<Shape>),
    /// `{"weights": ..., "grads": ...}`: a bundle of components.
    Dict(Vec<(String, Shape)>),
}

/// How many calls deep an export inlines the module's other functions.
const MAX_INLINE: u8 = 3;

impl Shape {
    /// The operator as a static string, when it is one arithmetic reads.
    pub fn operator(op: &str) -> Option<&'static str> {
        Some(match op {
            "+" => "+",
            "-" => "-",
            "*" => "*",
            "/" => "/",
            "//" => "//",
            "**" => "**",
            "%" => "%",
            "<<" => "<<",
            ">>" => ">>",
            _ => return None,
        })
    }

    /// The number a shape of constants comes to, folded as valuing folds it (`1 << 30`,
    /// `1024**3`): a call of the export has no literal of its own for it.
    pub fn folded(&self) -> Option<f64> {
        match self {
            Shape::Num(v) => Some(*v),
            Shape::Neg(a) => Some(-a.folded()?),
            Shape::Bin(op, a, b) => {
                let (a, b) = (a.folded()?, b.folded()?);
                match *op {
                    "+" => Some(a + b),
                    "-" => Some(a - b),
                    "*" => Some(a * b),
                    "/" | "//" if b != 0.0 => Some(a / b),
                    "**" => Some(a.powf(b)),
                    "<<" if (0.0..64.0).contains(&b) => Some(a * 2f64.powf(b.trunc())),
                    ">>" if (0.0..64.0).contains(&b) => Some((a / 2f64.powf(b.trunc())).trunc()),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The shape with its parameters replaced by `args` (a parameter not given takes its
    /// default), and the module's calls inlined with `exports`; `None` when a call names no
    /// export, or nests too deep.
    fn bound(
        &self,
        args: &[Shape],
        defaults: &[Option<f64>],
        exports: &[Export],
        depth: u8,
    ) -> Option<Shape> {
        let bind = |s: &Shape| s.bound(args, defaults, exports, depth);
        Some(match self {
            Shape::Num(v) => Shape::Num(*v),
            Shape::Param(i) => match args.get(*i) {
                Some(a) => a.clone(),
                None => Shape::Num((*defaults.get(*i)?)?),
            },
            Shape::Neg(a) => Shape::Neg(Box::new(bind(a)?)),
            Shape::Bin(op, a, b) => Shape::Bin(op, Box::new(bind(a)?), Box::new(bind(b)?)),
            Shape::Dict(entries) => Shape::Dict(
                entries
                    .iter()
                    .map(|(k, v)| Some((k.clone(), bind(v)?)))
                    .collect::<Option<_>>()?,
            ),
            Shape::Name(_) => return None,
            Shape::Call(name, given) => {
                if depth >= MAX_INLINE {
                    return None;
                }
                let given: Vec<Shape> = given.iter().map(bind).collect::<Option<_>>()?;
                let callee = exports.iter().find(|e| &e.name == name)?;
                if given.len() > callee.params.len() {
                    return None;
                }
                let defaults: Vec<Option<f64>> = callee.params.iter().map(|(_, d)| *d).collect();
                callee
                    .returns
                    .bound(&given, &defaults, exports, depth + 1)?
            }
        })
    }

    /// The shape with the calls of the module's other functions inlined (`def gb_from_params(n):
    /// return gb_from_bytes(2 * n)`); `None` when one names no export of the module.
    pub fn inline(&self, params: usize, exports: &[Export]) -> Option<Shape> {
        let args: Vec<Shape> = (0..params).map(Shape::Param).collect();
        self.bound(&args, &[], exports, 0)
    }
}

/// The exports the imported calls of a file name, by module as written and name.
pub type Found = Vec<((String, String), Export)>;

/// A top-level function of a module whose return is arithmetic over its parameters.
#[derive(Clone, Debug)]
pub struct Export {
    pub name: String,
    /// Its parameters, with their numeric defaults.
    pub params: Vec<(String, Option<f64>)>,
    pub returns: Shape,
}

impl<'s> Program<'s> {
    /// The call at `span` in the file calls `export`, imported from another module: it is valued
    /// as a helper of the file would be, its return read with the call's arguments bound. Every
    /// node of that helper is written at the call: a finding in it is reported there, and no
    /// number in it is a literal of this file a fix could rewrite.
    pub fn import(&mut self, span: Range<usize>, export: &'s Export) {
        let path = std::mem::take(&mut self.current);
        let params = export
            .params
            .iter()
            .map(|(n, d)| {
                let default = d.map(|v| self.add(Node::Fixed(v), span.clone(), 0));
                (n.as_str(), default)
            })
            .collect();
        let id = self.scopes.len();
        self.scopes.push(ScopeDef {
            name: export.name.as_str(),
            parent: Some(0),
            params,
            ..ScopeDef::default()
        });
        self.count_roles(id);
        let value = self.shaped(&export.returns, export, id, &span);
        if let Some(def) = self.scopes.get_mut(id) {
            def.returns.push(value);
        }
        self.imported.insert((span.start, span.end), id);
        self.current = path;
    }

    fn shaped(
        &mut self,
        shape: &'s Shape,
        export: &'s Export,
        scope: usize,
        span: &Range<usize>,
    ) -> Id {
        if let Some(v) = shape.folded() {
            return self.add(Node::Fixed(v), span.clone(), scope);
        }
        let node = match shape {
            Shape::Num(v) => Node::Fixed(*v),
            Shape::Param(i) => match export.params.get(*i) {
                Some((name, _)) => Node::Name(name.as_str()),
                None => Node::Opaque,
            },
            Shape::Neg(a) => Node::Neg(self.shaped(a, export, scope, span)),
            Shape::Bin(op, a, b) => {
                let a = self.shaped(a, export, scope, span);
                let b = self.shaped(b, export, scope, span);
                Node::Bin(*op, a, b)
            }
            Shape::Dict(entries) => Node::Dict(
                entries
                    .iter()
                    .map(|(k, v)| (k.as_str(), self.shaped(v, export, scope, span)))
                    .collect(),
            ),
            // Inlined and resolved when the module was read: one left is not arithmetic.
            Shape::Call(..) | Shape::Name(_) => Node::Opaque,
        };
        self.add(node, span.clone(), scope)
    }

    /// The entries written within an expression (not those of the values its names hold),
    /// the expression's own first.
    fn written_within(&self, id: Id) -> Vec<&EntryOf<&'s str>> {
        let mut out = Vec::new();
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            let Some(e) = self
                .entries
                .get(id as usize)
                .filter(|_| out.len() < self.entries.len())
            else {
                continue;
            };
            match &e.node {
                Node::Neg(a) | Node::Sum(a) | Node::Item(a, _) => stack.push(*a),
                Node::Bin(_, a, b) | Node::Choice(a, b) | Node::Set(a, _, b) => {
                    stack.extend([*a, *b])
                }
                Node::Extreme(items) | Node::Seq(items) => stack.extend(items),
                Node::Dict(pairs) => stack.extend(pairs.iter().map(|(_, v)| *v)),
                Node::Call { args, keywords, .. } => {
                    stack.extend(args);
                    stack.extend(keywords.iter().map(|(_, v)| *v));
                }
                _ => {}
            }
            out.push(e);
        }
        out
    }

    /// The calls written within an expression of names that are no function of the file
    /// (`gb(n)` imported from another module, `torch.zeros(...)`): each callee as written, its
    /// arguments and the call's span.
    pub fn outside_calls_within(&self, id: Id) -> Vec<(&'s str, Vec<Id>, Range<usize>)> {
        self.written_within(id)
            .into_iter()
            .filter_map(|e| match &e.node {
                Node::Call {
                    callee,
                    args,
                    keywords,
                } if self.resolve(callee, e.scope).is_none() => {
                    let given = args
                        .iter()
                        .copied()
                        .chain(keywords.iter().map(|(_, v)| *v))
                        .collect();
                    Some((*callee, given, e.span.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// The names read within an expression that nothing in the file binds (`need / GIB` after
    /// `from units import GIB`): each as written, and where it is read.
    pub fn unbound_names_within(&self, id: Id) -> Vec<(&'s str, Range<usize>)> {
        self.written_within(id)
            .into_iter()
            .filter_map(|e| match &e.node {
                Node::Name(name) if !self.binds(name, e.scope) => Some((*name, e.span.clone())),
                _ => None,
            })
            .collect()
    }

    /// Whether `scope` or a scope around it binds `name` (or takes it as a parameter).
    fn binds(&self, name: &str, scope: usize) -> bool {
        let mut cur = Some(scope);
        while let Some(s) = cur {
            if self.bindings.contains_key(&(s, name)) {
                return true;
            }
            let def = self.scopes.get(s);
            if def.is_some_and(|d| d.params.iter().any(|(n, _)| *n == name)) {
                return true;
            }
            cur = def.and_then(|d| d.parent);
        }
        false
    }

    /// `name`, read at `span`, is a number imported from another module of the project
    /// (`GIB = 1024**3` in `units.py`): bound at the top of the file, a number with no literal
    /// here for a fix to rewrite.
    pub fn bind_imported(&mut self, name: &'s str, value: f64, span: Range<usize>) {
        let id = self.add(Node::Fixed(value), span, 0);
        self.bind(0, name, 0, id);
    }

    /// The program, owning its names, to be [resumed](Program::resume) over the same text.
    pub fn keep(&self) -> Kept {
        let own = |s: &&str| Box::<str>::from(*s);
        Kept {
            entries: self.entries.iter().map(|e| e.map(&own)).collect(),
            scopes: self.scopes.iter().map(|d| d.map(&own)).collect(),
            bindings: self
                .bindings
                .iter()
                .map(|((scope, name), b)| ((*scope, own(name)), b.clone()))
                .collect(),
            paths: self.paths.clone(),
            roles: self
                .roles
                .iter()
                .map(|((scope, name), r)| ((*scope, own(name)), *r))
                .collect(),
            calls: self.calls.clone(),
        }
    }

    /// A kept program over `src`, the text it was built from.
    pub fn resume(kept: &'s Kept, src: &'s str) -> Program<'s> {
        let borrow = <Box<str> as AsRef<str>>::as_ref;
        let mut p = Program::new(src);
        for (i, def) in kept.scopes.iter().enumerate() {
            let def = def.map(&borrow);
            if i == 0 {
                p.scopes[0] = def;
            } else {
                p.add_scope(def);
            }
        }
        p.entries = kept.entries.iter().map(|e| e.map(&borrow)).collect();
        for ((scope, name), b) in &kept.bindings {
            p.bindings.insert((*scope, &**name), b.clone());
        }
        for ((scope, name), r) in &kept.roles {
            p.roles.insert((*scope, &**name), *r);
        }
        for (id, path) in kept.paths.iter().enumerate() {
            p.path_ids.insert(path.clone(), id as u32);
        }
        p.paths = kept.paths.clone();
        p.calls = kept.calls.clone();
        p
    }
}

/// What a kept program holds by scope and name.
type Named<T> = ((usize, Box<str>), T);

/// A program past its walk, owning its names (see [`Program::keep`]).
#[derive(Debug)]
pub struct Kept {
    entries: Vec<EntryOf<Box<str>>>,
    scopes: Vec<ScopeDefOf<Box<str>>>,
    bindings: Vec<Named<Vec<Bound>>>,
    paths: Vec<Path>,
    roles: Vec<Named<(Role, f64)>>,
    calls: Vec<Id>,
}

impl<S> KeyOf<S> {
    fn map<'a, T>(&'a self, f: &impl Fn(&'a S) -> T) -> KeyOf<T> {
        match self {
            KeyOf::Str(s) => KeyOf::Str(f(s)),
            KeyOf::Index(i) => KeyOf::Index(*i),
        }
    }
}

impl<S> NodeOf<S> {
    fn map<'a, T>(&'a self, f: &impl Fn(&'a S) -> T) -> NodeOf<T> {
        match self {
            NodeOf::Num(v) => NodeOf::Num(*v),
            NodeOf::Fixed(v) => NodeOf::Fixed(*v),
            NodeOf::Name(n) => NodeOf::Name(f(n)),
            NodeOf::Neg(a) => NodeOf::Neg(*a),
            NodeOf::Bin(op, a, b) => NodeOf::Bin(f(op), *a, *b),
            NodeOf::Call {
                callee,
                args,
                keywords,
            } => NodeOf::Call {
                callee: f(callee),
                args: args.clone(),
                keywords: keywords.iter().map(|(k, v)| (f(k), *v)).collect(),
            },
            NodeOf::Extreme(a) => NodeOf::Extreme(a.clone()),
            NodeOf::Item(base, key) => NodeOf::Item(*base, key.map(f)),
            NodeOf::ItemAt(base, key) => NodeOf::ItemAt(*base, *key),
            NodeOf::Str(text) => NodeOf::Str(f(text)),
            NodeOf::Dict(pairs) => NodeOf::Dict(pairs.iter().map(|(k, v)| (f(k), *v)).collect()),
            NodeOf::Seq(items) => NodeOf::Seq(items.clone()),
            NodeOf::Choice(a, b) => NodeOf::Choice(*a, *b),
            NodeOf::Set(base, key, v) => NodeOf::Set(*base, f(key), *v),
            NodeOf::Sum(a) => NodeOf::Sum(*a),
            NodeOf::Source(s) => NodeOf::Source(*s),
            NodeOf::Opaque => NodeOf::Opaque,
        }
    }
}

impl<S> EntryOf<S> {
    fn map<'a, T>(&'a self, f: &impl Fn(&'a S) -> T) -> EntryOf<T> {
        EntryOf {
            node: self.node.map(f),
            span: self.span.clone(),
            scope: self.scope,
            path: self.path,
        }
    }
}

impl<S> ScopeDefOf<S> {
    fn map<'a, T>(&'a self, f: &impl Fn(&'a S) -> T) -> ScopeDefOf<T> {
        ScopeDefOf {
            name: f(&self.name),
            parent: self.parent,
            class: self.class,
            is_class: self.is_class,
            params: self.params.iter().map(|(n, d)| (f(n), *d)).collect(),
            returns: self.returns.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(op: &'static str, a: Shape, b: Shape) -> Shape {
        Shape::Bin(op, Box::new(a), Box::new(b))
    }

    /// `def gib(b): return b / 1024**3`.
    fn gib() -> Export {
        Export {
            name: "gib".into(),
            params: vec![("b".into(), None)],
            returns: bin(
                "/",
                Shape::Param(0),
                bin("**", Shape::Num(1024.0), Shape::Num(3.0)),
            ),
        }
    }

    /// `w = gib(n_params * 2)`, `gib` imported: what the call is worth, valued as a helper
    /// of the file would be; every term of it written at the call.
    fn call_of_gib<'s>(p: &mut Program<'s>) -> Id {
        let n = p.add(Node::Name("n_params"), 8..16, 0);
        let two = p.add(Node::Num(2.0), 19..20, 0);
        let arg = p.add(Node::Bin("*", n, two), 8..20, 0);
        p.add(
            Node::Call {
                callee: "gib",
                args: vec![arg],
                keywords: vec![],
            },
            4..21,
            0,
        )
    }

    #[test]
    fn an_imported_helper_is_valued_at_its_call() {
        let export = gib();
        let src = "w = gib(n_params * 2)";
        let mut p = Program::new(src);
        let call = call_of_gib(&mut p);
        // Unknown until the project says what `gib` returns.
        assert!(p.valuer().lin(call, None).terms.iter().all(|t| t.opaque));
        p.import(4..21, &export);
        let v = p.valuer().lin(call, None);
        let [t] = v.terms.as_slice() else {
            panic!("one term: {v:?}")
        };
        assert_eq!(t.symbol, "n_params");
        assert_eq!(t.role, Role::ParamCount);
        assert!((t.coef - 2.0 / 1_073_741_824.0).abs() < 1e-18);
        assert_eq!(t.span, 4..21);
        assert_eq!(t.literal, None);
        let c = t.conversion.as_ref().expect("converted");
        // The divisor was written in the other module: nothing here to rewrite.
        assert!(c.operand.is_none());
    }

    #[test]
    fn a_kept_program_values_as_before() {
        let export = gib();
        let src = "w = gib(n_params * 2)";
        let mut p = Program::new(src);
        let call = call_of_gib(&mut p);
        let kept = p.keep();
        let mut q = Program::resume(&kept, src);
        assert_eq!(p.valuer().lin(call, None), q.valuer().lin(call, None));
        p.import(4..21, &export);
        q.import(4..21, &export);
        assert_eq!(p.valuer().lin(call, None), q.valuer().lin(call, None));
    }

    #[test]
    fn exports_inline_the_module_calls_and_fold_constants() {
        // `def bytes_of(n, width=2): return n * width` and `def gib_of(n, width=2): return
        // bytes_of(n, width) / 2**30`.
        let bytes_of = Export {
            name: "bytes_of".into(),
            params: vec![("n".into(), None), ("width".into(), Some(2.0))],
            returns: bin("*", Shape::Param(0), Shape::Param(1)),
        };
        let call = Shape::Call("bytes_of".into(), vec![Shape::Param(0), Shape::Param(1)]);
        let gib_of = bin("/", call, bin("**", Shape::Num(2.0), Shape::Num(30.0)));
        let exports = [bytes_of.clone()];
        let inlined = gib_of.inline(2, &exports).expect("inlined");
        assert_eq!(
            inlined,
            bin(
                "/",
                bin("*", Shape::Param(0), Shape::Param(1)),
                bin("**", Shape::Num(2.0), Shape::Num(30.0))
            )
        );
        assert_eq!(
            bin("<<", Shape::Num(1.0), Shape::Num(30.0)).folded(),
            Some(1_073_741_824.0)
        );
        // A default fills a parameter the call leaves out; a name the module does not export
        // leaves the whole shape unknown.
        let one = Shape::Call("bytes_of".into(), vec![Shape::Param(0)]);
        assert_eq!(
            one.inline(1, &exports),
            Some(bin("*", Shape::Param(0), Shape::Num(2.0)))
        );
        assert_eq!(
            Shape::Call("other".into(), vec![]).inline(0, &exports),
            None
        );
    }
}
