//! How a loss reaching a backward was scaled on its way, as far as the file shows ([`Prov`]),
//! and what that makes it ([`Scaling`]).

/// What is known of the loss that reaches a backward.
///
/// The policy: PyTorch losses default to `reduction="mean"` and Hugging Face models return mean
/// losses, so a loss is a per-micro-batch mean unless the code shows otherwise. Shows otherwise:
/// a division or a normalisation by a count on the value's path (here or in a helper that
/// returns it), a `reduction="sum"` with no later normalisation (a sum adds up across
/// micro-batches as intended), or a producer that is handed the accumulation factor or an item
/// count (it may divide inside: unknown). Gradients rescaled before the step are the loop
/// model's to see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaling {
    /// Divided by something, or normalised by a count.
    Scaled,
    /// A torch loss function, a criterion or a model output's `.loss`: a mean by default.
    Unscaled,
    /// Nothing on its path shows a division: a mean, by the policy.
    AssumedMean,
    /// Its producer may normalise (it receives the factor or a count, or it is a helper of the
    /// project that cannot be read): rules stay silent.
    Unknown,
}

impl Scaling {
    /// A loss that reaches backward as a plain per-micro-batch mean.
    pub fn is_mean(self) -> bool {
        matches!(self, Scaling::Unscaled | Scaling::AssumedMean)
    }
}

/// How a value was produced, as far as scaling goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Prov {
    Known(Scaling),
    /// Divided by this expression, as written (`loss / accum_steps`): scaled.
    DividedBy(String),
    /// Elementwise losses (`reduction="none"`): scalar only once reduced.
    PerElement,
    /// `.sum()` of a tensor: a sum of elementwise losses or of a model's outputs adds up; of a
    /// scalar loss, changes nothing.
    Summed(Box<Prov>),
    /// `.mean()` of a value.
    Averaged(Box<Prov>),
    /// Parts added, subtracted or weighted: `ce + 0.1 * aux`.
    Combined(Vec<Prov>),
    /// Values written side by side (`return loss / n, logs`): judged as their parts together,
    /// until one is unpacked (`out, logs = step(...)`).
    Tuple(Vec<Prov>),
    /// What a function imported from another module of the project returns.
    Imported {
        module: String,
        name: String,
    },
    /// While a file is read: what a function of the same file returns, given these arguments;
    /// `otherwise` when the file defines no such function.
    Local {
        callee: Callee,
        args: Vec<(Option<String>, Prov)>,
        otherwise: Box<Prov>,
        /// The element this value is of a tuple the function returns, and the tuple's length.
        pick: Option<(usize, usize)>,
    },
    /// While a file is read: a parameter of the function being read.
    Param(String),
}

/// A function or class of the file, as a call names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Callee {
    pub name: String,
    /// `self.name(...)`: a method of this class scope.
    pub class: Option<usize>,
    /// A call of an instance (`crit = MyLoss(); crit(x)`): the class's `__call__`/`forward`.
    pub instance: bool,
}

impl Prov {
    pub const SCALED: Prov = Prov::Known(Scaling::Scaled);
    pub const UNSCALED: Prov = Prov::Known(Scaling::Unscaled);
    pub const ASSUMED: Prov = Prov::Known(Scaling::AssumedMean);
    pub const UNKNOWN: Prov = Prov::Known(Scaling::Unknown);

    /// Parts added together: nested sums flattened and repeated parts kept once, so a running
    /// total (`total += part` in a loop) stays small.
    pub fn combined(parts: impl IntoIterator<Item = Prov>) -> Prov {
        let mut flat: Vec<Prov> = Vec::new();
        let push = |p: Prov, flat: &mut Vec<Prov>| {
            if !flat.contains(&p) {
                flat.push(p);
            }
        };
        for p in parts {
            match p {
                Prov::Combined(inner) => inner.into_iter().for_each(|q| push(q, &mut flat)),
                p => push(p, &mut flat),
            }
        }
        // The policy's default adds nothing to a sum that has other parts.
        if flat.len() > 1 {
            flat.retain(|p| *p != Prov::ASSUMED);
        }
        match flat.len() {
            0 => Prov::ASSUMED,
            1 => flat.pop().unwrap_or(Prov::ASSUMED),
            _ => Prov::Combined(flat),
        }
    }

    /// Judge the value. `imported` says what a helper of another module returns: `None` when the
    /// module is not part of the project (a library: the policy's mean applies).
    pub fn scaling(&self, imported: &dyn Fn(&str, &str) -> Option<Scaling>) -> Scaling {
        match self {
            Prov::Known(s) => *s,
            Prov::DividedBy(_) => Scaling::Scaled,
            // A backward of an unreduced tensor needs a gradient argument: nothing to judge.
            Prov::PerElement => Scaling::Unknown,
            Prov::Summed(inner) => match inner.scaling(imported) {
                Scaling::AssumedMean => Scaling::Unknown,
                s => s,
            },
            Prov::Averaged(inner) => match **inner {
                Prov::PerElement => Scaling::Unscaled,
                ref p => p.scaling(imported),
            },
            Prov::Combined(parts) | Prov::Tuple(parts) => {
                let all: Vec<Scaling> = parts.iter().map(|p| p.scaling(imported)).collect();
                if all.contains(&Scaling::Scaled) {
                    Scaling::Scaled
                } else if all.contains(&Scaling::Unknown) {
                    Scaling::Unknown
                } else if all.contains(&Scaling::Unscaled) {
                    Scaling::Unscaled
                } else {
                    Scaling::AssumedMean
                }
            }
            Prov::Imported { module, name } => {
                imported(module, name).unwrap_or(Scaling::AssumedMean)
            }
            Prov::Local { otherwise, .. } => otherwise.scaling(imported),
            Prov::Param(_) => Scaling::AssumedMean,
        }
    }

    /// The modules of the project this value's judgement depends on.
    pub fn imports(&self, out: &mut Vec<(String, String)>) {
        match self {
            Prov::Imported { module, name } => out.push((module.clone(), name.clone())),
            Prov::Summed(p) | Prov::Averaged(p) => p.imports(out),
            Prov::Combined(parts) | Prov::Tuple(parts) => parts.iter().for_each(|p| p.imports(out)),
            Prov::Local { otherwise, .. } => otherwise.imports(out),
            Prov::Known(_) | Prov::PerElement | Prov::Param(_) | Prov::DividedBy(_) => {}
        }
    }

    /// What the value was divided by on its way, as written.
    pub fn divisors<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Prov::DividedBy(d) => out.push(d),
            Prov::Summed(p) | Prov::Averaged(p) => p.divisors(out),
            Prov::Combined(parts) | Prov::Tuple(parts) => {
                parts.iter().for_each(|p| p.divisors(out))
            }
            Prov::Local { otherwise, .. } => otherwise.divisors(out),
            _ => {}
        }
    }

    /// Element `i` of a value unpacked into `n` names: of a call of a function of the file, the
    /// element of what it returns, picked once that is known; else the whole value.
    pub fn element(self, i: usize, n: usize) -> Prov {
        match self {
            Prov::Local {
                callee,
                args,
                otherwise,
                pick: None,
            } => Prov::Local {
                callee,
                args,
                otherwise,
                pick: Some((i, n)),
            },
            p => p,
        }
    }

    /// Divided by something on its way.
    pub fn divided(&self) -> bool {
        matches!(self, Prov::Known(Scaling::Scaled) | Prov::DividedBy(_))
    }
}
