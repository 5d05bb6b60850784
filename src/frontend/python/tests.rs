//! Unit tests of the walk: what it lowers from small texts.
use super::*;

#[test]
fn budget_formula_is_lowered_through_self_attributes() {
    let src = "class C:\n    def __init__(self):\n        self.model_size_gb = 14\n    def f(self, available_memory_gb):\n        memory_for_batch = available_memory_gb - (self.model_size_gb * 2)\n";
    let facts = extract(src).expect("parses");
    let f = facts.formulas.iter().find(
        |f| matches!(&f.kind, FormulaKind::Assign { target, .. } if target == "memory_for_batch"),
    );
    let f = f.expect("budget formula");
    assert_eq!(f.lin.terms.len(), 2);
    assert_eq!(f.lin.terms[1].coef, -2.0);
    assert_eq!(f.lin.terms[1].value, Some(14.0));
}

#[test]
fn accumulating_loop_with_unscaled_loss() {
    let src = "for i, b in enumerate(loader):\n    loss = criterion(model(b), b)\n    loss.backward()\n    if (i + 1) % accum_steps == 0:\n        optimizer.step()\n        optimizer.zero_grad()\n";
    let facts = extract(src).expect("parses");
    assert_eq!(facts.loops.len(), 1);
    let lp = &facts.loops[0];
    assert_eq!(lp.factor, "accum_steps");
    assert_eq!(lp.backwards.len(), 1);
    assert_eq!(lp.backwards[0].scaling(&|_, _| None), Scaling::Unscaled);
}

#[test]
fn deep_nesting_does_not_overflow() {
    let src = format!("x = {}1{}\n", "(".repeat(100_000), ")".repeat(100_000));
    let _ = extract(&src);
}
