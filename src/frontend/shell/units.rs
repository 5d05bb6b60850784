//! Memory units in shell arithmetic (MEM004): the unit a value is in, from the divisions that
//! brought it down from bytes (`/ 1000000000`, `/ 1024 / 1024 / 1024`, `/ (1024 ** 3)`, `>> 30`),
//! from a variable or a function's output whose unit is known, or from `nvidia-smi`, which
//! reports MiB. A name that states one unit holding the other, and a comparison of the two,
//! are what MEM004 reports.

use super::Walker;
use crate::facts::{Unit, UnitComparison, UnitConversion};
use crate::frontend::fields::ShField;
use crate::frontend::parse_number;
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

/// The unit a name states in its `_`-separated words (`NEED_GB`, `gpu_mem_gib`).
fn unit_of_name(name: &str) -> Option<Unit> {
    name.to_ascii_lowercase().split('_').find_map(|w| match w {
        "gb" => Some(Unit {
            binary: false,
            power: 3,
        }),
        "gib" => Some(Unit {
            binary: true,
            power: 3,
        }),
        "mb" => Some(Unit {
            binary: false,
            power: 2,
        }),
        "mib" => Some(Unit {
            binary: true,
            power: 2,
        }),
        _ => None,
    })
}

impl<'s> Walker<'s> {
    /// A number written as constant arithmetic (`1073741824`, `(1024 * 1024 * 1024)`, `2**30`).
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
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The scale of a value: `None` when it is unknown or a plain count.
    pub(super) fn scale_of(&self, node: Node, depth: usize) -> Option<Scale> {
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
            "variable_name" => self.scales.get(self.text(node)).copied(),
            "simple_expansion" | "expansion" => node
                .named_child(0)
                .and_then(|n| self.scales.get(self.text(n)).copied()),
            "command_substitution" => {
                let text = self.text(node);
                if text.contains("nvidia-smi") && text.contains("memory.") {
                    return Some(Scale {
                        binary: true,
                        power: 2,
                    });
                }
                let cmd = node.named_child(0).filter(|c| c.kind() == "command")?;
                let name = self.text(cmd.field("name")?);
                if let Some(s) = self.scales.get(format!("{name}()").as_str()) {
                    return Some(*s);
                }
                let arg = self.printed(cmd)?;
                self.scale_of(arg, depth + 1)
            }
            "binary_expression" => {
                let (l, r) = (node.field("left")?, node.field("right")?);
                match self.text(node.field("operator")?) {
                    "/" => {
                        let by = steps(self.constant(r, 0)?)?;
                        let from = match self.scale_of(l, depth + 1) {
                            Some(s) => s,
                            // Bytes, unless it is a number itself.
                            None if self.constant(l, 0).is_none() => Scale {
                                binary: by.binary,
                                power: 0,
                            },
                            None => return None,
                        };
                        (from.power == 0 || from.binary == by.binary).then_some(Scale {
                            binary: by.binary,
                            power: from.power + by.power,
                        })
                    }
                    ">>" => match self.constant(r, 0)? {
                        30.0 => Some(Scale {
                            binary: true,
                            power: 3,
                        }),
                        20.0 => Some(Scale {
                            binary: true,
                            power: 2,
                        }),
                        _ => None,
                    },
                    "+" | "-" => {
                        let (a, b) = (self.scale_of(l, depth + 1), self.scale_of(r, depth + 1));
                        match (a, b) {
                            (Some(x), Some(y)) if x == y => Some(x),
                            (Some(x), None) | (None, Some(x)) => Some(x),
                            _ => None,
                        }
                    }
                    "*" => match (self.constant(l, 0), self.constant(r, 0)) {
                        (None, Some(_)) => self.scale_of(l, depth + 1),
                        (Some(_), None) => self.scale_of(r, depth + 1),
                        _ => None,
                    },
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// `target=value`: the unit it holds, and a name that states the other one.
    pub(super) fn note_unit(&mut self, target: &str, value: Node) {
        let Some(scale) = self.scale_of(value, 0) else {
            self.scales.remove(target);
            return;
        };
        self.scales.insert(target.to_string(), scale);
        let Some(divided) = scale.unit() else { return };
        let t = target.to_ascii_lowercase();
        let named = unit_of_name(target);
        if (named.is_some() || t.contains("mem") || t.contains("byte"))
            && !self.facts.units_used.contains(&divided)
        {
            self.facts.units_used.push(divided);
        }
        if let Some(named) = named {
            if named.power == divided.power && named.binary != divided.binary {
                self.facts.unit_conversions.push(UnitConversion {
                    target: target.to_string(),
                    named,
                    divided,
                    divisor: None,
                    span: value.byte_range(),
                });
            }
        }
    }

    /// The two sides of a comparison in the same kind of unit, one decimal and one binary.
    pub(super) fn compare_units(&mut self, l: Node, r: Node, span: Range<usize>) {
        let (Some(a), Some(b)) = (
            self.scale_of(l, 0).and_then(Scale::unit),
            self.scale_of(r, 0).and_then(Scale::unit),
        ) else {
            return;
        };
        if a.power == b.power && a.binary != b.binary {
            self.facts.unit_comparisons.push(UnitComparison {
                span,
                left: a,
                right: b,
            });
        }
    }
}
