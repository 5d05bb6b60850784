//! Memory units as values carry them (MEM004): the unit a constant division converts bytes to,
//! the unit a name states, and whether a name reads as bytes of memory. A term of a [`super::Lin`]
//! keeps the [`Conversion`] its value went through, so a unit follows the value through names,
//! helpers and bundles like the rest of its arithmetic.

use std::ops::Range;

/// A memory unit: decimal (GB = 10^9) or binary (GiB = 2^30), at a power of 1000/1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub binary: bool,
    /// 2 for MB/MiB, 3 for GB/GiB.
    pub power: u8,
}

impl Unit {
    pub const GB: Unit = Unit {
        binary: false,
        power: 3,
    };
    pub const GIB: Unit = Unit {
        binary: true,
        power: 3,
    };
    pub const MB: Unit = Unit {
        binary: false,
        power: 2,
    };
    pub const MIB: Unit = Unit {
        binary: true,
        power: 2,
    };

    pub fn name(self) -> &'static str {
        match (self.binary, self.power) {
            (true, 2) => "MiB",
            (false, 2) => "MB",
            (true, _) => "GiB",
            (false, _) => "GB",
        }
    }
}

/// Bytes divided by constants on the way to a unit, as a term carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    /// The product of the constant divisors applied since the value was bytes.
    pub divisor: f64,
    /// The division (multiplication by `1e-9`, shift) that completed it.
    pub at: Range<usize>,
    /// The divisor as written and where, when one operand written at `at` gives the whole
    /// unit: what a fix replaces.
    pub operand: Option<(String, Range<usize>)>,
}

impl Conversion {
    pub fn unit(&self) -> Option<Unit> {
        unit_of_divisor(self.divisor)
    }

    /// `old` divided by the constant `by` at `at` (`operand`: the divisor as written there).
    /// Divisions by 1000 or 1024 accumulate (`/ 1024 / 1024 / 1024`); a value already in a
    /// unit stays in it when halved or split (`free_gib / 2`).
    pub fn divide(
        old: Option<&Conversion>,
        by: f64,
        at: Range<usize>,
        operand: Option<(String, Range<usize>)>,
    ) -> Option<Conversion> {
        if let Some(c) = old.and_then(|c| c.between_units(1.0 / by, &at)) {
            return Some(c);
        }
        if !by.is_finite() || by <= 1.0 {
            return old.cloned();
        }
        let before = old.map_or(1.0, |c| c.divisor);
        let total = before * by;
        if unit_of_divisor(total).is_some() {
            let single = old.is_none_or(|c| c.unit().is_none() && c.divisor == 1.0);
            return Some(Conversion {
                divisor: total,
                at,
                operand: operand.filter(|_| single),
            });
        }
        if unit_of_divisor(by).is_some() {
            return Some(Conversion {
                divisor: by,
                at,
                operand,
            });
        }
        if old.is_some_and(|c| c.unit().is_some()) || !prefix_step(by) {
            return old.cloned();
        }
        Some(Conversion {
            divisor: total,
            at,
            operand: None,
        })
    }

    /// A value in one unit times the ratio to the other unit of the same power, as a rounded
    /// literal may write it (`act_gib * 1.0737` is GB, `free_gb * 0.9313` GiB): that unit.
    fn between_units(&self, k: f64, at: &Range<usize>) -> Option<Conversion> {
        let unit = self.unit()?;
        let other = match (unit.binary, unit.power) {
            (true, 3) => 1e9,
            (false, 3) => 1_073_741_824.0,
            (true, 2) => 1e6,
            (false, 2) => 1_048_576.0,
            _ => return None,
        };
        let divisor = self.divisor / k;
        ((divisor - other).abs() <= other * 1e-3).then(|| Conversion {
            divisor: other,
            at: at.clone(),
            operand: None,
        })
    }

    /// `old` multiplied by the constant `k`: a factor below one divides (`* 1e-9`); a prefix
    /// factor undoes a division (`gb * 1e9` is bytes again); other factors keep the unit
    /// (`model_gb * 4`).
    pub fn multiply(old: Option<&Conversion>, k: f64, at: Range<usize>) -> Option<Conversion> {
        if let Some(c) = old.and_then(|c| c.between_units(k, &at)) {
            return Some(c);
        }
        if k > 0.0 && k < 1.0 {
            return Conversion::divide(old, 1.0 / k, at, None);
        }
        match old {
            Some(c) if c.divisor > 1.0 && (prefix_step(k) || unit_of_divisor(k).is_some()) => {
                let divisor = c.divisor / k;
                (divisor > 1.0 + 1e-9).then_some(Conversion {
                    divisor,
                    at,
                    operand: None,
                })
            }
            _ => old.cloned(),
        }
    }
}

/// A power of 1000 or 1024 up to the third: a step between byte prefixes.
fn prefix_step(x: f64) -> bool {
    [1e3, 1e6, 1e9, 1024.0, 1_048_576.0, 1_073_741_824.0]
        .iter()
        .any(|p| (x - p).abs() <= p * 1e-9)
}

/// The unit a division by `divisor` converts bytes to: 10^9 (GB), 2^30 (GiB), 10^6 (MB), 2^20
/// (MiB).
pub fn unit_of_divisor(divisor: f64) -> Option<Unit> {
    let near = |x: f64| (divisor - x).abs() <= x * 1e-9;
    [
        (1e9, Unit::GB),
        (1_073_741_824.0, Unit::GIB),
        (1e6, Unit::MB),
        (1_048_576.0, Unit::MIB),
    ]
    .into_iter()
    .find_map(|(d, unit)| near(d).then_some(unit))
}

/// The unit a name states: a `gb`, `gib`, `mb` or `mib` word of its last segment, between
/// underscores in any case (`free_gib`, `TOTAL_GB`) or as a camel-case word (`freeGiB`,
/// `totalGB`, `memMiB`). Quotes around a dict key are ignored.
pub fn unit_of_name(name: &str) -> Option<Unit> {
    let name = name.trim_matches(['"', '\'']);
    let last = name.rsplit('.').next().unwrap_or(name);
    last.split(['_', '-', ' '])
        .find_map(|word| unit_word(&word.to_ascii_lowercase()).or_else(|| camel_unit(word)))
}

/// A unit written as a word (`GB`, `gib`), in any case.
pub fn unit_word(lower: &str) -> Option<Unit> {
    match lower {
        "gb" => Some(Unit::GB),
        "gib" => Some(Unit::GIB),
        "mb" => Some(Unit::MB),
        "mib" => Some(Unit::MIB),
        _ => None,
    }
}

/// A unit written as a word of a camel-case name: it starts the name or follows a lowercase
/// letter or a digit, and ends the name or meets the next word's capital (`freeGiB`,
/// `GBPerDevice`), so `numGbytes` and `MBart` state none. A word in capitals only is not camel
/// case (`GBS` is a global batch size).
fn camel_unit(word: &str) -> Option<Unit> {
    const SPELLINGS: &[(&str, Unit)] = &[
        ("GiB", Unit::GIB),
        ("GIB", Unit::GIB),
        ("Gib", Unit::GIB),
        ("GB", Unit::GB),
        ("Gb", Unit::GB),
        ("MiB", Unit::MIB),
        ("MIB", Unit::MIB),
        ("Mib", Unit::MIB),
        ("MB", Unit::MB),
        ("Mb", Unit::MB),
    ];
    let bytes = word.as_bytes();
    if !bytes.iter().any(u8::is_ascii_lowercase) {
        return None;
    }
    for (at, _) in word.match_indices(['G', 'M']) {
        let starts = at == 0
            || bytes
                .get(at - 1)
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !starts {
            continue;
        }
        for (spelling, unit) in SPELLINGS {
            let end = at + spelling.len();
            let ends = match bytes.get(end) {
                None => true,
                Some(b) => b.is_ascii_uppercase(),
            };
            if ends && word.get(at..end) == Some(*spelling) {
                return Some(*unit);
            }
        }
    }
    None
}

/// Whether a name or an expression, by its words, holds bytes of memory: `mem`, `byte`,
/// `alloc`, `reserved`, `vram` (`free_mem`, `total_bytes`, `torch.cuda.memory_allocated()`,
/// `props.total_memory`). Billions of parameters or tokens (`num_params / 1e9`) say none of
/// these.
pub fn names_bytes(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["mem", "byte", "alloc", "reserved", "vram"]
        .iter()
        .any(|w| lower.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_state_units_in_every_casing() {
        for (name, unit) in [
            ("free_gib", Some(Unit::GIB)),
            ("self.budget_gb", Some(Unit::GB)),
            ("TOTAL_GB", Some(Unit::GB)),
            ("total_GB", Some(Unit::GB)),
            ("freeGiB", Some(Unit::GIB)),
            ("totalGB", Some(Unit::GB)),
            ("GBPerDevice", Some(Unit::GB)),
            ("memMiB", Some(Unit::MIB)),
            ("\"free_gib\"", Some(Unit::GIB)),
            ("bytes_to_gb", Some(Unit::GB)),
            ("numGbytes", None),
            ("MBart", None),
            ("GBS", None),
            ("gibberish", None),
            ("mem_bytes", None),
            ("num_params_b", None),
        ] {
            assert_eq!(unit_of_name(name), unit, "{name}");
        }
    }

    #[test]
    fn divisions_accumulate_into_units() {
        let k = Conversion::divide(None, 1024.0, 0..1, None);
        let m = Conversion::divide(k.as_ref(), 1024.0, 0..2, None);
        let g = Conversion::divide(m.as_ref(), 1024.0, 0..3, None);
        assert_eq!(g.as_ref().and_then(Conversion::unit), Some(Unit::GIB));
        let half = Conversion::divide(g.as_ref(), 2.0, 0..4, None);
        assert_eq!(half.as_ref().and_then(Conversion::unit), Some(Unit::GIB));
        let gb = Conversion::multiply(None, 1e-9, 0..1);
        assert_eq!(gb.as_ref().and_then(Conversion::unit), Some(Unit::GB));
        assert_eq!(Conversion::multiply(gb.as_ref(), 1e9, 0..2), None);
        assert_eq!(Conversion::divide(None, 2.0, 0..1, None), None);
        assert!(names_bytes("torch.cuda.max_memory_allocated()"));
        assert!(!names_bytes("n_params"));
    }
}
