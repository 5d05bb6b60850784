//! MEM004 gb-gib-mismatch: decimal and binary memory units meeting in one calculation (a
//! comparison, a sum or subtraction, a value returned or printed), or a name that states the
//! binary unit for a value divided into the decimal one. The frontends judge each calculation
//! (see `frontend/units.rs` and `frontend/shell/units.rs`); this renders what they found.
//! Documentation: `rules/MEM004.toml`.

use super::{Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::facts::{DivisorSyntax, Unit, UnitClash, UnitMismatch, UnitSide};

pub struct GbGibMismatch;

fn divisor_for(u: Unit, syntax: DivisorSyntax) -> &'static str {
    match (syntax, u.binary, u.power) {
        (DivisorSyntax::Python, true, 2) => "2**20",
        (DivisorSyntax::Python, false, 2) => "1e6",
        (DivisorSyntax::Python, true, _) => "2**30",
        (DivisorSyntax::Python, false, _) => "1e9",
        // Shell arithmetic has integers only.
        (DivisorSyntax::Shell, true, 2) => "(1 << 20)",
        (DivisorSyntax::Shell, false, 2) => "1000000",
        (DivisorSyntax::Shell, true, _) => "(1 << 30)",
        (DivisorSyntax::Shell, false, _) => "1000000000",
    }
}

fn apart(u: Unit) -> &'static str {
    if u.power == 3 {
        "7.4%"
    } else {
        "4.9%"
    }
}

impl GbGibMismatch {
    /// "`need` in GB (divided by 1e9 on line 6)", or "`free_gib` in GiB (by its name)".
    fn side(cx: &Checker<'_>, s: &UnitSide) -> String {
        match &s.divisor {
            Some((divisor, at)) => format!(
                "`{}` in {} (divided by {} on line {})",
                s.what,
                s.unit.name(),
                divisor,
                cx.file.position(*at).row
            ),
            None => match s.reported {
                Some(tool) => format!("`{}` in {} (as {tool} reports it)", s.what, s.unit.name()),
                None => format!("`{}` in {} (by its name)", s.what, s.unit.name()),
            },
        }
    }

    fn render(cx: &Checker<'_>, m: &UnitMismatch) -> Diagnostic {
        let (d, b) = (&m.decimal, &m.binary);
        if let UnitClash::Named { label, fix } = &m.clash {
            let message = if *label {
                format!(
                    "printed as {} but its divisor gives {} ({} apart)",
                    b.unit.name(),
                    d.unit.name(),
                    apart(b.unit)
                )
            } else {
                format!(
                    "`{}` says {} but its divisor gives {} ({} apart)",
                    b.what,
                    b.unit.name(),
                    d.unit.name(),
                    apart(b.unit)
                )
            };
            let to = divisor_for(b.unit, m.syntax);
            let fix = fix.as_ref().map(|span| Fix {
                applicability: Applicability::Unsafe,
                message: format!("divide by {to} to get {}", b.unit.name()),
                edits: vec![Edit::replace(span.clone(), to)],
            });
            let rename = if *label {
                format!("label it {}", d.unit.name())
            } else {
                format!("name the value `_{}`", d.unit.name().to_ascii_lowercase())
            };
            return Diagnostic::new("MEM004", m.span.clone(), message)
                .with_help(format!("divide by {to} for {}, or {rename}", b.unit.name()))
                .with_fix(fix);
        }
        let (what, d, b) = (m.clash.clone(), Self::side(cx, d), Self::side(cx, b));
        let mut message = match what {
            UnitClash::Compared => format!("comparison of {d} with {b}"),
            UnitClash::Printed => format!("{d} and {b} printed as one unit"),
            _ => format!("{d} and {b} combined in one value"),
        };
        if let Some(call) = &m.call {
            message.push_str(&format!(
                ", with the arguments of the call on line {}",
                cx.file.position(call.start).row
            ));
        }
        message.push_str(&format!(": the units are {} apart", apart(m.binary.unit)));
        Diagnostic::new("MEM004", m.span.clone(), message).with_help(format!(
            "convert every value of the calculation with the same divisor ({} for {}, {} for {})",
            divisor_for(m.decimal.unit, m.syntax),
            m.decimal.unit.name(),
            divisor_for(m.binary.unit, m.syntax),
            m.binary.unit.name(),
        ))
    }
}

impl Rule for GbGibMismatch {
    fn code(&self) -> &'static str {
        "MEM004"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for m in &cx.facts.unit_mismatches {
            out.push(Self::render(cx, m));
        }
    }
}
