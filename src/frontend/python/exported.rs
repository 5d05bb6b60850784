//! What the module's top-level functions return, as arithmetic over their parameters
//! ([`Export`]): a file that imports one values its calls with it, as it values a helper of its
//! own. Read on the walk's way through each function (its parameters, the names its body binds
//! once, its returns), whatever else the file is parsed for: a module is read once, whoever
//! imports it.

use super::*;
use crate::expr::imports::{Export, Shape};

/// How deep an expression is read for its shape.
const MAX_SHAPE_DEPTH: usize = 32;

/// A function's parameters, with their numeric defaults.
type Params = Vec<(String, Option<f64>)>;

/// What the walk has seen of the module's top-level functions.
#[derive(Default)]
pub(super) struct ExportNotes {
    /// By function scope: its parameters and numeric defaults; `None` when one is not a plain
    /// name (`*args`, `**kw`).
    params: HashMap<usize, Option<Params>>,
    /// Names a function binds, by scope and name: how many times, and the shape of the one
    /// binding when it is the only one and no branch or loop holds it.
    locals: HashMap<(usize, String), (u32, Option<Shape>)>,
    /// What each function returns: `None` once one return is not arithmetic, or two differ.
    returns: HashMap<usize, Option<Shape>>,
}

impl<'s> Walker<'s> {
    /// A function, class or lambda scope entered: a function (or a lambda bound to a name)
    /// defined at the top of the module may be exported.
    pub(super) fn note_export_scope(&mut self, node: Node, parent: usize, id: usize) {
        // An `async def` returns a coroutine, not its arithmetic.
        let asynchronous = node.child(0).is_some_and(|c| c.ty() == "async");
        if parent != 0 || node.ty() == "class_definition" || asynchronous {
            return;
        }
        let params = self.export_params(node);
        self.exports.params.insert(id, params);
    }

    fn export_params(&self, node: Node) -> Option<Params> {
        let Some(list) = node.field("parameters") else {
            return Some(Vec::new());
        };
        let mut out = Vec::new();
        let mut c = list.walk();
        for p in list.named_children(&mut c) {
            let (name, default) = match p.ty() {
                "identifier" => (Some(p), None),
                "typed_parameter" => (p.named_child(0).filter(|n| n.ty() == "identifier"), None),
                "default_parameter" | "typed_default_parameter" => {
                    (p.field("name"), p.field("value"))
                }
                "keyword_separator" | "positional_separator" | "comment" => continue,
                _ => (None, None),
            };
            let name = self.text(name?).to_string();
            out.push((name, default.and_then(|d| self.number(d))));
        }
        Some(out)
    }

    /// A name bound in the current scope (any binding: an assignment, a loop's target).
    pub(super) fn note_export_binding(&mut self, name: &str) {
        let scope = self.scope();
        if self.exports.params.contains_key(&scope) {
            let entry = self
                .exports
                .locals
                .entry((scope, name.to_string()))
                .or_insert((0, None));
            entry.0 += 1;
            entry.1 = None;
        }
    }

    /// `name = right`, bound just now in an exported function: its shape, when it is the name's
    /// only binding and nothing conditional holds it.
    pub(super) fn note_export_local(&mut self, left: Node, right: Node) {
        let scope = self.scope();
        if left.ty() != "identifier" || !self.exports.params.contains_key(&scope) {
            return;
        }
        let unconditional = self
            .stack
            .iter()
            .rev()
            .take_while(|(_, f)| !matches!(f, Frame::Scope(_)))
            .next()
            .is_none();
        let key = (scope, self.text(left).to_string());
        if !unconditional || self.exports.locals.get(&key).is_some_and(|(n, _)| *n > 1) {
            return;
        }
        let shape = self.shape_of(right, 0);
        if let Some(entry) = self.exports.locals.get_mut(&key) {
            entry.1 = shape;
        }
    }

    /// `return value` in the current scope.
    pub(super) fn note_export_return(&mut self, value: Node) {
        let scope = self.scope();
        if !self.exports.params.contains_key(&scope) {
            return;
        }
        let shape = self.shape_of(value, 0);
        let seen = self.exports.returns.entry(scope).or_insert(shape.clone());
        if *seen != shape {
            *seen = None;
        }
    }

    /// The shape of an expression of an exported function: numbers and names (see
    /// [`resolved`]) under arithmetic, numeric wrappers, dicts of components and calls of the
    /// module's functions.
    fn shape_of(&self, node: Node, depth: usize) -> Option<Shape> {
        if depth > MAX_SHAPE_DEPTH {
            return None;
        }
        let sub = |n: Node| self.shape_of(n, depth + 1);
        Some(match node.ty() {
            "integer" | "float" => Shape::Num(parse_number(self.text(node))?),
            "parenthesized_expression" => sub(node.named_child(0)?)?,
            "unary_operator" => {
                let a = sub(node.field("argument")?)?;
                match node.field("operator").map(|o| self.text(o)) {
                    Some("-") => Shape::Neg(Box::new(a)),
                    Some("+") => a,
                    _ => return None,
                }
            }
            "binary_operator" => {
                let op = Shape::operator(self.text(node.field("operator")?))?;
                let a = sub(node.field("left")?)?;
                let b = sub(node.field("right")?)?;
                Shape::Bin(op, Box::new(a), Box::new(b))
            }
            // Resolved once the whole function is read (see `resolve`).
            "identifier" => Shape::Name(self.text(node).to_string()),
            "dictionary" => {
                let mut c = node.walk();
                let mut entries = Vec::new();
                for pair in node.named_children(&mut c) {
                    let (k, v) = (pair.field("key")?, pair.field("value")?);
                    if k.ty() != "string" {
                        return None;
                    }
                    entries.push((string_key(self.text(k)), sub(v)?));
                }
                Shape::Dict(entries)
            }
            "call" => {
                let callee = self.text(node.field("function")?);
                let mut c = node.walk();
                let args: Vec<Node> = match node.field("arguments") {
                    Some(a) if a.ty() == "argument_list" => a
                        .named_children(&mut c)
                        .filter(|a| a.ty() != "comment")
                        .collect(),
                    _ => return None,
                };
                if !args.iter().all(|a| is_expression(*a)) {
                    return None;
                }
                let wrapper = matches!(callee, "int" | "float" | "round" | "abs")
                    || (callee.starts_with("math.")
                        && matches!(last_segment(callee), "ceil" | "floor"));
                match args.as_slice() {
                    [one] if wrapper => sub(*one)?,
                    _ if callee.contains('.') || wrapper => return None,
                    _ => Shape::Call(
                        callee.to_string(),
                        args.into_iter().map(sub).collect::<Option<_>>()?,
                    ),
                }
            }
            _ => return None,
        })
    }

    /// The module's exports, once the walk is done: the functions whose every return has one
    /// arithmetic shape, the module's own calls inlined.
    pub(super) fn value_exports(&mut self) -> Vec<Export> {
        let notes = std::mem::take(&mut self.exports);
        // A name defined twice at the top is whichever definition ran last: not read.
        let name_of = |scope: &usize| self.scopes.get(*scope).map(|s| s.name.as_str());
        let once = |name: &str| {
            notes
                .params
                .keys()
                .filter(|s| name_of(s) == Some(name))
                .count()
                == 1
        };
        let mut raw: Vec<(usize, Export)> = notes
            .returns
            .iter()
            .filter_map(|(scope, shape)| {
                let params = notes.params.get(scope)?.clone()?;
                let name = self.scopes.get(*scope)?.name.clone();
                if name.is_empty() || !once(&name) {
                    return None;
                }
                let returns = resolved(
                    shape.as_ref()?,
                    *scope,
                    &params,
                    &notes,
                    &self.module_numbers,
                    0,
                )?;
                Some((
                    *scope,
                    Export {
                        name,
                        params,
                        returns,
                    },
                ))
            })
            .collect();
        raw.sort_by_key(|(scope, _)| *scope);
        let raw: Vec<Export> = raw.into_iter().map(|(_, e)| e).collect();
        let mut out: Vec<Export> = raw
            .iter()
            .filter_map(|e| {
                let returns = e.returns.inline(e.params.len(), &raw)?;
                Some(Export {
                    returns,
                    ..e.clone()
                })
            })
            .collect();
        // The module's numbers (`GIB = 1024**3`, `GPU_GB = 80`), read where another module
        // imports them.
        let mut numbers: Vec<Export> = self
            .module_numbers
            .iter()
            .filter(|(name, _)| !raw.iter().any(|e| e.name == **name))
            .map(|(name, v)| Export {
                name: name.to_string(),
                params: Vec::new(),
                returns: Shape::Num(*v),
            })
            .collect();
        numbers.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(numbers);
        out
    }
}

/// A shape of function `scope` with its names resolved, now that the whole module is read: a
/// parameter the function does not bind again, a name it binds once (unconditionally, to a
/// shape), a numeric constant of the module. Anything else, or a name bound twice, leaves it
/// unknown.
fn resolved(
    shape: &Shape,
    scope: usize,
    params: &Params,
    notes: &ExportNotes,
    module: &HashMap<&str, f64>,
    depth: usize,
) -> Option<Shape> {
    if depth > MAX_SHAPE_DEPTH {
        return None;
    }
    let sub = |s: &Shape| resolved(s, scope, params, notes, module, depth + 1);
    Some(match shape {
        Shape::Name(name) => {
            let param = params.iter().position(|(p, _)| p == name);
            match (notes.locals.get(&(scope, name.clone())), param) {
                (Some((1, Some(bound))), None) => sub(bound)?,
                (Some(_), _) => return None,
                (None, Some(i)) => Shape::Param(i),
                (None, None) => Shape::Num(*module.get(name.as_str())?),
            }
        }
        Shape::Num(v) => Shape::Num(*v),
        Shape::Param(i) => Shape::Param(*i),
        Shape::Neg(a) => Shape::Neg(Box::new(sub(a)?)),
        Shape::Bin(op, a, b) => Shape::Bin(op, Box::new(sub(a)?), Box::new(sub(b)?)),
        Shape::Dict(entries) => Shape::Dict(
            entries
                .iter()
                .map(|(k, v)| Some((k.clone(), sub(v)?)))
                .collect::<Option<_>>()?,
        ),
        Shape::Call(name, args) => {
            Shape::Call(name.clone(), args.iter().map(sub).collect::<Option<_>>()?)
        }
    })
}

/// An argument that is a plain expression (not `*xs`, `**kw` or `k=v`).
fn is_expression(node: Node) -> bool {
    !matches!(
        node.ty(),
        "keyword_argument" | "list_splat" | "dictionary_splat" | "parenthesized_list_splat"
    )
}

#[cfg(test)]
mod tests {
    use super::super::{extract_with, Reads};
    use crate::expr::imports::Shape;

    const MODULE: &str = r#"GIB = 1024**3


def gib(b):
    """Bytes to GiB."""
    return b / GIB


def scaled(n, k=2):
    m = n * k
    return m


def branchy(b, binary):
    if binary:
        return b / 2**30
    return b / 1e9


def summed(xs):
    t = 0
    for x in xs:
        t = t + x
    return t


def splat(*xs):
    return 1


class Sizes:
    def twice(self, b):
        return b * 2


def outer(b):
    def inner(c):
        return c * 3

    return gib(b) + 1


def unknown(b):
    return helper_elsewhere(b)


async def later(b):
    return b * 2
"#;

    fn bin(op: &'static str, a: Shape, b: Shape) -> Shape {
        Shape::Bin(op, Box::new(a), Box::new(b))
    }

    #[test]
    fn top_level_functions_and_numbers_are_exported() {
        // Read whatever else the file is parsed for.
        let none = Reads {
            loops: false,
            values: false,
        };
        for reads in [Reads::ALL, none] {
            let facts = extract_with(MODULE, reads).expect("parses");
            let names: Vec<&str> = facts
                .value_exports
                .iter()
                .map(|e| e.name.as_str())
                .collect();
            // The functions, then the module's numbers.
            assert_eq!(names, ["gib", "scaled", "outer", "GIB"]);
            assert!(facts.value_exports[3].params.is_empty());
            assert_eq!(facts.value_exports[3].returns, Shape::Num(1_073_741_824.0));
            let gib = bin("/", Shape::Param(0), Shape::Num(1_073_741_824.0));
            assert_eq!(facts.value_exports[0].returns, gib);
            assert_eq!(
                facts.value_exports[1].params,
                [("n".to_string(), None), ("k".to_string(), Some(2.0))]
            );
            assert_eq!(
                facts.value_exports[1].returns,
                bin("*", Shape::Param(0), Shape::Param(1))
            );
            assert_eq!(
                facts.value_exports[2].returns,
                bin("+", gib, Shape::Num(1.0))
            );
        }
    }
}
