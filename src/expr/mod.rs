//! One small expression form for memory arithmetic, shared by the Python and shell frontends:
//! a sum of terms (symbol × coefficient) plus a constant. Literals fold; a product of two symbols,
//! a division by a symbol or a call that is not a known numeric wrapper becomes an *opaque* term
//! whose value is unknown, and rules stay silent about what they cannot know.

pub mod imports;
mod names;
pub mod program;
pub use program::PARAM_COUNT_MIN;
pub mod units;

pub use names::{
    billions, billions_suffix, count_scale, counts_parameters, device_count, is_memory_name,
    may_count_by_use, names_a_count, names_a_rate, names_memory_unit, params_from_name, part_of,
    role_of, sizes_memory, DeviceCount, Role,
};
use std::ops::Range;
use units::Conversion;

/// One symbol with its coefficient.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    pub symbol: String,
    /// Role of the symbol itself.
    pub role: Role,
    /// The component this term was counted as: the role of the outermost named value it was
    /// reached through (`optimizer_state_gb = model_size_gb * 2` makes `model_size_gb` part of
    /// the optimizer component), or its own role.
    pub part: Role,
    pub coef: f64,
    /// The smallest expression holding the symbol and its multipliers.
    pub span: Range<usize>,
    /// Where the symbol itself is written.
    pub symbol_span: Range<usize>,
    /// The one numeric literal its coefficient came from, if exactly one (a fix can rewrite it).
    pub literal: Option<Range<usize>>,
    /// Value unknown (a product of symbols, a call): rules must not reason about its size.
    pub opaque: bool,
    /// The symbol's value when it was assigned a literal (`model_size_gb = 14`).
    pub value: Option<f64>,
    /// A per-device share (`params_gb / world_size`): the count it is divided by, as written
    /// (the last one). Such a term is opaque to rules that judge whole-model sums.
    pub divided_by: Option<String>,
    /// What that last divisor counts, when known.
    pub divided_kind: Option<DeviceCount>,
    /// Where that last division is written (`states / world` in `total = states / world`).
    pub divided_at: Option<Range<usize>>,
    /// Every device count it was divided by, in order (`/ (tp * pp)` then `/ num_gpus`).
    pub device_divisors: Vec<DeviceCount>,
    /// For a count of devices known by how it was derived (`int(os.environ["WORLD_SIZE"])`,
    /// `nodes * gpus_per_node`), what it counts; otherwise its name says.
    pub devices: Option<DeviceCount>,
    /// The role was read from what the value is derived from (a `numel()` sum, the device's
    /// `total_memory`), not from a name: the symbol is the expression until a name holds it.
    pub derived: bool,
    /// The constant divisions that converted its bytes to a unit (`/ 1e9`, `/ 2**30`).
    pub conversion: Option<Conversion>,
    /// The first name that held it (`free_gib` for `free_gib = free / 2**30`).
    pub via: Option<String>,
    /// For a model size read from a parameter count (`model_gb = n_params * 4 / 1e9`), what one
    /// unit of the symbol is per parameter, in the unit it was converted to (`4e-9`).
    pub per_param: Option<f64>,
    /// For a name read as a size (`model_gb`), the one symbol its value is a multiple of
    /// (`n_params`, or `largest_layer_params` for a gathered layer named `model_params_gb`).
    pub over: Option<String>,
}

/// How much of an opaque term's text is kept as its symbol.
const OPAQUE_TEXT: usize = 200;

/// A linear expression: Σ coef·symbol + constant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lin {
    pub terms: Vec<Term>,
    pub constant: f64,
    /// Span of the single literal this expression is, when it is one (for fixes).
    pub const_literal: Option<Range<usize>>,
    /// The name this constant was read from, when the expression is that one name.
    pub const_name: Option<String>,
    /// Roles of every name read while lowering, substituted ones included.
    pub roles_seen: Vec<Role>,
    /// Units the constant part was converted to, one per constant summed in (`80e9 / 1e9`).
    pub const_conversions: Vec<Conversion>,
}

impl Lin {
    pub fn constant(value: f64, literal: Option<Range<usize>>) -> Lin {
        Lin {
            constant: value,
            const_literal: literal,
            ..Lin::default()
        }
    }

    pub fn symbol(name: &str, span: Range<usize>) -> Lin {
        Lin::named(name, span, role_of(name))
    }

    fn named(name: &str, span: Range<usize>, role: Role) -> Lin {
        Lin {
            terms: vec![Term {
                symbol: name.to_string(),
                role,
                part: role,
                coef: 1.0,
                span: span.clone(),
                symbol_span: span,
                literal: None,
                opaque: false,
                value: None,
                divided_by: None,
                divided_kind: None,
                divided_at: None,
                device_divisors: Vec::new(),
                devices: None,
                derived: false,
                conversion: None,
                via: None,
                per_param: None,
                over: None,
            }],
            roles_seen: vec![role],
            ..Lin::default()
        }
    }

    /// A symbol whose role is known from where its value comes from, not from its name.
    pub fn with_role(mut self, role: Role) -> Lin {
        for t in &mut self.terms {
            t.role = role;
            t.part = role;
        }
        self
    }

    /// An unknown value built from the given parts (a product of symbols, a call).
    pub fn opaque(text: &str, span: Range<usize>, parts: &[&Lin]) -> Lin {
        let mut roles: Vec<Role> = parts
            .iter()
            .flat_map(|p| p.terms.iter().map(|t| t.role))
            .collect();
        roles.sort();
        let role = roles
            .iter()
            .copied()
            .find(|r| *r != Role::Unknown)
            .unwrap_or(Role::Unknown);
        // Not `symbol`: the role comes from the parts. Nested input makes every enclosing
        // expression opaque in turn: asking `role_of` about each one's text, or keeping a copy of
        // each, is quadratic in time and memory; the text kept is only a reminder.
        let cut = crate::source::floor_char_boundary(text, OPAQUE_TEXT.min(text.len()));
        let mut lin = if cut < text.len() {
            Lin::named(&format!("{}…", &text[..cut]), span, role)
        } else {
            Lin::named(text, span, role)
        };
        let unit = common_conversion(parts.iter().copied());
        if let Some(t) = lin.terms.first_mut() {
            t.opaque = true;
            // `free / 2**30 * ratio` is still in GiB, whatever else it is.
            t.conversion = unit;
        }
        lin.roles_seen = parts.iter().flat_map(|p| p.roles_seen.clone()).collect();
        lin
    }

    /// The one unit conversion its converted terms and constants share, when they agree.
    pub fn common_conversion(&self) -> Option<Conversion> {
        common_conversion(std::iter::once(self))
    }

    /// Every term's conversion (and the constant's) after a division by the constant `by`, or
    /// a multiplication by `k` (`by` = `None`). `operand` is the divisor as written.
    fn converted(
        mut self,
        by: Option<f64>,
        k: f64,
        span: &Range<usize>,
        operand: Option<(String, Range<usize>)>,
    ) -> Lin {
        let step = |c: Option<&Conversion>| match by {
            Some(by) => Conversion::divide(c, by, span.clone(), operand.clone()),
            None => Conversion::multiply(c, k, span.clone()),
        };
        for t in &mut self.terms {
            let before = t.conversion.as_ref().and_then(Conversion::unit);
            t.conversion = step(t.conversion.as_ref());
            // The name that held its bytes does not hold the converted value.
            if t.conversion.as_ref().and_then(Conversion::unit) != before {
                t.via = None;
            }
        }
        if self.const_conversions.is_empty() {
            if self.constant != 0.0 && self.terms.is_empty() {
                self.const_conversions.extend(step(None));
            }
        } else {
            self.const_conversions = self
                .const_conversions
                .iter()
                .filter_map(|c| step(Some(c)))
                .collect();
        }
        self
    }

    /// A symbol whose value is known: it stays a symbol (its role matters) and carries the value.
    pub fn known(name: &str, span: Range<usize>, value: f64) -> Lin {
        let mut lin = Lin::symbol(name, span);
        if let Some(t) = lin.terms.first_mut() {
            t.value = Some(value);
        }
        lin
    }

    pub fn is_constant(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn plus(mut self, other: Lin) -> Lin {
        self.terms.extend(other.terms);
        self.const_conversions.extend(other.const_conversions);
        self.constant += other.constant;
        self.const_literal = None;
        self.const_name = None;
        self.roles_seen.extend(other.roles_seen);
        self
    }

    pub fn negated(self) -> Lin {
        self.scale(-1.0, None, None)
    }

    /// Multiply by a known number. `literal` is the literal it was written as; `span` the whole
    /// product expression.
    pub fn scale(
        mut self,
        k: f64,
        literal: Option<Range<usize>>,
        span: Option<Range<usize>>,
    ) -> Lin {
        let single = self.terms.len() == 1;
        for t in &mut self.terms {
            if (k.abs() - 1.0).abs() > f64::EPSILON {
                t.literal = match (&t.literal, &literal) {
                    (None, Some(l)) if single && (t.coef.abs() - 1.0).abs() < f64::EPSILON => {
                        Some(l.clone())
                    }
                    _ => None,
                };
            }
            t.coef *= k;
            if let (true, Some(s)) = (single, &span) {
                t.span = s.clone();
            }
        }
        self.constant *= k;
        self.const_literal = None;
        self.const_name = None;
        self
    }

    /// A value assigned to `target`: a model state assigned to a name for it is counted as
    /// that state (`grads = 4 * n / world`); a budget is not a component, whatever it is called.
    pub fn assigned_to(self, target: &str) -> Lin {
        let part = part_of(target);
        // A count given a name for the parameters (`self.params = n`) is still a count, no
        // size of the weights.
        if part == Role::Model && self.counts_only() {
            return self;
        }
        let state = matches!(part, Role::Model | Role::Grads | Role::Optimizer);
        if state && !self.terms.iter().any(|t| t.role == Role::Gpu) {
            self.through(part)
        } else {
            self
        }
    }

    /// The role a name assigned this value holds: what its name says, unless the value says
    /// otherwise. A name for the GPU (`per_gpu`, `vram_needed`) given a model-sized need and no
    /// capacity is what training needs on it, not the GPU's memory.
    pub fn assigned_role(&self, target: &str) -> Role {
        match role_of(target) {
            Role::Gpu
                if self.is_sized()
                    && self
                        .terms
                        .iter()
                        .all(|t| t.role != Role::Gpu && t.coef > 0.0) =>
            {
                Role::Total
            }
            role => role,
        }
    }

    /// Parameter counts alone, unscaled (`n`, `n_a + n_b`): no bytes, so no part of memory.
    pub fn counts_only(&self) -> bool {
        self.constant == 0.0
            && !self.terms.is_empty()
            && self
                .terms
                .iter()
                .all(|t| t.role == Role::ParamCount && t.coef == 1.0)
    }

    /// Every term reached through a named value of role `part` counts as that component, unless
    /// the value is charged to the trainable parameters and to all of them (`total * 2 +
    /// trainable * 16`), or sums terms that already count different components (`states_gb =
    /// weights_gb + grads_gb + adam_gb`, ZeRO's "model states"): that is several parts whatever
    /// its name (weights are whole, gradients and optimizer states trainable).
    pub fn through(mut self, name_role: Role) -> Lin {
        let has = |role| self.terms.iter().any(|t| t.role == role);
        let mut parts = self
            .terms
            .iter()
            .map(|t| t.part)
            .filter(|p| p.is_component());
        let first = parts.next();
        let mixed = parts.any(|p| Some(p) != first);
        // One part is sharded one way: terms divided by different device counts (weights kept
        // whole beside states divided over the data-parallel ranks) are several parts.
        let uneven = self
            .terms
            .windows(2)
            .any(|w| w[0].device_divisors != w[1].device_divisors);
        let several = (has(Role::Trainable) && has(Role::ParamCount)) || mixed || uneven;
        if name_role.is_component() && !several {
            for t in &mut self.terms {
                t.part = name_role;
            }
        }
        self.roles_seen.push(name_role);
        self
    }

    /// Combine two lowered operands under a binary operator (`+ - * / // **`); anything else, or a
    /// product of two unknowns, is opaque.
    pub fn binary(op: &str, a: Lin, b: Lin, text: &str, span: Range<usize>) -> Lin {
        match op {
            "+" => a.plus(b),
            "-" => a.plus(b.negated()),
            "*" => {
                if b.is_constant() {
                    let lit = b.const_literal.clone();
                    let k = b.constant;
                    let mut a = a;
                    if a.is_constant() {
                        // `2 * (80e9 / 1e9)`: still in GB; `1024 * 1024 * 1024` is one
                        // divisor a fix may rewrite.
                        a.const_conversions.extend(b.const_conversions);
                        let mut lin = a.scale(k, lit, None).converted(None, k, &span, None);
                        lin.const_literal = Some(span);
                        return lin;
                    }
                    a.scale(k, lit, Some(span.clone()))
                        .converted(None, k, &span, None)
                } else if a.is_constant() {
                    let lit = a.const_literal.clone();
                    let k = a.constant;
                    b.scale(k, lit, Some(span.clone()))
                        .converted(None, k, &span, None)
                } else {
                    Lin::opaque(text, span, &[&a, &b])
                }
            }
            "/" | "//" if b.is_constant() && b.constant != 0.0 => {
                let operand = b.written_in(text, &span);
                let by = Some(b.constant);
                if a.is_constant() {
                    let mut lin = Lin::constant(a.constant / b.constant, None);
                    lin.const_conversions = a.const_conversions;
                    lin.converted(by, 1.0, &span, operand)
                } else {
                    a.scale(1.0 / b.constant, None, Some(span.clone()))
                        .converted(by, 1.0, &span, operand)
                }
            }
            // `bytes >> 30`: a division by 2^30; `1 << 30`: the divisor itself.
            ">>" if b.is_constant() && (0.0..64.0).contains(&b.constant) => {
                let by = 2f64.powf(b.constant.trunc());
                if a.is_constant() {
                    Lin::constant((a.constant / by).trunc(), None)
                } else {
                    a.scale(1.0 / by, None, Some(span.clone())).converted(
                        Some(by),
                        1.0,
                        &span,
                        None,
                    )
                }
            }
            "<<" if a.is_constant() && b.is_constant() && (0.0..64.0).contains(&b.constant) => {
                Lin::constant(a.constant * 2f64.powf(b.constant.trunc()), Some(span))
            }
            // A sum of shares divided again (`total = (w + g) / (tp * pp)` then `total /
            // world`) keeps every divisor.
            "/" | "//"
                if (a.is_bindable() || a.terms.len() == 1)
                    && !a.is_constant()
                    && b.counts_devices() =>
            {
                a.shared_by(&b, span)
            }
            // `1024**3` is one divisor as written.
            "**" if a.is_constant() && b.is_constant() => {
                Lin::constant(a.constant.powf(b.constant), Some(span))
            }
            _ => Lin::opaque(text, span, &[&a, &b]),
        }
    }

    /// A name read where its value may be known. A known number stays a symbol (its role is what
    /// rules read) carrying the value; a linear value is substituted, its terms counted as the
    /// component the name stands for; a plain alias is re-pointed here, where a fix would rewrite.
    pub fn read(name: &str, span: Range<usize>, value: Option<&Lin>) -> Lin {
        let role = role_of(name);
        let Some(value) = value.filter(|v| !v.hides_role(role)) else {
            let unit = value.and_then(Lin::common_conversion);
            let mut lin = Lin::symbol(name, span).in_unit(unit);
            if let (Some(value), [t]) = (value, lin.terms.as_mut_slice()) {
                t.over = value.one_symbol();
            }
            return lin;
        };
        // A name for the model's size (`model_gb = n_params * 2 / 1e9`) is the unit other
        // formulas count copies of the weights in: it is read as that size.
        let counts = !value.terms.is_empty()
            && value
                .terms
                .iter()
                .all(|t| t.role == Role::ParamCount && !t.opaque);
        if role == Role::Model && counts {
            let mut size = Lin::symbol(name, span).in_unit(value.common_conversion());
            if let ([t], 0.0) = (size.terms.as_mut_slice(), value.constant) {
                t.per_param = Some(value.terms.iter().map(|v| v.coef).sum());
                t.over = value.one_symbol();
            }
            return size;
        }
        if value.terms.is_empty() {
            // A running total starts at zero: nothing to count, whatever it is called. A rate
            // (`optimizer_bytes_per_param = 12`) is a multiplier, whatever it is a rate of.
            return if role == Role::Unknown || value.constant == 0.0 || names_a_rate(name) {
                let mut lin = Lin {
                    const_name: Some(name.to_string()),
                    ..value.clone()
                };
                // A number named for a part (`OPT_GB=28`) is that part, folded in.
                let part = part_of(name);
                if value.constant != 0.0 && !names_a_rate(name) && part.is_component() {
                    lin.roles_seen.push(part);
                }
                lin
            } else {
                Lin::known(name, span, value.constant).in_unit(value.common_conversion())
            };
        }
        // A bare count read through a name for the parameters (`self.params`) stays a count.
        let part = match part_of(name) {
            Role::Model if value.counts_only() => Role::Unknown,
            part => part,
        };
        let mut lin = value.clone().through(part);
        for t in lin.terms.iter_mut().filter(|t| t.conversion.is_some()) {
            t.via.get_or_insert_with(|| name.to_string());
        }
        if let [t] = lin.terms.as_mut_slice() {
            if t.coef == 1.0 && lin.constant == 0.0 {
                t.symbol_span = span.clone();
                t.span = span;
                // A derived value takes the first name that holds it.
                if t.derived {
                    t.symbol = name.to_string();
                    t.derived = false;
                }
            }
        }
        lin
    }

    /// The one symbol every term is a known multiple of (`4 * layer_params / 2**30`).
    fn one_symbol(&self) -> Option<String> {
        let first = self.terms.first()?;
        self.terms
            .iter()
            .all(|t| t.symbol == first.symbol && !t.opaque)
            .then(|| first.symbol.clone())
    }

    /// The literal this constant is, as written inside `text` (which spans `span`): a divisor
    /// a fix may rewrite in place. A named constant (`/ GB`) is not rewritten there.
    fn written_in(&self, text: &str, span: &Range<usize>) -> Option<(String, Range<usize>)> {
        if let Some(name) = &self.const_name {
            // Named for the message; no span, so no fix rewrites the constant's uses.
            return Some((name.clone(), 0..0));
        }
        let lit = self.const_literal.clone()?;
        if lit.start < span.start || lit.end > span.end {
            return None;
        }
        let inner = text.get(lit.start - span.start..lit.end - span.start)?;
        Some((inner.to_string(), lit))
    }

    /// A name read as a symbol that holds a value converted to a unit: the symbol keeps it.
    pub fn in_unit(mut self, unit: Option<Conversion>) -> Lin {
        if let ([t], Some(unit)) = (self.terms.as_mut_slice(), unit) {
            if t.conversion.is_none() {
                t.via.get_or_insert_with(|| t.symbol.clone());
                t.conversion = Some(unit);
            }
        }
        self
    }

    /// A single count of devices (`world_size`, `(tp * pp)`).
    pub fn counts_devices(&self) -> bool {
        matches!(self.terms.as_slice(), [t] if t.role == Role::Devices && t.coef == 1.0 && t.divided_by.is_none())
            && self.constant == 0.0
    }

    /// A count of devices derived from what it counts, not named for it.
    pub fn devices(text: &str, span: Range<usize>, kind: DeviceCount) -> Lin {
        let mut lin = Lin::derived(text, span, Role::Devices);
        if let Some(t) = lin.terms.first_mut() {
            t.devices = Some(kind);
        }
        lin
    }

    /// A value whose role is known from what it is derived from, written as `text`.
    pub fn derived(text: &str, span: Range<usize>, role: Role) -> Lin {
        let cut = crate::source::floor_char_boundary(text, OPAQUE_TEXT.min(text.len()));
        let mut lin = Lin::named(&text[..cut], span, role);
        if let Some(t) = lin.terms.first_mut() {
            t.derived = true;
        }
        lin
    }

    /// What a single count of devices counts: derived, or read from its name.
    pub fn device_kind(&self) -> Option<DeviceCount> {
        match self.terms.as_slice() {
            [t] if t.role == Role::Devices => t.devices.or_else(|| device_count(&t.symbol)),
            _ => None,
        }
    }

    /// Each term divided by a device count: a per-device share.
    fn shared_by(mut self, devices: &Lin, span: Range<usize>) -> Lin {
        let by = devices.terms.first().map(|t| t.symbol.clone());
        let kind = devices.device_kind();
        let single = self.terms.len() == 1;
        for t in &mut self.terms {
            t.opaque = true;
            t.literal = None;
            t.divided_by = by.clone();
            t.divided_kind = kind;
            t.divided_at = Some(span.clone());
            t.device_divisors.extend(kind);
            if single {
                t.span = span.clone();
            }
        }
        self.constant = 0.0;
        self.const_literal = None;
        self.const_name = None;
        self.roles_seen.push(Role::Devices);
        self
    }

    /// Every term's value is known up to its symbols: safe to substitute for a name.
    pub fn is_linear(&self) -> bool {
        self.terms.iter().all(|t| !t.opaque)
    }

    /// Worth substituting for a name: linear, or per-device shares whose divisors a later
    /// formula must see (`per_gpu_mem = mem / world_size; total = per_gpu_mem + ...`).
    pub fn is_bindable(&self) -> bool {
        self.terms
            .iter()
            .all(|t| !t.opaque || t.divided_by.is_some())
    }

    /// Sized by the model: the only expressions memory rules read.
    pub fn is_sized(&self) -> bool {
        self.terms
            .iter()
            .any(|t| matches!(t.role, Role::Model | Role::ParamCount))
    }

    /// Whether substituting this value for a name of role `name_role` would lose what the name
    /// says: a role-less alias (`gpu_memory_gb=$1`) is better kept as the name.
    pub fn hides_role(&self, name_role: Role) -> bool {
        name_role != Role::Unknown
            && !self.terms.is_empty()
            && self.terms.iter().all(|t| t.role == Role::Unknown)
    }

    pub fn saw(&self, role: Role) -> bool {
        self.roles_seen.contains(&role) || self.terms.iter().any(|t| t.role == role)
    }
}

/// The one conversion the converted terms and constants of `lins` share, when they agree on the
/// unit.
fn common_conversion<'a>(lins: impl Iterator<Item = &'a Lin>) -> Option<Conversion> {
    let mut found: Option<&Conversion> = None;
    for lin in lins {
        let convs = lin
            .terms
            .iter()
            .filter_map(|t| t.conversion.as_ref())
            .chain(&lin.const_conversions);
        for c in convs.filter(|c| c.unit().is_some()) {
            match found {
                Some(f) if f.unit() != c.unit() => return None,
                Some(_) => {}
                None => found = Some(c),
            }
        }
    }
    found.cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_from_names() {
        assert_eq!(role_of("self.model_size_gb"), Role::Model);
        assert_eq!(role_of("available_memory_gb"), Role::Gpu);
        assert_eq!(role_of("gpu_memory_gb"), Role::Gpu);
        assert_eq!(role_of("optimizer_state_gb"), Role::Optimizer);
        assert_eq!(role_of("gradients_gb"), Role::Grads);
        assert_eq!(role_of("gradient_accumulation_steps"), Role::Unknown);
        assert_eq!(role_of("cuda_overhead_gb"), Role::Overhead);
        assert_eq!(role_of("safety_margin_gb"), Role::Overhead);
        assert_eq!(role_of("fixed_memory_gb"), Role::Total);
        assert_eq!(role_of("memory_for_batch"), Role::Activations);
        assert_eq!(role_of("n_params"), Role::ParamCount);
        assert_eq!(role_of("model_params_gb"), Role::Model);
        assert_eq!(role_of("kv_cache_gb"), Role::KvCache);
        assert_eq!(role_of("param_max_chunk_size"), Role::Unknown);
        assert_eq!(role_of("embedding_params"), Role::Unknown);
        assert_eq!(role_of("model_memory"), Role::Model);
        assert_eq!(role_of("model_size"), Role::Model);
        // Every GPU, whatever word comes first.
        assert_eq!(role_of("self.total_num_gpus"), Role::Devices);
        assert_eq!(device_count("total_world_size"), Some(DeviceCount::Total));
        assert_eq!(device_count("total_gpus"), Some(DeviceCount::Total));
    }

    #[test]
    fn scaling_keeps_the_one_literal() {
        let lin = Lin::symbol("model_gb", 0..8).scale(2.0, Some(11..12), Some(0..12));
        assert_eq!(lin.terms[0].coef, 2.0);
        assert_eq!(lin.terms[0].literal, Some(11..12));
        let twice = lin.scale(3.0, Some(15..16), None);
        assert_eq!(twice.terms[0].literal, None);
    }
}
