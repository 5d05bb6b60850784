//! Counts known by their use: a number or a name multiplied by bytes for each parameter
//! (`N_BASE * 8`, `size_b * 16`) counts parameters, whatever its name says.

use super::*;

impl Valuer<'_, '_> {
    /// `x * y`, with a count known by its use read as one (see [`Valuer::counted`]). Out of
    /// line: valuing recurses through `compute`, whose frame must stay small.
    #[inline(never)]
    pub(super) fn product(
        &self,
        a: Id,
        b: Id,
        x: Lin,
        y: Lin,
        text: &str,
        span: Range<usize>,
    ) -> Lin {
        let (cx, cy) = (self.counted(a, &x, &y), self.counted(b, &y, &x));
        let (x, y) = (cx.unwrap_or(x), cy.unwrap_or(y));
        // `self.n_params * self.weight_bytes`, both known: a count times the bytes each of its
        // parameters takes.
        let (x, y) = match (bytes_each(&x, &y), bytes_each(&y, &x)) {
            (Some(v), _) => (Lin::constant(v, None), y),
            (_, Some(v)) => (x, Lin::constant(v, None)),
            _ => (x, y),
        };
        binary("*", x, y, text, span)
    }

    /// A number read through a name that says nothing of it (`N_BASE = 3_212_749_824`), times
    /// bytes for each parameter (`N_BASE * 8`): a parameter count, known by its use (see
    /// [`may_count_by_use`]).
    fn counted(&self, id: Id, lin: &Lin, other: &Lin) -> Option<Lin> {
        if !other.is_constant() || !(1.0..=MAX_BYTES_PER_PARAM).contains(&other.constant) {
            return None;
        }
        // `size_b * 16`: a name in billions by its suffix alone (`size_b`, `base_bn`), times
        // bytes for each parameter, counts parameters in billions.
        if let Some(scaled) = self.billions_by_use(id, lin) {
            return Some(scaled);
        }
        // One number as written: a product of dimensions (`152_064 * 5_120`) is a tensor's
        // size, not a model's.
        let written = |l: &Range<usize>| is_number(self.p.text(l));
        if lin.terms.is_empty() && !lin.const_literal.as_ref().is_some_and(written) {
            return None;
        }
        let (name, count, _) = named(lin)?;
        let count = count?;
        may_count_by_use(name, count)
            .then(|| Lin::known(name, self.p.span(id), count).with_role(Role::ParamCount))
    }

    /// A roleless name whose last segment says billions (`size_b`, `llm_bn`) and that holds a
    /// model's size in billions when its value is known, read as a parameter count.
    fn billions_by_use(&self, id: Id, lin: &Lin) -> Option<Lin> {
        let (name, value, role) = named(lin)?;
        if role != Role::Unknown || !billions_suffix(name) {
            return None;
        }
        let span = self.p.span(id);
        match value {
            Some(v) if v > 0.0 && v <= MAX_BILLIONS => {
                let mut known = Lin::known(name, span, v * 1e9)
                    .with_role(Role::ParamCount)
                    .scale(1e-9, None, None);
                known.roles_seen.push(Role::ParamCount);
                Some(known)
            }
            Some(_) => None,
            None => Some(
                Lin::symbol(name, span)
                    .with_role(Role::ParamCount)
                    .scale(1e-9, None, None),
            ),
        }
    }
}

/// The name a value is read through, its number when known and its role: a number folded in
/// under its name (`N_BASE = 3_212_749_824`), or one plain symbol (`n_total`, `size_b`).
fn named(lin: &Lin) -> Option<(&str, Option<f64>, Role)> {
    match lin.terms.as_slice() {
        [] => Some((
            lin.const_name.as_deref()?,
            Some(lin.constant),
            Role::Unknown,
        )),
        [t] if t.coef == 1.0 && lin.constant == 0.0 && !t.opaque => {
            Some((t.symbol.as_str(), t.value, t.role))
        }
        _ => None,
    }
}

/// A name for bytes known to hold a number (`weight_bytes = 4`, `bpp`), multiplied by a
/// parameter count: that number, the bytes each parameter takes.
fn bytes_each(lin: &Lin, count: &Lin) -> Option<f64> {
    let counts = count.terms.len() == 1 && count.terms[0].role == Role::ParamCount;
    let (name, value, _) = named(lin).filter(|_| counts && !lin.terms.is_empty())?;
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    let bytes = last
        .split('_')
        .any(|w| matches!(w, "byte" | "bytes" | "bpp"));
    value.filter(|v| bytes && (1.0..=MAX_BYTES_PER_PARAM).contains(v))
}
