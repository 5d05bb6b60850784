//! MEM004 gb-gib-mismatch: decimal and binary memory units mixed, in a name that states one unit
//! while its divisor gives the other, or in a comparison whose sides were converted with different
//! divisors. Documentation: `rules/MEM004.toml`.

use super::{Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::facts::Unit;

pub struct GbGibMismatch;

fn divisor_for(u: Unit) -> &'static str {
    match (u.binary, u.power) {
        (true, 2) => "2**20",
        (false, 2) => "1e6",
        (true, _) => "2**30",
        (false, _) => "1e9",
    }
}

impl Rule for GbGibMismatch {
    fn code(&self) -> &'static str {
        "MEM004"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        for c in &cx.facts.unit_conversions {
            // `_gb` for a 2**30 value is a common loose label; it is a bug where the file also
            // converts with 1e9, so both conventions meet. `_gib` for a 1e9 value is always one.
            let both = cx.facts.units_used.contains(&Unit {
                binary: !c.divided.binary,
                power: c.divided.power,
            });
            if !c.named.binary && !both {
                continue;
            }
            let message = format!(
                "`{}` says {} but its divisor gives {} ({} apart)",
                c.target,
                c.named.name(),
                c.divided.name(),
                if c.named.power == 3 { "7.4%" } else { "4.9%" },
            );
            let fix = c.divisor.as_ref().map(|(_, span)| Fix {
                applicability: Applicability::Unsafe,
                message: format!(
                    "divide by {} to get {}",
                    divisor_for(c.named),
                    c.named.name()
                ),
                edits: vec![Edit::replace(span.clone(), divisor_for(c.named))],
            });
            out.push(
                Diagnostic::new("MEM004", c.span.clone(), message)
                    .with_help(format!(
                        "divide by {} for {}, or name the value `_{}`",
                        divisor_for(c.named),
                        c.named.name(),
                        c.divided.name().to_ascii_lowercase()
                    ))
                    .with_fix(fix),
            );
        }
        for c in &cx.facts.unit_comparisons {
            out.push(
                Diagnostic::new(
                    "MEM004",
                    c.span.clone(),
                    format!(
                        "comparison of a value in {} with a value in {}: the units are {} apart",
                        c.left.name(),
                        c.right.name(),
                        if c.left.power == 3 { "7.4%" } else { "4.9%" },
                    ),
                )
                .with_help("convert both sides with the same divisor (1e9 for GB, 2**30 for GiB)"),
            );
        }
    }
}
