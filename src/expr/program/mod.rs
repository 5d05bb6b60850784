//! Memory arithmetic as written, valued once the file is read. A frontend records each
//! expression it may need as a small graph (numbers, names, operators, calls, containers, and the
//! *sources* whose meaning is known from what they call), the bindings of every scope in source
//! order, and what each function returns. Valuing waits for the end of the walk, so that:
//! - a name is the latest value assigned to it before it is read, wherever its function sits;
//! - a local helper's return is valued at each call site with the arguments bound, and a
//!   helper's own formulas are valued once per call site (see [`Valuer::frames`]);
//! - a bundle of components (a dict or a tuple) is read by key or position;
//! - a value's role comes first from where it comes from (a `numel()` sum counts parameters,
//!   `total_memory` is the device's memory, `WORLD_SIZE` counts devices), and only then from the
//!   words of its name.

mod calls;
mod counts;
mod items;

use super::names::{
    billions_suffix, count_scale, is_node_count, may_count_by_use, names_a_count, params_from_name,
};
use super::{counts_parameters, part_of, role_of, sizes_memory, DeviceCount, Lin, Role};
use std::cell::OnceCell;
use std::cell::{Cell, RefCell};

/// The program's maps are keyed by short names and ids looked up at every value: foldhash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::ops::Range;

pub type Id = u32;

/// Where a value is known to come from, whatever it is called.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Source {
    /// A count of the model's parameters (`sum(p.numel() for p in model.parameters())`,
    /// `model.num_parameters()`); `trainable` when only those with gradients are counted.
    Params { trainable: bool },
    /// The device's memory in bytes: `get_device_properties(0).total_memory`, `mem_get_info()`.
    DeviceMemory,
    /// The weights' own size in bytes: `model.get_memory_footprint()`.
    Weights,
    /// The optimizer's states' size in bytes: `p.numel() * p.element_size()` summed over
    /// `optimizer.state`.
    OptimizerStates,
    /// A count of devices: `dist.get_world_size()`, `int(os.environ["WORLD_SIZE"])`.
    Devices(DeviceCount),
}

/// A key of a bundle; `S` is how the program holds its names (see [`Kept`]).
#[derive(Clone, Debug)]
pub enum KeyOf<S> {
    Str(S),
    Index(i64),
}

pub type Key<'s> = KeyOf<&'s str>;

#[derive(Clone, Debug)]
pub enum NodeOf<S> {
    Num(f64),
    /// A number written in another file (a helper imported from the project): no literal
    /// here for a fix to rewrite.
    Fixed(f64),
    /// A name, read in the node's scope at the node's position.
    Name(S),
    Neg(Id),
    /// `a op b` for `+ - * / // ** % << >>`.
    Bin(S, Id, Id),
    /// A call of what may be a helper of the file (`estimate(n, 80)`, `self._grads()`).
    Call {
        callee: S,
        args: Vec<Id>,
        keywords: Vec<(S, Id)>,
    },
    /// `min(...)`, `max(...)`: the one argument that is not a constant, when there is one.
    Extreme(Vec<Id>),
    Item(Id, KeyOf<S>),
    /// `table[key]` with a key that is itself a value (`BYTES[dtype]`, `dtype` a parameter
    /// whose default or argument is a string).
    ItemAt(Id, Id),
    /// A string literal: a key a table may be indexed by.
    Str(S),
    Dict(Vec<(S, Id)>),
    /// A dict with one key set (`parts["grads"] = g` after `parts = {}`).
    Set(Id, S, Id),
    Seq(Vec<Id>),
    /// `a if test else b`.
    Choice(Id, Id),
    /// `sum(...)` of a sequence, or of a bundle's values.
    Sum(Id),
    Source(Source),
    Opaque,
}

pub type Node<'s> = NodeOf<&'s str>;

#[derive(Clone, Debug)]
pub(super) struct EntryOf<S> {
    pub(super) node: NodeOf<S>,
    pub(super) span: Range<usize>,
    pub(super) scope: usize,
    /// The branches the expression is written under (see [`Program::at_path`]).
    pub(super) path: u32,
}

type Entry<'s> = EntryOf<&'s str>;

/// A binding of a name: where it takes effect, its value and the branches it is made under.
#[derive(Clone, Debug)]
pub(super) struct Bound {
    at: usize,
    value: Id,
    path: u32,
}

/// The tests a statement is written under in its function, outermost first: each test's id
/// and the arm (`true` for the body, `false` for `else`).
pub type Path = Vec<(u32, bool)>;

/// A function, class or the module, as valuing sees it.
#[derive(Clone, Debug, Default)]
pub struct ScopeDefOf<S> {
    pub name: S,
    pub parent: Option<usize>,
    /// The class whose `self.x` a method reads.
    pub class: Option<usize>,
    pub is_class: bool,
    /// Parameters (without `self`), with their default values.
    pub params: Vec<(S, Option<Id>)>,
    pub returns: Vec<Id>,
}

pub type ScopeDef<'s> = ScopeDefOf<&'s str>;

/// The file's expressions, bindings and functions.
#[derive(Default)]
pub struct Program<'s> {
    pub(super) src: &'s str,
    pub(super) entries: Vec<Entry<'s>>,
    pub(super) scopes: Vec<ScopeDef<'s>>,
    /// Per scope and name, in source order.
    pub(super) bindings: HashMap<(usize, &'s str), Vec<Bound>>,
    /// Paths by id; the one new nodes and bindings are made under.
    pub(super) paths: Vec<Path>,
    pub(super) path_ids: HashMap<Path, u32>,
    pub(super) current: u32,
    /// What a statement says a name holds in a scope without binding it (`weights = n_b * 2  #
    /// bf16` makes `n_b` a parameter count there): the role, and the coefficient one unit of
    /// the name carries in that role.
    pub(super) roles: HashMap<(usize, &'s str), (Role, f64)>,
    /// Numbers a comment says count parameters in billions (`nb = 1.3  # billions of
    /// parameters`): the scale, by scope and name.
    scales: HashMap<(usize, &'s str), f64>,
    /// Functions by name (not methods), classes by name, and methods by class and name.
    functions: HashMap<&'s str, Vec<usize>>,
    classes: HashMap<&'s str, Vec<usize>>,
    methods: HashMap<(usize, &'s str), usize>,
    /// Calls of names that may be helpers: where a helper's formulas are valued.
    pub(super) calls: Vec<Id>,
    /// Calls of helpers imported from the project's modules, by the call's span: the function
    /// each is valued as (see [`Program::import`]).
    pub(super) imported: HashMap<(usize, usize), usize>,
}

/// The least a number a count's name holds must be to count a model's parameters.
pub const PARAM_COUNT_MIN: f64 = 1e6;
/// The most bytes a parameter takes in any regime the knowledge lists (fp32 Adam with master
/// weights and extra states stays below it).
const MAX_BYTES_PER_PARAM: f64 = 40.0;

/// The largest model, in billions of parameters, a count in billions may hold.
const MAX_BILLIONS: f64 = 5000.0;
/// How many helpers deep valuing follows calls.
const MAX_CALL_DEPTH: u8 = 3;
/// How many call sites of one helper its formulas are valued for.
const MAX_FRAMES: usize = 8;
/// Beyond this many terms a sum is not memory arithmetic anyone reads: it is kept opaque.
const MAX_TERMS: usize = 64;
/// Valuing recursion deeper than this (long chains of names) gives up on the value.
const MAX_DEPTH: usize = 192;

impl<'s> Program<'s> {
    /// Whether the value is a calculation (`a op b`), not a name or a number read as it is.
    pub fn is_arithmetic(&self, id: Id) -> bool {
        self.entries
            .get(id as usize)
            .is_some_and(|e| matches!(e.node, Node::Bin(..)))
    }

    /// Whether the arithmetic at `id` adds or subtracts terms (`(w + g + s) / 2**30`), not only
    /// scales one (`need / 2**30`).
    pub fn adds_terms(&self, id: Id) -> bool {
        match self.entries.get(id as usize).map(|e| &e.node) {
            Some(Node::Bin(op, a, b)) => match *op {
                "+" | "-" => true,
                "*" | "/" | "//" => self.adds_terms(*a) || self.adds_terms(*b),
                _ => false,
            },
            _ => false,
        }
    }

    pub fn new(src: &'s str) -> Self {
        Program {
            src,
            scopes: vec![ScopeDef::default()],
            paths: vec![Vec::new()],
            ..Program::default()
        }
    }

    /// The branches what is added next is written under.
    pub fn at_path(&mut self, path: Path) {
        self.current = match self.path_ids.get(&path) {
            Some(id) => *id,
            None => {
                let id = self.paths.len() as u32;
                self.path_ids.insert(path.clone(), id);
                self.paths.push(path);
                id
            }
        };
    }

    pub fn add(&mut self, node: Node<'s>, span: Range<usize>, scope: usize) -> Id {
        if matches!(node, Node::Call { .. }) {
            self.calls.push(self.entries.len() as Id);
        }
        let path = self.current;
        self.entries.push(Entry {
            node,
            span,
            scope,
            path,
        });
        (self.entries.len() - 1) as Id
    }

    /// Register a scope; ids follow the order of calls, the module being 0.
    pub fn add_scope(&mut self, def: ScopeDef<'s>) -> usize {
        let id = self.scopes.len();
        if def.is_class {
            self.classes.entry(def.name).or_default().push(id);
        } else {
            match def.parent.and_then(|p| self.scopes.get(p)) {
                Some(p) if p.is_class => {
                    self.methods.insert((def.parent.unwrap_or(0), def.name), id);
                }
                _ => self.functions.entry(def.name).or_default().push(id),
            }
        }
        self.scopes.push(def);
        self.count_roles(id);
        id
    }

    /// In a function for memory (`per_gpu_bytes(n, ...)`, `model_state_gib(params)`), the
    /// parameter a count-like name holds is the parameter count its arithmetic sizes.
    pub(super) fn count_roles(&mut self, id: usize) {
        let counts: Vec<&'s str> = match self.scopes.get(id) {
            Some(d) if !d.is_class && sizes_memory(d.name) => d
                .params
                .iter()
                .map(|(p, _)| *p)
                .filter(|p| counts_parameters(p))
                .collect(),
            _ => Vec::new(),
        };
        for p in counts {
            self.name_role(id, p, Role::ParamCount, 1.0);
        }
    }

    /// `name` holds `value` from byte `at` on (the end of the statement that binds it).
    pub fn bind(&mut self, scope: usize, name: &'s str, at: usize, value: Id) {
        let path = self.current;
        self.bindings
            .entry((scope, name))
            .or_default()
            .push(Bound { at, value, path });
    }

    fn path(&self, id: u32) -> &[(u32, bool)] {
        self.paths.get(id as usize).map_or(&[], |p| p.as_slice())
    }

    pub fn returns(&mut self, scope: usize, value: Id) {
        if let Some(s) = self.scopes.get_mut(scope) {
            s.returns.push(value);
        }
    }

    /// The value a parameter of `scope` takes when a call leaves it out (a shell function's
    /// `${1:-80}`), unless one is known already.
    pub fn param_default(&mut self, scope: usize, name: &str, value: Id) {
        let param = self
            .scopes
            .get_mut(scope)
            .and_then(|s| s.params.iter_mut().find(|(n, _)| *n == name));
        if let Some((_, default @ None)) = param {
            *default = Some(value);
        }
    }

    /// What `name` holds in `scope`, read from a statement that does not bind it.
    pub fn name_role(&mut self, scope: usize, name: &'s str, role: Role, coef: f64) {
        self.roles.insert((scope, name), (role, coef));
    }

    /// `name`, bound in `scope` to a number, counts parameters in units of `scale` (its
    /// comment says so).
    pub fn counts_in(&mut self, scope: usize, name: &'s str, scale: f64) {
        self.scales.insert((scope, name), scale);
    }

    /// The scale a comment gave the number `name` holds where `scope` reads it.
    fn scale_in(&self, scope: usize, name: &str) -> Option<f64> {
        let mut cur = Some(scope);
        while let Some(s) = cur {
            if let Some(scale) = self.scales.get(&(s, name)) {
                return Some(*scale);
            }
            if self.bindings.contains_key(&(s, name)) || self.is_param(s, name) {
                return None;
            }
            cur = self.scopes.get(s).and_then(|d| d.parent);
        }
        None
    }

    /// What a statement said `name` holds, in `scope` or the nearest enclosing scope that said
    /// it (a function reads the module's `P = 7e9` as the module does).
    fn role_in(&self, scope: usize, name: &str) -> Option<(Role, f64)> {
        if self.counted_field(scope, name) {
            return Some((Role::ParamCount, 1.0));
        }
        let mut cur = Some(scope);
        while let Some(s) = cur {
            if let Some(r) = self.roles.get(&(s, name)) {
                return Some(*r);
            }
            // A name of its own (bound or a parameter) hides the enclosing one.
            if self.bindings.contains_key(&(s, name)) || self.is_param(s, name) {
                return None;
            }
            cur = self.scopes.get(s).and_then(|d| d.parent);
        }
        None
    }

    /// In a method for memory (`def zero1_gb(self)`), a field of the instance with a count's
    /// name (`self.params`, `self.n`) is the parameter count it sizes, as a parameter so named
    /// is in a function (see [`Program::count_roles`]).
    fn counted_field(&self, scope: usize, name: &str) -> bool {
        let Some(field) = name.strip_prefix("self.") else {
            return false;
        };
        let Some(def) = self.scopes.get(scope) else {
            return false;
        };
        let method = def
            .parent
            .and_then(|p| self.scopes.get(p))
            .is_some_and(|p| p.is_class);
        method
            && !field.contains('.')
            && sizes_memory(def.name)
            && counts_parameters(field)
            && !self.bindings.contains_key(&(scope, name))
    }

    pub fn span(&self, id: Id) -> Range<usize> {
        self.entries
            .get(id as usize)
            .map_or(0..0, |e| e.span.clone())
    }

    /// Where each name is read, by scope and name.
    pub fn reads(&self) -> HashMap<(usize, &'s str), Vec<usize>> {
        let mut out: HashMap<(usize, &'s str), Vec<usize>> = HashMap::default();
        for e in &self.entries {
            if let Node::Name(n) = e.node {
                out.entry((e.scope, n)).or_default().push(e.span.start);
            }
        }
        out
    }

    /// Whether `name` is a parameter of the function `scope`.
    pub fn is_param(&self, scope: usize, name: &str) -> bool {
        self.scopes
            .get(scope)
            .is_some_and(|s| s.params.iter().any(|(p, _)| *p == name))
    }

    pub fn is_function(&self, scope: usize) -> bool {
        self.scopes
            .get(scope)
            .is_some_and(|s| !s.is_class && s.parent.is_some())
    }

    fn text(&self, span: &Range<usize>) -> &'s str {
        self.src.get(span.clone()).unwrap_or("")
    }

    /// The function a call in `scope` names: a method of the enclosing class for `self.f`, the
    /// nearest function of that name otherwise.
    pub(super) fn resolve(&self, callee: &str, scope: usize) -> Option<usize> {
        if let Some(method) = callee
            .strip_prefix("self.")
            .or_else(|| callee.strip_prefix("cls."))
        {
            let class = self.class_of(scope)?;
            return self.methods.get(&(class, method)).copied();
        }
        if callee.contains('.') {
            // `plan.fits()` on an instance of a class of the file.
            let (object, method) = callee.split_once('.')?;
            let class = self.instance_class(object, scope)?;
            return self.methods.get(&(class, method)).copied();
        }
        self.nearest(self.functions.get(callee)?, scope)
    }

    /// The `__init__` a call in `scope` runs when it names a class of the file.
    fn constructed(&self, callee: &str, scope: usize) -> Option<usize> {
        if callee.contains('.') {
            return None;
        }
        let class = self.nearest(self.classes.get(callee)?, scope)?;
        self.methods.get(&(class, "__init__")).copied()
    }

    /// Of the scopes of one name, the one defined in `scope` or nearest around it.
    fn nearest(&self, candidates: &[usize], scope: usize) -> Option<usize> {
        let mut s = Some(scope);
        while let Some(cur) = s {
            if let Some(f) = candidates
                .iter()
                .find(|f| self.scopes.get(**f).and_then(|d| d.parent) == Some(cur))
            {
                return Some(*f);
            }
            s = self.scopes.get(cur).and_then(|d| d.parent);
        }
        None
    }

    fn class_of(&self, scope: usize) -> Option<usize> {
        self.scopes.get(scope).and_then(|s| s.class)
    }

    /// The class of the file `object` is an instance of where `scope` reads it: the name is
    /// bound, last, to a construction of that class (`plan = DevicePlan(...)`).
    pub(super) fn instance_class(&self, object: &str, scope: usize) -> Option<usize> {
        let mut cur = Some(scope);
        while let Some(s) = cur {
            if let Some(list) = self.bindings.get(&(s, object)) {
                let bound = list.last()?;
                return match &self.entries.get(bound.value as usize)?.node {
                    Node::Call { callee, .. } => self.nearest(self.classes.get(callee)?, s),
                    _ => None,
                };
            }
            cur = self.scopes.get(s).and_then(|d| d.parent);
        }
        None
    }

    /// The function of the file an expression calls, when it is such a call.
    pub fn callee(&self, id: Id) -> Option<usize> {
        match self.entries.get(id as usize)? {
            Entry {
                node: Node::Call { callee, .. },
                scope,
                ..
            } => self.resolve(callee, *scope),
            _ => None,
        }
    }

    pub fn valuer(&self) -> Valuer<'_, 's> {
        Valuer {
            p: self,
            memo: RefCell::new(HashMap::default()),
            busy: RefCell::new(Vec::new()),
            depth: Cell::new(0),
            frames: RefCell::new(HashMap::default()),
            call_index: OnceCell::new(),
            bound: RefCell::new(HashMap::default()),
            pick: Cell::new(0),
            widest: Cell::new(1),
        }
    }
}

/// A value: a number (linear in its symbols), or a bundle of them.
#[derive(Clone, Debug)]
pub enum Value {
    Scalar(Lin),
    /// A dict (or a dataclass) of values by key.
    Bundle(Vec<(String, Value)>),
    /// A tuple or a list.
    Seq(Vec<Value>),
    /// A string, with the number it reads as anywhere but as a table's key (what it read as
    /// before strings were values: a symbol of the name holding it, or an opaque literal).
    Text(String, Lin),
}

impl Value {
    /// As one number: a bundle of components is their total (or the entry named for the total).
    pub fn lin(self, text: &str, span: Range<usize>) -> Lin {
        match self {
            Value::Scalar(l) | Value::Text(_, l) => l,
            Value::Bundle(entries) => bundle_total(entries).unwrap_or_else(|| opaque(text, span)),
            Value::Seq(_) => opaque(text, span),
        }
    }

    /// The value held in a container: a string there reads as a number, as it always did.
    fn held(self) -> Value {
        match self {
            Value::Text(_, l) => Value::Scalar(l),
            other => other,
        }
    }

    fn scalar(self) -> Option<Lin> {
        match self {
            Value::Scalar(l) | Value::Text(_, l) => Some(l),
            _ => None,
        }
    }
}

/// A key for memory off the GPU (`cpu_mem_gb`, `host_gb`, `ram`, `nvme_bytes`).
fn names_host_memory(key: &str) -> bool {
    key.to_ascii_lowercase()
        .split(['_', '-', ' '])
        .any(|seg| matches!(seg, "cpu" | "host" | "ram" | "nvme" | "disk" | "dram"))
}

/// The total a bundle of memory components states: its entry named for the total, or the sum of
/// the entries that are model-sized or named for a component.
fn bundle_total(entries: Vec<(String, Value)>) -> Option<Lin> {
    let mut total: Option<Lin> = None;
    let mut parts: Vec<Lin> = Vec::new();
    for (key, v) in entries {
        // Host memory is another budget (`{"gpu_gb": ..., "cpu_mem_gb": ...}`): not added in.
        if names_host_memory(&key) {
            continue;
        }
        let Some(lin) = v.scalar() else { continue };
        // A count beside the memory (`"num_params_total": n` in a summary) is no memory.
        if lin.counts_only() {
            continue;
        }
        let role = role_of(&key);
        // The entry named for the total states it, even where its value is not known
        // (`param_gb * (4 if training else 1)`).
        if role == Role::Total && (lin.is_sized() || !lin.is_constant()) {
            total = Some(lin);
        } else if lin.is_sized() || role.is_component() {
            parts.push(lin);
        }
    }
    if total.is_some() {
        return total;
    }
    let mut parts = parts.into_iter();
    let first = parts.next()?;
    Some(parts.fold(first, Lin::plus))
}

fn opaque(text: &str, span: Range<usize>) -> Lin {
    Lin::opaque(text, span, &[])
}

/// Where an attribute (by the value bound to it) or a class body's field gets its value.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) enum Bind {
    Attribute(Id),
    Field(usize, String),
}

/// An attribute's or a field's value (if it has one), with how many alternatives the names it
/// read had.
type Remembered = (Option<Value>, usize);

/// The arguments one call site gives a helper, valued where the call is.
#[derive(Clone, Debug)]
pub struct Frame {
    pub function: usize,
    args: Vec<(String, Value)>,
    depth: u8,
    /// The call this frame binds, where a finding judged in it can say so.
    pub call: Range<usize>,
}

impl Frame {
    fn arg(&self, name: &str) -> Option<&Value> {
        self.args.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// Values the program's expressions, remembering what it worked out.
pub struct Valuer<'p, 's> {
    p: &'p Program<'s>,
    /// Values worked out, with how many alternatives the names they read had.
    memo: RefCell<HashMap<(Id, usize), (Value, usize)>>,
    busy: RefCell<Vec<Id>>,
    depth: Cell<usize>,
    frames: RefCell<HashMap<(usize, u8), Vec<Frame>>>,
    /// The calls of each function, in the program's order, each callee resolved once.
    call_index: OnceCell<HashMap<usize, Vec<Id>>>,
    /// Attributes and fields worked out, by where they are bound and the alternative read
    /// (their value does not depend on the frame they are read in; without this, attributes
    /// bound from one another are valued once per frame per level, exponentially).
    bound: RefCell<HashMap<(Bind, usize), Remembered>>,
    /// Which alternative a name bound on several paths is read as (see [`Valuer::paths`]).
    pick: Cell<usize>,
    /// The most alternatives a name read since the last [`Valuer::paths`] had.
    widest: Cell<usize>,
}

impl Valuer<'_, '_> {
    /// The value of an expression: as written (`frame` = `None`), or in a helper valued for one
    /// call site.
    pub fn value(&self, id: Id, frame: Option<&Frame>) -> Value {
        let Some(entry) = self.p.entries.get(id as usize) else {
            return Value::Scalar(Lin::default());
        };
        let key = (id, self.pick.get());
        if frame.is_none() {
            if let Some((v, wide)) = self.memo.borrow().get(&key) {
                self.widest.set(self.widest.get().max(*wide));
                return v.clone();
            }
            if self.busy.borrow().contains(&id) {
                return Value::Scalar(opaque(self.p.text(&entry.span), entry.span.clone()));
            }
        }
        if self.depth.get() > MAX_DEPTH {
            return Value::Scalar(opaque(self.p.text(&entry.span), entry.span.clone()));
        }
        self.depth.set(self.depth.get() + 1);
        if frame.is_none() {
            self.busy.borrow_mut().push(id);
        }
        let outer = self.widest.replace(1);
        let v = self.compute(entry, frame);
        let wide = self.widest.get();
        self.widest.set(outer.max(wide));
        if frame.is_none() {
            self.busy.borrow_mut().retain(|b| *b != id);
            self.memo.borrow_mut().insert(key, (v.clone(), wide));
        }
        self.depth.set(self.depth.get() - 1);
        v
    }

    /// [`Valuer::value`] as one number.
    pub fn lin(&self, id: Id, frame: Option<&Frame>) -> Lin {
        let span = self.p.span(id);
        self.value(id, frame).lin(self.p.text(&span), span)
    }

    /// The values an expression takes on the paths through the branches before it: a name
    /// bound in several arms of an `if` (`bytes = 2` or `bytes = 4`) is read as each arm's
    /// value in turn, the same arm for every name (names set together stay together).
    pub fn paths(&self, id: Id, frame: Option<&Frame>) -> Vec<Lin> {
        const MAX_PATHS: usize = 4;
        self.pick.set(0);
        self.widest.set(1);
        let mut out = vec![self.lin(id, frame)];
        let wide = self.widest.get().min(MAX_PATHS);
        for pick in 1..wide {
            self.pick.set(pick);
            let lin = self.lin(id, frame);
            if !out.contains(&lin) {
                out.push(lin);
            }
        }
        self.pick.set(0);
        out
    }

    /// The bindings of a name in its own scope that may reach a read at `at` under `path`, in
    /// source order: the latest one on every path to the read, or one per arm of the branches
    /// that set it (and the one before them, for a path that sets none).
    fn reaching<'b>(&self, list: &'b [Bound], at: usize, path: u32) -> Vec<&'b Bound> {
        let read = self.p.path(path);
        let exclusive = |a: &[(u32, bool)], b: &[(u32, bool)]| {
            a.iter()
                .any(|(c, t)| b.iter().any(|(d, u)| c == d && t != u))
        };
        let mut alts: Vec<&Bound> = Vec::new();
        for b in list.iter().rev().filter(|b| b.at <= at) {
            let bp = self.p.path(b.path);
            if read.starts_with(bp) {
                // Each arm from where it leaves the read's path.
                let suffixes: Vec<&[(u32, bool)]> = alts
                    .iter()
                    .map(|a| {
                        let ap = self.p.path(a.path);
                        let shared = ap.iter().zip(read).take_while(|(x, y)| x == y).count();
                        &ap[shared..]
                    })
                    .collect();
                if alts.is_empty() || !covers(&suffixes) {
                    alts.push(b);
                }
                break;
            }
            // Set on a path that cannot reach the read, or overwritten by a later binding.
            if exclusive(bp, read) {
                continue;
            }
            if alts.iter().all(|a| exclusive(self.p.path(a.path), bp)) {
                alts.push(b);
            }
        }
        alts.reverse();
        alts
    }

    fn compute(&self, e: &Entry, frame: Option<&Frame>) -> Value {
        let span = e.span.clone();
        let text = self.p.text(&span);
        let scalar = |id: Id| self.value(id, frame).scalar();
        let v = match &e.node {
            Node::Num(v) => Lin::constant(*v, Some(span)),
            Node::Fixed(v) => Lin::constant(*v, None),
            Node::Name(name) => return self.name(name, span, e.scope, e.path, frame),
            Node::Neg(a) => match scalar(*a) {
                Some(l) => l.negated(),
                None => opaque(text, span),
            },
            Node::Bin(op, a, b) => match (scalar(*a), scalar(*b)) {
                (Some(x), Some(y)) if *op == "*" => self.product(*a, *b, x, y, text, span),
                (Some(x), Some(y)) => binary(op, x, y, text, span),
                _ => opaque(text, span),
            },
            Node::Extreme(args) => {
                let lins: Vec<Lin> = args.iter().filter_map(|a| scalar(*a)).collect();
                let varying: Vec<&Lin> = lins.iter().filter(|l| !l.is_constant()).collect();
                match varying[..] {
                    [one] => one.clone(),
                    // `max(grads, 0.05 * gpu)`: at least each of its parts, whose roles it keeps.
                    _ if lins.len() == args.len() => {
                        Lin::opaque(text, span, &lins.iter().collect::<Vec<_>>())
                    }
                    _ => opaque(text, span),
                }
            }
            Node::Call {
                callee,
                args,
                keywords,
            } => return self.call(callee, args, keywords, e, frame),
            Node::Item(base, key) => return self.item(self.value(*base, frame), key, text, span),
            Node::ItemAt(base, key) => return self.item_at(*base, *key, frame, text, span),
            Node::Str(s) => return Value::Text(s.to_string(), opaque(text, span)),
            Node::Dict(pairs) => {
                return Value::Bundle(
                    pairs
                        .iter()
                        .map(|(k, v)| {
                            let value = match self.value(*v, frame).held() {
                                Value::Scalar(l) => Value::Scalar(l.through(part_of(k))),
                                other => other,
                            };
                            (k.to_string(), value)
                        })
                        .collect(),
                )
            }
            Node::Seq(items) => {
                return Value::Seq(items.iter().map(|i| self.value(*i, frame).held()).collect())
            }
            // Only a dict whose every entry is known grows: a key set on anything else leaves
            // the rest of its entries unknown.
            Node::Set(base, key, v) => return self.set(*base, key, *v, frame, text, span),
            Node::Choice(a, b) => match (scalar(*a), scalar(*b)) {
                (Some(x), Some(y)) if same(&x, &y) => x,
                (Some(x), Some(y)) => Lin::opaque(text, span, &[&x, &y]),
                _ => opaque(text, span),
            },
            Node::Sum(base) => {
                let items: Vec<Lin> = match self.value(*base, frame) {
                    Value::Seq(items) => items.into_iter().filter_map(Value::scalar).collect(),
                    Value::Bundle(entries) => entries
                        .into_iter()
                        .filter_map(|(_, v)| v.scalar())
                        .collect(),
                    Value::Scalar(_) | Value::Text(..) => Vec::new(),
                };
                let mut items = items.into_iter();
                match items.next() {
                    Some(first) => capped(items.fold(first, Lin::plus), text, span),
                    None => opaque(text, span),
                }
            }
            Node::Source(source) => match source {
                Source::Params { trainable } => {
                    let role = if *trainable {
                        Role::Trainable
                    } else {
                        Role::ParamCount
                    };
                    Lin::derived(text, span, role)
                }
                Source::DeviceMemory => Lin::derived(text, span, Role::Gpu),
                Source::Weights => Lin::derived(text, span, Role::Model),
                Source::OptimizerStates => Lin::derived(text, span, Role::Optimizer),
                Source::Devices(kind) => Lin::devices(text, span, *kind),
            },
            Node::Opaque => opaque(text, span),
        };
        Value::Scalar(v)
    }

    /// A name read at `span` in `scope`: the latest value bound to it before the read (in its
    /// own scope; anywhere in an enclosing one, which a function reads when it runs), a
    /// parameter's argument or literal default, or a symbol.
    fn name(
        &self,
        name: &str,
        span: Range<usize>,
        scope: usize,
        path: u32,
        frame: Option<&Frame>,
    ) -> Value {
        let p = self.p;
        let at = span.start;
        if let Some(value) = self.member(name, span.clone(), scope, path, frame) {
            return value;
        }
        let mut cur = Some(scope);
        let mut own = true;
        while let Some(s) = cur {
            let def = p.scopes.get(s);
            if let Some(list) = p.bindings.get(&(s, name)) {
                let chosen = if own {
                    let alts = self.reaching(list, at, path);
                    self.widest.set(self.widest.get().max(alts.len()));
                    let pick = self.pick.get().min(alts.len().saturating_sub(1));
                    alts.get(pick).copied()
                } else {
                    list.last()
                };
                if let Some(b) = chosen {
                    let inner = frame.filter(|f| f.function == s);
                    return self.read(name, span, scope, self.value(b.value, inner));
                }
            }
            if let Some((_, default)) = def
                .filter(|d| !d.is_class)
                .and_then(|d| d.params.iter().find(|(n, _)| *n == name))
            {
                if let Some(arg) = frame.filter(|f| f.function == s).and_then(|f| f.arg(name)) {
                    return self.read(name, span, scope, arg.clone());
                }
                // What the function uses when called without it.
                if let Some(d) = default {
                    match self.value(*d, None) {
                        Value::Scalar(l) if l.is_constant() => {
                            return self.read(name, span, scope, Value::Scalar(l));
                        }
                        Value::Text(s, _) => {
                            let symbol = self.symbol(name, span, scope);
                            return Value::Text(s, symbol);
                        }
                        _ => {}
                    }
                }
                return Value::Scalar(self.symbol(name, span, scope));
            }
            own = false;
            // A class body's names are not visible from its methods.
            cur = def.and_then(|d| d.parent);
            while let Some(c) = cur.filter(|c| p.scopes.get(*c).is_some_and(|d| d.is_class)) {
                cur = p.scopes.get(c).and_then(|d| d.parent);
            }
        }
        Value::Scalar(self.symbol(name, span, scope))
    }

    /// An attribute of `self`, or of an instance of a class of the file (`cfg.n_params`
    /// after `cfg = MemCfg()`): what the class binds to it, its field, or its property's
    /// return. Out of line: valuing recurses through `name`, whose frame must stay small.
    #[inline(never)]
    fn member(
        &self,
        name: &str,
        span: Range<usize>,
        scope: usize,
        path: u32,
        frame: Option<&Frame>,
    ) -> Option<Value> {
        let p = self.p;
        let at = span.start;
        let (class, field) = match name.split_once('.') {
            Some(("self", field)) => (p.class_of(scope), field),
            Some((object, field)) if !field.contains('.') => {
                match p.instance_class(object, scope) {
                    Some(class) => (Some(class), field),
                    // `parts.grads` of `parts = Breakdown(weights=w, grads=g)`: a bundle's entry.
                    None => {
                        let Value::Bundle(entries) =
                            self.name(object, span.clone(), scope, path, frame)
                        else {
                            return None;
                        };
                        return entries
                            .into_iter()
                            .find(|(k, _)| k == field)
                            .map(|(_, v)| v);
                    }
                }
            }
            _ => return None,
        };
        let key = format!("self.{field}");
        if let Some(list) = class.and_then(|class| p.bindings.get(&(class, key.as_str()))) {
            let chosen = match name.starts_with("self.") {
                true => list.iter().rev().find(|b| b.at <= at).or(list.last()),
                false => list.last(),
            };
            if let Some(b) = chosen {
                return Some(self.read(name, span, scope, self.attribute(b.value)));
            }
        }
        if let Some(value) = class.and_then(|class| self.field(class, field)) {
            return Some(self.read(name, span, scope, value));
        }
        // A property (`self.w_gb`, `fp.total_gib`): what its method returns, read as a name
        // bound to it.
        if let Some(method) = class.and_then(|class| p.methods.get(&(class, field))) {
            let value = self.returned(*method, name, span.clone(), frame);
            return Some(self.read(name, span, scope, value));
        }
        Some(Value::Scalar(self.symbol(name, span, scope)))
    }

    /// What reading `name` gives once its value is known.
    fn read(&self, name: &str, span: Range<usize>, scope: usize, value: Value) -> Value {
        let lin = match value {
            Value::Scalar(l) => l,
            // A string keeps its text for the tables it indexes, and reads as it always did.
            Value::Text(s, l) => {
                return match self.read(name, span, scope, Value::Scalar(l)) {
                    Value::Scalar(x) => Value::Text(s, x),
                    other => other,
                }
            }
            bundle => return bundle,
        };
        if !lin.is_bindable() {
            let unit = lin.common_conversion();
            return Value::Scalar(self.symbol(name, span, scope).in_unit(unit));
        }
        // A value that says nothing of what it is (`args.size` handed to `n_b`) leaves the name
        // to say it: a count in billions by its suffix.
        let roleless = !lin.is_constant() && lin.terms.iter().all(|t| t.role == Role::Unknown);
        if roleless && count_scale(name).is_some() {
            return Value::Scalar(self.symbol(name, span, scope));
        }
        // A number a statement says is a parameter count (`PARAMS=7000000000` in a shell
        // script) stays a symbol of that role, carrying its value.
        if let (true, Some((Role::ParamCount, coef))) =
            (lin.is_constant(), self.p.role_in(scope, name))
        {
            if role_of(name) == Role::Unknown && count_scale(name).is_none() {
                let known = Lin::known(name, span, lin.constant)
                    .with_role(Role::ParamCount)
                    .scale(coef, None, None);
                return Value::Scalar(known);
            }
        }
        // `P = 7e9`, `PARAMS = 13e9`, an argument `estimate(13e9)` for `n`: a count's name
        // holding a number no smaller than a model's parameter count counts parameters (a
        // model's size in GB is never that large).
        if lin.is_constant()
            && lin.constant >= PARAM_COUNT_MIN
            && names_a_count(name)
            && matches!(role_of(name), Role::Unknown | Role::Model)
        {
            let known = Lin::known(name, span, lin.constant).with_role(Role::ParamCount);
            return Value::Scalar(known);
        }
        let scale = count_scale(name).or_else(|| self.p.scale_in(scope, name));
        if let (true, Some(scale)) = (lin.is_constant(), scale) {
            // `ADAPTER_PARAMS_B = 0.02`: the parameters that train, in billions.
            let role = match role_of(name) {
                Role::Trainable => Role::Trainable,
                _ => Role::ParamCount,
            };
            let mut known = Lin::known(name, span, lin.constant * scale)
                .with_role(role)
                .scale(1.0 / scale, None, None);
            known.roles_seen.push(Role::ParamCount);
            return Value::Scalar(known);
        }
        let mut read = Lin::read(name, span, Some(&lin));
        self.apply_role(name, scope, &mut read);
        Value::Scalar(read)
    }

    /// A name with no known value: its role from what a statement said of it, else its words.
    fn symbol(&self, name: &str, span: Range<usize>, scope: usize) -> Lin {
        let mut lin = Lin::symbol(name, span);
        self.apply_role(name, scope, &mut lin);
        if let Some(scale) = count_scale(name) {
            if lin.terms.iter().all(|t| t.role == Role::Unknown) {
                lin = lin
                    .with_role(Role::ParamCount)
                    .scale(1.0 / scale, None, None);
            }
        }
        lin
    }

    fn apply_role(&self, name: &str, scope: usize, lin: &mut Lin) {
        let Some((role, coef)) = self.p.role_in(scope, name) else {
            return;
        };
        if let [t] = lin.terms.as_mut_slice() {
            if t.role == Role::Unknown {
                t.role = role;
                t.part = role;
                t.coef *= coef;
            }
        }
    }
}

/// One number as written (`3_212_749_824`, `8e9`).
fn is_number(text: &str) -> bool {
    crate::config::parse_number(text.trim()).is_some()
}

/// Whether arms (paths relative to where they branch off) leave no path that sets none of them:
/// some arm is unconditional, or the first test's two sides are each covered.
fn covers(suffixes: &[&[(u32, bool)]]) -> bool {
    if suffixes.iter().any(|s| s.is_empty()) {
        return true;
    }
    let Some(&(c, _)) = suffixes.first().and_then(|s| s.first()) else {
        return false;
    };
    let side = |taken: bool| -> Vec<&[(u32, bool)]> {
        suffixes
            .iter()
            .filter(|s| s.first() == Some(&(c, taken)))
            .map(|s| &s[1..])
            .collect()
    };
    let (yes, no) = (side(true), side(false));
    !yes.is_empty() && !no.is_empty() && covers(&yes) && covers(&no)
}

/// A plain name whose value is not known here (`cfg` read from a file): its items are named by
/// their keys. Not a call's result (`shutil.disk_usage(p).free` is no device's memory).
/// The role of `base[key]`: the key's, or for a size with no part in its name
/// (`cfg["model"]["size_gb"]`) the part its section names.
fn item_role(base: &Lin, key: &str) -> Role {
    match (role_of(key), base.terms.first()) {
        (Role::Unknown, Some(t)) if super::names::names_memory_unit(key) => {
            // The section: the last key or attribute of the base (`cfg["model"]`, `cfg.model`).
            let section = t
                .symbol
                .trim_end_matches([']', '"', '\''])
                .rsplit(['[', '"', '\'', '.'])
                .next()
                .unwrap_or("");
            match role_of(&format!("{section}_{key}")) {
                r @ (Role::Model | Role::Grads | Role::Optimizer | Role::Activations) => r,
                _ => Role::Unknown,
            }
        }
        (r, _) => r,
    }
}

fn names_a_container(base: &Lin) -> bool {
    matches!(base.terms.as_slice(), [t] if !t.opaque && t.coef == 1.0) && base.constant == 0.0
}

/// Two values that state the same thing (the same symbols, coefficients and constant).
fn same(a: &Lin, b: &Lin) -> bool {
    a.constant == b.constant
        && a.terms.len() == b.terms.len()
        && a.terms
            .iter()
            .zip(&b.terms)
            .all(|(x, y)| x.symbol == y.symbol && x.coef == y.coef && x.role == y.role)
}

/// `a op b`, where products and ratios of device counts are device counts too
/// (`nodes * gpus_per_node` is every GPU; `world_size // (tp * pp)` the data-parallel degree).
fn binary(op: &str, a: Lin, b: Lin, text: &str, span: Range<usize>) -> Lin {
    // A count of nodes times the GPUs of each is every GPU, whether the count of nodes is a
    // symbol or a constant read from a name (`NODES = 4`).
    let kind = |l: &Lin| {
        l.device_kind().or_else(|| match l.terms.as_slice() {
            [t] if l.constant == 0.0 && t.coef == 1.0 && is_node_count(&t.symbol) => {
                Some(DeviceCount::PerNode)
            }
            [] if l.const_name.as_deref().is_some_and(is_node_count) => Some(DeviceCount::PerNode),
            _ => None,
        })
    };
    match (op, kind(&a), kind(&b)) {
        ("*", Some(x), Some(y)) => {
            let product = if x == DeviceCount::ModelParallel && y == DeviceCount::ModelParallel {
                DeviceCount::ModelParallel
            } else {
                DeviceCount::Total
            };
            return Lin::devices(text, span, product);
        }
        ("/" | "//", Some(DeviceCount::Total), Some(DeviceCount::ModelParallel)) => {
            return Lin::devices(text, span, DeviceCount::DataParallel);
        }
        _ => {}
    }
    capped(Lin::binary(op, a, b, text, span.clone()), text, span)
}

fn capped(lin: Lin, text: &str, span: Range<usize>) -> Lin {
    if lin.terms.len() > MAX_TERMS {
        opaque(text, span)
    } else {
        lin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `def f(n): return n * 2` and `f(x)`: the helper's return, valued with `n` bound.
    #[test]
    fn a_helper_is_valued_at_its_call_site() {
        let src = "def f(n): return n * 2\ny = f(model_size_gb)";
        let mut p = Program::new(src);
        let f = p.add_scope(ScopeDef {
            name: "f",
            parent: Some(0),
            params: vec![("n", None)],
            ..ScopeDef::default()
        });
        let n = p.add(Node::Name("n"), 17..18, f);
        let two = p.add(Node::Num(2.0), 21..22, f);
        let ret = p.add(Node::Bin("*", n, two), 17..22, f);
        p.returns(f, ret);
        let arg = p.add(Node::Name("model_size_gb"), 29..42, 0);
        let call = p.add(
            Node::Call {
                callee: "f",
                args: vec![arg],
                keywords: vec![],
            },
            27..43,
            0,
        );
        let v = p.valuer().lin(call, None);
        assert_eq!(v.terms.len(), 1);
        assert_eq!(v.terms[0].symbol, "model_size_gb");
        assert_eq!(v.terms[0].role, Role::Model);
        assert_eq!(v.terms[0].coef, 2.0);
        let frames = p.valuer().frames(f);
        assert_eq!(frames.len(), 1);
    }

    #[test]
    fn nodes_times_gpus_per_node_counts_every_gpu() {
        let lin = binary(
            "*",
            Lin::symbol("nodes", 0..5),
            Lin::symbol("gpus_per_node", 8..21),
            "nodes * gpus_per_node",
            0..21,
        );
        assert_eq!(lin.device_kind(), Some(DeviceCount::Total));
    }
}
