//! A count bound in each arm of one `if`: `steps = len(ds) // batch` where the epochs decide,
//! `steps = args.max_steps` where a number of steps is given. The arm that counts the dataset is
//! judged: whenever a run takes it, that is the count the schedule reads.

use super::*;

impl<'a> Model<'a, '_> {
    /// The binding of `name` in the one arm, among the arms of one `if` that each bind it, whose
    /// value counts the dataset's samples over a batch, when the other arms bind values with no
    /// batch in them.
    pub(super) fn arm_binding(&self, name: &str) -> Option<Node<'a>> {
        let valuing = self.in_arms.borrow().iter().any(|n| n == name);
        if valuing || modified_in_place(self.w.src, name) {
            return None;
        }
        let bindings: Vec<Node<'a>> = word_positions(self.w.src, name)
            .filter_map(|at| {
                let left = self.root.descendant_for_byte_range(at, at + name.len())?;
                let set = left.parent().filter(|p| p.ty() == "assignment")?;
                (set.field("left")? == left && left.ty() == "identifier").then_some(set)
            })
            .collect();
        if let Some(value) = number_then_factor(&bindings, name, self.w.src) {
            return Some(value);
        }
        // Each in its own arm of the same `if`, none reading the name.
        let arms: Vec<(Node, Node)> = bindings.iter().filter_map(|b| arm_of(*b)).collect();
        let statement = arms.first().map(|(s, _)| *s)?;
        let distinct = arms
            .iter()
            .enumerate()
            .all(|(i, (s, a))| *s == statement && arms[..i].iter().all(|(_, b)| b != a));
        if arms.len() != bindings.len() || arms.len() < 2 || !distinct {
            return None;
        }
        let values: Vec<Node<'a>> = bindings.iter().filter_map(|b| b.field("right")).collect();
        if values.len() != bindings.len() || values.iter().any(|v| word_in(self.text(*v), name)) {
            return None;
        }
        self.in_arms.borrow_mut().push(name.to_string());
        let factors: Vec<Factors> = values.iter().map(|v| self.factors(*v, 0)).collect();
        self.in_arms.borrow_mut().pop();
        let counts = |f: &Factors| f.samples == 1 && f.micro == -1;
        let mut counting = values.iter().zip(&factors).filter(|(_, f)| counts(f));
        let (value, _) = counting.next()?;
        let others_plain = factors
            .iter()
            .all(|f| counts(f) || (f.samples == 0 && !f.holds_batch()));
        (counting.next().is_none() && others_plain).then_some(*value)
    }
}

/// `n = 1`, then under an `if`, `n = len(trainer.devices)`: the number is the run of one
/// process, the value bound under the `if` the factor of every other run.
fn number_then_factor<'a>(bindings: &[Node<'a>], name: &str, src: &str) -> Option<Node<'a>> {
    let [first, second] = bindings else {
        return None;
    };
    let number = first.field("right").map(unparen)?;
    let value = second.field("right")?;
    let read = src.get(value.byte_range())?;
    let plain_number = matches!(number.ty(), "integer" | "float");
    // The `if` follows the number in the block that binds it.
    let block = first.parent().and_then(|statement| statement.parent());
    let (statement, _) = arm_of(*second)?;
    let follows = statement.parent() == block && statement.start_byte() > first.end_byte();
    (plain_number && follows && !word_in(read, name)).then_some(value)
}

/// The `if` statement whose arm holds the assignment `set` directly (its block's statement), and
/// that arm.
fn arm_of(set: Node) -> Option<(Node, Node)> {
    let statement = set.parent().filter(|p| p.ty() == "expression_statement")?;
    let block = statement.parent().filter(|p| p.ty() == "block")?;
    let arm = block.parent()?;
    match arm.ty() {
        "if_statement" => Some((arm, arm)),
        "elif_clause" | "else_clause" => Some((arm.parent()?, arm)),
        _ => None,
    }
}
