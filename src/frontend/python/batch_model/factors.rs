//! The run's factors a value holds, as exponents: what a batch, a count or a learning rate is a
//! product of.

/// Where the run's factors sit in a value, as exponents (`len(ds) // (bs * accum)` is
/// samples · micro⁻¹ · accum⁻¹), and whether a value of unknown meaning multiplies or divides it
/// (`epochs` multiplies a count harmlessly; an unknown divisor may be any factor).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Factors {
    pub(super) micro: i8,
    pub(super) accum: i8,
    pub(super) world: i8,
    /// Lightning's nodes: the devices of one node are `world: 1, nodes: -1`, the data-parallel
    /// size over the node count.
    pub(super) nodes: i8,
    pub(super) samples: i8,
    pub(super) unknown_up: bool,
    pub(super) unknown_down: bool,
    /// A whole number above 1 multiplies (or divides) the value: it may be a factor of the run
    /// written as a number (`lr * bs * 8` on eight GPUs), so no factor is missing for sure.
    pub(super) literal_up: bool,
    pub(super) literal_down: bool,
    /// A choice between values with different factors (`a * w if ddp else a`): no single
    /// equation holds, so none is judged.
    pub(super) choice: bool,
}

pub(super) const ONE: Factors = Factors {
    micro: 0,
    accum: 0,
    world: 0,
    nodes: 0,
    samples: 0,
    unknown_up: false,
    unknown_down: false,
    literal_up: false,
    literal_down: false,
    choice: false,
};
pub(super) const UNKNOWN: Factors = Factors {
    unknown_up: true,
    ..ONE
};
pub(super) const MICRO: Factors = Factors { micro: 1, ..ONE };
pub(super) const ACCUM: Factors = Factors { accum: 1, ..ONE };
pub(super) const WORLD: Factors = Factors { world: 1, ..ONE };
/// The devices of one node under Lightning (`trainer.num_devices`): the data-parallel size only
/// when the run has one node.
pub(super) const DEVICES: Factors = Factors {
    world: 1,
    nodes: -1,
    ..ONE
};
/// Lightning's `num_nodes`.
pub(super) const NODES: Factors = Factors { nodes: 1, ..ONE };
pub(super) const SAMPLES: Factors = Factors { samples: 1, ..ONE };
/// A batch declared global: micro × accumulation × data-parallel size.
pub(super) const GLOBAL: Factors = Factors {
    micro: 1,
    accum: 1,
    world: 1,
    ..ONE
};

impl Factors {
    pub(super) fn times(self, o: Factors) -> Factors {
        Factors {
            micro: self.micro.saturating_add(o.micro),
            accum: self.accum.saturating_add(o.accum),
            world: self.world.saturating_add(o.world),
            nodes: self.nodes.saturating_add(o.nodes),
            samples: self.samples.saturating_add(o.samples),
            unknown_up: self.unknown_up || o.unknown_up,
            unknown_down: self.unknown_down || o.unknown_down,
            literal_up: self.literal_up || o.literal_up,
            literal_down: self.literal_down || o.literal_down,
            choice: self.choice || o.choice,
        }
    }

    pub(super) fn over(self, o: Factors) -> Factors {
        Factors {
            micro: self.micro.saturating_sub(o.micro),
            accum: self.accum.saturating_sub(o.accum),
            world: self.world.saturating_sub(o.world),
            nodes: self.nodes.saturating_sub(o.nodes),
            samples: self.samples.saturating_sub(o.samples),
            unknown_up: self.unknown_up || o.unknown_down,
            unknown_down: self.unknown_down || o.unknown_up,
            literal_up: self.literal_up || o.literal_down,
            literal_down: self.literal_down || o.literal_up,
            choice: self.choice || o.choice,
        }
    }

    /// A sum keeps the factors its terms share, and what may hold in either term, whichever
    /// comes first (`a * 8 + b` and `b + a * 8`); a constant added changes none (`len(ds) + bs
    /// - 1` is still the samples, rounded up).
    pub(super) fn plus(self, o: Factors) -> Factors {
        if self.same_factors(o) {
            return self.either(o);
        }
        let sum = match (self.is_constant(), o.is_constant()) {
            (_, true) => self,
            (true, _) => o,
            _ if self.samples == 1 && o.samples == 0 && !o.unknown_down => self,
            _ if o.samples == 1 && self.samples == 0 && !self.unknown_down => o,
            _ => UNKNOWN,
        };
        Factors {
            choice: self.choice || o.choice,
            ..sum
        }
    }

    /// One of two values with the same factors (`a * 8 if ddp else a`): what may hold in
    /// either may hold in it.
    pub(super) fn either(self, o: Factors) -> Factors {
        Factors {
            unknown_up: self.unknown_up || o.unknown_up,
            unknown_down: self.unknown_down || o.unknown_down,
            literal_up: self.literal_up || o.literal_up,
            literal_down: self.literal_down || o.literal_down,
            choice: self.choice || o.choice,
            ..self
        }
    }

    /// Whether the batch side of the value (a product, or a count's divisor) holds a whole
    /// number above 1, which may be a factor of the run written as a number.
    pub(super) fn number_in_batch(self) -> bool {
        match self.micro < 0 {
            true => self.literal_down,
            false => self.literal_up,
        }
    }

    pub(super) fn same_factors(self, o: Factors) -> bool {
        (self.micro, self.accum, self.world, self.nodes, self.samples)
            == (o.micro, o.accum, o.world, o.nodes, o.samples)
    }

    pub(super) fn is_constant(self) -> bool {
        self.same_factors(ONE) && !self.unknown_up && !self.unknown_down && !self.choice
    }

    pub(super) fn is_unknown(self) -> bool {
        self.same_factors(ONE) && (self.unknown_up || self.unknown_down)
    }

    pub(super) fn holds_batch(self) -> bool {
        self.micro != 0 || self.accum != 0 || self.world != 0 || self.nodes != 0
    }

    /// The batch factors, as a product of words (`micro-batch × accumulation`).
    pub(super) fn describe(self) -> String {
        let mut parts = Vec::new();
        let world = match self.nodes < 0 {
            true => "devices of one node",
            false => "data-parallel size",
        };
        for (e, word) in [
            (self.micro, "micro-batch"),
            (self.accum, "accumulation"),
            (self.world, world),
        ] {
            if e > 0 {
                parts.push(word);
            }
        }
        match parts.is_empty() {
            true => "no batch factor".into(),
            false => parts.join(" × "),
        }
    }
}

impl Factors {
    /// What a count divides the samples by (`micro-batch × accumulation`).
    pub(super) fn describe_inverse(self) -> String {
        Factors {
            micro: -self.micro,
            accum: -self.accum,
            world: -self.world,
            nodes: -self.nodes,
            ..ONE
        }
        .describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_of_like_terms_keeps_what_either_holds_in_any_order() {
        // `bs * accum * 8 + bs * accum` and the same terms the other way round.
        let written = Factors {
            literal_up: true,
            ..MICRO.times(ACCUM)
        };
        let plain = MICRO.times(ACCUM);
        assert_eq!(written.plus(plain), plain.plus(written));
        assert!(plain.plus(written).number_in_batch());
        assert!(!plain.plus(plain).number_in_batch());
    }
}
