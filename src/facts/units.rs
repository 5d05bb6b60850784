//! The facts of a unit mismatch (MEM004).

use std::ops::Range;

pub use crate::expr::units::Unit;

/// Memory values in a decimal and a binary unit that meet in one calculation (MEM004).
#[derive(Debug, Clone)]
pub struct UnitMismatch {
    pub span: Range<usize>,
    pub clash: UnitClash,
    /// The value in the decimal unit and the one in the binary unit (of the same power).
    pub decimal: UnitSide,
    pub binary: UnitSide,
    /// The call of the helper whose arguments bring the two units together, when the
    /// calculation was judged with them.
    pub call: Option<Range<usize>>,
    /// The language a fix or a help writes a divisor in.
    pub syntax: DivisorSyntax,
}

#[derive(Debug, Clone, PartialEq)]
pub enum UnitClash {
    /// A name or a printed label states the binary unit while the divisor gives the decimal
    /// one (`free_gib = free / 1e9`): `binary` is the name, `decimal` the value. `fix` is the
    /// divisor as one operand, which a fix rewrites.
    Named {
        label: bool,
        fix: Option<Range<usize>>,
    },
    /// The two sides of a comparison.
    Compared,
    /// Added to or subtracted from each other.
    Combined,
    /// Printed together as one unit.
    Printed,
}

/// One side of a mismatch.
#[derive(Debug, Clone)]
pub struct UnitSide {
    pub unit: Unit,
    /// The value as the message names it: the name that holds it, or what was divided.
    pub what: String,
    /// The divisor as written and where the conversion is, when it was divided; `None` where
    /// only a name states the unit.
    pub divisor: Option<(String, usize)>,
    /// The tool that reports the value in its unit (`nvidia-smi` reports MiB), where no divisor
    /// gives it.
    pub reported: Option<&'static str>,
}

/// The language a fix writes a divisor in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DivisorSyntax {
    Python,
    /// Shell arithmetic: integers only.
    Shell,
}
