//! Memory units in shell arithmetic (MEM004), judged per calculation as Python's are (see
//! `frontend/units.rs`): the unit a value is in, from the divisions that brought it down from
//! bytes (`/ 1000000000`, `/ 1024 / 1024 / 1024`, `/ (1024 ** 3)`, `/ (1 << 30)`, `>> 30`), from
//! a variable or a function's output whose unit is known, or from `nvidia-smi`, which reports
//! MiB (times 1024 twice, bytes again). What MEM004 reports: a name that states the binary unit
//! for a value divided into the decimal one, and a decimal and a binary value that meet in one
//! comparison or one sum or subtraction. A name that states a unit is weaker evidence, read only
//! for a side of a comparison whose value shows no unit.

use super::Walker;
use crate::expr::units::{unit_of_name, Unit};
use crate::expr::{role_of, Role};
use crate::facts::{DivisorSyntax, UnitClash, UnitMismatch, UnitSide};
use crate::frontend::fields::ShField;
use crate::frontend::parse_number;
use crate::frontend::units;
use std::ops::Range;
use tree_sitter::Node;

/// A value's scale against bytes: binary (1024) or decimal (1000) steps, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scale {
    binary: bool,
    power: u8,
}

impl Scale {
    fn unit(self) -> Option<Unit> {
        (self.power >= 2).then_some(Unit {
            binary: self.binary,
            power: self.power,
        })
    }
}

/// A value's scale, and the division that gave it, when one did.
#[derive(Debug, Clone)]
pub(super) struct Scaled {
    scale: Scale,
    from: Option<Division>,
}

/// Where a value came down to its unit.
#[derive(Debug, Clone)]
struct Division {
    /// The value as a message names it: the variable that holds it, or what was divided.
    what: String,
    /// The divisor as written (`1000000000`, `1024 / 1024 / 1024`).
    divisor: String,
    /// Where the division is.
    at: usize,
    /// The divisor as one operand that gives the whole unit from bytes: what a fix replaces.
    operand: Option<Range<usize>>,
}

impl Scaled {
    fn side(&self, fallback: &str) -> Option<UnitSide> {
        let unit = self.scale.unit()?;
        Some(match &self.from {
            Some(d) => UnitSide {
                unit,
                what: d.what.clone(),
                divisor: Some((d.divisor.clone(), d.at)),
                reported: None,
            },
            None => UnitSide {
                unit,
                what: fallback.to_string(),
                divisor: None,
                reported: Some("nvidia-smi"),
            },
        })
    }
}

/// The steps a divisor takes: `1024^k` or `1000^k`.
fn steps(d: f64) -> Option<Scale> {
    for (base, binary) in [(1024.0, true), (1000.0, false)] {
        let mut x: f64 = 1.0;
        for k in 1..=4u8 {
            x *= base;
            if (d - x).abs() <= x * 1e-9 {
                return Some(Scale { binary, power: k });
            }
        }
    }
    None
}

/// A divisor as a message writes it: without the parentheses around it.
fn bare(text: &str) -> &str {
    let t = text.trim();
    match t.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
        Some(inner) if !inner.contains(['(', ')']) => inner.trim(),
        _ => t,
    }
}

impl<'s> Walker<'s> {
    /// A number written as constant arithmetic (`1073741824`, `(1024 * 1024 * 1024)`, `2**30`,
    /// `(1 << 30)`).
    fn constant(&self, node: Node, depth: usize) -> Option<f64> {
        if depth > 16 {
            return None;
        }
        match node.kind() {
            "number" | "word" => parse_number(self.text(node)),
            "parenthesized_expression" => self.constant(node.named_child(0)?, depth + 1),
            "binary_expression" => {
                let a = self.constant(node.field("left")?, depth + 1)?;
                let b = self.constant(node.field("right")?, depth + 1)?;
                match self.text(node.field("operator")?) {
                    "*" => Some(a * b),
                    "**" => Some(a.powf(b)),
                    "+" => Some(a + b),
                    "<<" if (0.0..63.0).contains(&b) => Some(a * 2f64.powf(b)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// A divisor: a constant, or a variable that holds a unit of a million bytes or more on
    /// every path (`GB=1000000000`, then `/ GB`).
    fn divisor(&self, node: Node) -> Option<f64> {
        self.constant(node, 0).or_else(|| {
            let held = self.vars.int(self.variable_of(node)?)? as f64;
            steps(held).is_some_and(|s| s.power >= 2).then_some(held)
        })
    }

    /// The name a word reads (`x`, `$x`, `${x}`, `"$x"`), if it is one variable.
    fn variable_of(&self, node: Node) -> Option<&'s str> {
        match node.kind() {
            "variable_name" => Some(self.text(node)),
            "simple_expansion" | "expansion" => node
                .named_child(0)
                .filter(|n| n.kind() == "variable_name")
                .map(|n| self.text(n)),
            "string" if node.named_child_count() == 1 => self.variable_of(node.named_child(0)?),
            _ => None,
        }
    }

    /// The scale of a value: `None` when it is unknown or a plain count.
    pub(super) fn scale_of(&self, node: Node, depth: usize) -> Option<Scaled> {
        if depth > 32 {
            return None;
        }
        match node.kind() {
            "parenthesized_expression" | "arithmetic_expansion" | "string" => {
                let mut c = node.walk();
                let kids: Vec<Node> = node.named_children(&mut c).collect();
                match kids.as_slice() {
                    [one] => self.scale_of(*one, depth + 1),
                    _ => None,
                }
            }
            "variable_name" | "simple_expansion" | "expansion" => {
                self.scales.get(self.variable_of(node)?).cloned()
            }
            "command_substitution" => {
                let text = self.text(node);
                if text.contains("nvidia-smi") && text.contains("memory.") {
                    return Some(Scaled {
                        scale: Scale {
                            binary: true,
                            power: 2,
                        },
                        from: None,
                    });
                }
                let cmd = node.named_child(0).filter(|c| c.kind() == "command")?;
                let name = self.text(cmd.field("name")?);
                if let Some(s) = self.scales.get(format!("{name}()").as_str()) {
                    return Some(s.clone());
                }
                let arg = self.printed(cmd)?;
                self.scale_of(arg, depth + 1)
            }
            "binary_expression" => {
                let (l, r) = (node.field("left")?, node.field("right")?);
                match self.text(node.field("operator")?) {
                    "/" => self.divided(node, l, r, depth),
                    ">>" => {
                        let power = match self.constant(r, 0)? {
                            30.0 => 3,
                            20.0 => 2,
                            _ => return None,
                        };
                        self.scale_of(l, depth + 1).is_none().then(|| Scaled {
                            scale: Scale {
                                binary: true,
                                power,
                            },
                            from: Some(Division {
                                what: self.text(l).to_string(),
                                divisor: format!("1 << {}", 10 * power),
                                at: node.start_byte(),
                                operand: None,
                            }),
                        })
                    }
                    "+" | "-" => {
                        let (a, b) = (self.scale_of(l, depth + 1), self.scale_of(r, depth + 1));
                        match (a, b) {
                            (Some(x), Some(y)) if x.scale == y.scale => Some(x),
                            (Some(x), None) | (None, Some(x)) => Some(x),
                            _ => None,
                        }
                    }
                    "*" => {
                        let (x, k) = match (self.constant(l, 0), self.constant(r, 0)) {
                            (None, Some(k)) => (l, k),
                            (Some(k), None) => (r, k),
                            _ => return None,
                        };
                        let s = self.scale_of(x, depth + 1)?;
                        // Times 1024 undoes a division by 1024: MiB times 1024 twice is bytes.
                        match steps(k) {
                            Some(st)
                                if st.binary == s.scale.binary && st.power <= s.scale.power =>
                            {
                                Some(Scaled {
                                    scale: Scale {
                                        binary: s.scale.binary,
                                        power: s.scale.power - st.power,
                                    },
                                    from: None,
                                })
                            }
                            _ => Some(s),
                        }
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// `l / r`, with `r` a constant: the unit `l` divided by it is in.
    fn divided(&self, node: Node, l: Node, r: Node, depth: usize) -> Option<Scaled> {
        let by = steps(self.divisor(r)?)?;
        let before = self.scale_of(l, depth + 1);
        let from = match &before {
            Some(s) => s.scale,
            // Bytes, unless it is a number itself or counts parameters (`PARAMS / 1000000000`
            // is billions of them).
            None if self.constant(l, 0).is_none() && !self.counts(l) => Scale {
                binary: by.binary,
                power: 0,
            },
            None => return None,
        };
        if from.power != 0 && from.binary != by.binary {
            return None;
        }
        let written = bare(self.text(r));
        // A chain of divisions (`b / 1024 / 1024 / 1024`) is one conversion.
        let chained = (l.kind() == "binary_expression")
            .then(|| before.as_ref().and_then(|s| s.from.clone()))
            .flatten();
        let (what, divisor) = match chained {
            Some(d) => (d.what, format!("{} / {written}", d.divisor)),
            // A value already in a unit (`TOTAL_MIB / 1024`) is named with its division.
            None if from.power != 0 => (self.text(node).to_string(), written.to_string()),
            None => (self.text(l).to_string(), written.to_string()),
        };
        Some(Scaled {
            scale: Scale {
                binary: by.binary,
                power: from.power + by.power,
            },
            from: Some(Division {
                what,
                divisor,
                at: node.start_byte(),
                operand: (from.power == 0 && by.power >= 2).then(|| r.byte_range()),
            }),
        })
    }

    /// A word that counts parameters, not bytes.
    fn counts(&self, node: Node) -> bool {
        self.variable_of(node).is_some_and(|n| {
            role_of(n) == Role::ParamCount
                || matches!(
                    n.to_ascii_lowercase().as_str(),
                    "params" | "parameters" | "n_params" | "num_params" | "params_b"
                )
        })
    }

    /// `target=value`: the unit it holds, a name that states the other one, and decimal and
    /// binary values added or subtracted in it.
    pub(super) fn note_unit(&mut self, target: &str, value: Node) {
        self.combined(value, 0);
        let Some(scaled) = self.scale_of(value, 0) else {
            self.scales.remove(target);
            return;
        };
        let mut held = scaled.clone();
        if let Some(d) = held.from.as_mut() {
            d.what = target.to_string();
        }
        self.scales.insert(target.to_string(), held);
        let (Some(named), Some(divided), Some(d)) =
            (unit_of_name(target), scaled.scale.unit(), &scaled.from)
        else {
            return;
        };
        // A `_gb` name for a binary value is the loose label DeepSpeed and accelerate print:
        // judged only where it meets a decimal value.
        if !named.binary || divided.binary || named.power != divided.power {
            return;
        }
        let span = match value.kind() {
            "arithmetic_expansion" => value.named_child(0).unwrap_or(value).byte_range(),
            _ => value.byte_range(),
        };
        let fix = d
            .operand
            .clone()
            .filter(|r| r.start >= span.start && r.end <= span.end);
        let m = UnitMismatch {
            span: span.clone(),
            clash: UnitClash::Named { label: false, fix },
            decimal: UnitSide {
                unit: divided,
                what: d.what.clone(),
                divisor: Some((d.divisor.clone(), d.at)),
                reported: None,
            },
            binary: UnitSide {
                unit: named,
                what: target.to_string(),
                divisor: None,
                reported: None,
            },
            call: None,
            syntax: DivisorSyntax::Shell,
        };
        units::push(&mut self.facts, m);
    }

    /// Decimal and binary values added or subtracted anywhere in an arithmetic value. The same
    /// bytes converted both ways on purpose (`b / 1000000000 - b / 1073741824`) are no mix.
    pub(super) fn combined(&mut self, node: Node, depth: usize) {
        if depth > 32 {
            return;
        }
        match node.kind() {
            "arithmetic_expansion" | "parenthesized_expression" | "string" => {
                let mut c = node.walk();
                let kids: Vec<Node> = node.named_children(&mut c).collect();
                for k in kids {
                    self.combined(k, depth + 1);
                }
            }
            "binary_expression" => {
                let (Some(l), Some(r)) = (node.field("left"), node.field("right")) else {
                    return;
                };
                self.combined(l, depth + 1);
                self.combined(r, depth + 1);
                let op = node.field("operator").map(|o| self.text(o));
                if matches!(op, Some("+" | "-")) {
                    self.meet(l, r, node.byte_range(), UnitClash::Combined, false);
                }
            }
            _ => {}
        }
    }

    /// The two sides of a comparison, in the same kind of unit, one decimal and one binary.
    pub(super) fn compare_units(&mut self, l: Node, r: Node, span: Range<usize>) {
        self.combined(l, 0);
        self.combined(r, 0);
        self.meet(l, r, span, UnitClash::Compared, true);
    }

    /// `l` and `r` meet in one calculation: a mix when one is decimal and the other binary, of
    /// one power. With `weak`, a side that shows no unit may state the binary one by its name
    /// (`[ "$need" -gt "$FREE_GIB" ]`, where nothing shows how `FREE_GIB` was made) against a
    /// decimal side that was divided.
    fn meet(&mut self, l: Node, r: Node, span: Range<usize>, clash: UnitClash, weak: bool) {
        let side = |w: &Self, n: Node| -> Option<(UnitSide, bool)> {
            match w.scale_of(n, 0) {
                Some(s) => s
                    .side(w.variable_of(n).unwrap_or(w.text(n)))
                    .map(|side| (side, true)),
                None if weak => {
                    let name = w.variable_of(n)?;
                    let unit = unit_of_name(name)?;
                    Some((
                        UnitSide {
                            unit,
                            what: name.to_string(),
                            divisor: None,
                            reported: None,
                        },
                        false,
                    ))
                }
                None => None,
            }
        };
        let (Some(a), Some(b)) = (side(self, l), side(self, r)) else {
            return;
        };
        if a.0.unit.power != b.0.unit.power || a.0.unit.binary == b.0.unit.binary {
            return;
        }
        let ((decimal, _), (binary, binary_shown)) = if a.0.unit.binary { (b, a) } else { (a, b) };
        // A name alone never decides: the decimal side must be divided, and a named side binary.
        if decimal.divisor.is_none() {
            return;
        }
        if !binary_shown && !binary.unit.binary {
            return;
        }
        if decimal.divisor.is_some() && decimal.what == binary.what && binary.divisor.is_some() {
            return;
        }
        let m = UnitMismatch {
            span,
            clash,
            decimal,
            binary,
            call: None,
            syntax: DivisorSyntax::Shell,
        };
        units::push(&mut self.facts, m);
    }
}
