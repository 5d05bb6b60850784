//! GA001 unscaled-accumulation-loss: in a loop that steps the optimizer once every N micro-steps,
//! the loss reaches `backward()` without being divided by N. Documentation: `rules/GA001.toml`.

use super::{Checker, Rule};
use crate::diagnostic::{Applicability, Diagnostic, Edit, Fix};
use crate::facts::{Framework, Scaling};

pub struct UnscaledAccumulationLoss;

impl Rule for UnscaledAccumulationLoss {
    fn code(&self) -> &'static str {
        "GA001"
    }

    fn check(&self, cx: &Checker<'_>, out: &mut Vec<Diagnostic>) {
        // HF Trainer and Lightning scale the loss themselves; their hooks are not raw loops.
        // Lightning with manual optimization scales nothing.
        if cx.training.frameworks.iter().any(|f| match f {
            Framework::HfTrainer => true,
            Framework::Lightning => !cx.facts.manual_optimization,
            _ => false,
        }) {
            return;
        }
        let imported = |m: &str, n: &str| cx.training.imported_return(m, n);
        // Under accelerate's DeepSpeed plugin, `accelerator.backward(loss)` is the engine's, which
        // divides by its config's accumulation steps (GA002 reports a division by hand there).
        let engine_divides = cx.training.frameworks.contains(&Framework::Accelerate)
            && super::deepspeed_accumulation(cx).is_some();
        for lp in &cx.facts.loops {
            // Zeroing every micro-step (GA003) is a second bug: the window still needs dividing.
            if lp.grads_rescaled {
                continue;
            }
            for bw in &lp.backwards {
                let mut divisors = Vec::new();
                bw.prov.divisors(&mut divisors);
                if let Some(counter) = lp.counter.as_deref().filter(|c| divisors.contains(c)) {
                    let n = &lp.factor;
                    out.push(
                        Diagnostic::new(
                            "GA001",
                            bw.call.clone(),
                            format!("loss is divided by `{counter}`, the running count of micro-steps, instead of `{n}`: the micro-batches of a window weigh 1, 1/2, ... 1/{n} and the window's gradient is not its mean"),
                        )
                        .with_help(format!("divide by the accumulation steps, `{n}`, on every micro-step")),
                    );
                    continue;
                }
                let scaling = bw.scaling(&imported);
                if !scaling.is_mean() || (engine_divides && !receiver(bw)) {
                    continue;
                }
                let n = &lp.factor;
                let times = match lp.factor_value {
                    Some(v) if n.parse::<f64>().is_ok() => format!("{}x", super::fmt_num(v)),
                    Some(v) => format!("{}x (`{n}`)", super::fmt_num(v)),
                    None => format!("`{n}` times"),
                };
                let assumed = if scaling == Scaling::AssumedMean {
                    " (taking the loss as a per-batch mean, the torch and Hugging Face default)"
                } else {
                    ""
                };
                let reaches = if bw.in_helper {
                    format!(
                        "loss reaches backward() in this helper on every micro-step of the loop at {},",
                        super::line_of(cx.file, lp.header.start)
                    )
                } else {
                    "loss reaches backward()".to_string()
                };
                let message = format!(
                    "{reaches} undivided while the optimizer steps every `{n}` micro-batches: gradients come out {times} the full-batch gradient{assumed}"
                );
                let help = match lp.factor_here {
                    true => format!(
                        "divide the loss by the accumulation steps before the backward: `{}`",
                        scaled(&bw.loss_text, n, receiver(bw))
                    ),
                    false => format!("divide the loss before the backward by the accumulation steps (`{n}` where the optimizer steps)"),
                };
                let fix = (!bw.in_helper && lp.factor_here).then(|| Fix {
                    applicability: if lp.factor_is_simple {
                        Applicability::Safe
                    } else {
                        Applicability::Unsafe
                    },
                    message: format!("divide the loss by `{n}`"),
                    edits: vec![Edit::replace(
                        bw.loss.clone(),
                        scaled(&bw.loss_text, n, receiver(bw)),
                    )],
                });
                out.push(
                    Diagnostic::new("GA001", bw.call.clone(), message)
                        .with_help(help)
                        .with_fix(fix),
                );
            }
        }
    }
}

/// The loss is the receiver of `.backward()` (it needs parentheses) rather than an argument.
fn receiver(bw: &crate::facts::Backward) -> bool {
    bw.call.start == bw.loss.start
}

fn scaled(loss: &str, n: &str, receiver: bool) -> String {
    let atom = loss
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.'))
        || loss.ends_with(')') && !loss.contains(' ');
    let loss = if atom {
        loss.to_string()
    } else {
        format!("({loss})")
    };
    let n = if n
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.'))
    {
        n.to_string()
    } else {
        format!("({n})")
    };
    if receiver {
        format!("({loss} / {n})")
    } else {
        format!("{loss} / {n}")
    }
}
