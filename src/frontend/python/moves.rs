//! Fixes of a loop, built from the loop model and checked by it: a call that runs on the wrong
//! micro-steps is moved to the iteration that steps, keeping the steady tests around it (the
//! same test gives the same answer there), and a missing `unscale_` is added once. The edited
//! text is analysed again: a fix is offered only when the loop model finds this misstep gone and
//! nothing new on any path, and the file still parses.

use super::{extract_unchecked, Cond};
use crate::diagnostic::{apply_edits, Edit};
use crate::facts::{LoopFix, MisstepKind};
use crate::frontend::loops::{CallKind, Found, Recorded};
use std::collections::HashMap;
use std::ops::Range;
use tree_sitter::{Node, Tree};

/// What a fix is built from.
pub(super) struct Model<'a, 's> {
    pub src: &'s str,
    pub tree: &'a Tree,
    pub recorded: &'a Recorded<'a>,
    /// `if`/`elif` nodes (by id) and the condition each tests.
    pub cond_nodes: &'a HashMap<usize, usize>,
    /// Every misstep of the file.
    pub found: &'a [Found],
}

pub(super) fn fix(m: &Model, f: &Found) -> Option<LoopFix> {
    if f.accelerate || m.recorded.calls.get(f.ev)?.inlined {
        return None;
    }
    let (message, edits) = match f.misstep {
        MisstepKind::ClipInWindow | MisstepKind::UnscaleInWindow => to_boundary(m, f)?,
        MisstepKind::ZeroGradInWindow => after_step(
            m,
            f,
            "zero the gradients right after the optimizer step",
            |k| matches!(k, CallKind::ZeroGrad { .. }),
        )?,
        MisstepKind::SchedulerInWindow => {
            after_step(m, f, "step the scheduler right after the optimizer", |k| {
                matches!(k, CallKind::SchedulerStep { .. })
            })?
        }
        MisstepKind::UpdateInWindow => after_step(
            m,
            f,
            "update the scale right after the scaler's step",
            |k| matches!(k, CallKind::ScalerUpdate),
        )?,
        MisstepKind::StepBeforeUpdate => step_before_update(m, f)?,
        MisstepKind::ClipBeforeUnscale => unscale_first(m, f)?,
        MisstepKind::DoubleUnscale | MisstepKind::DoubleUpdate => return None,
    };
    checked(m, f, edits).map(|edits| LoopFix { message, edits })
}

// ---- the fixes ---------------------------------------------------------------------------------

/// Clips and `unscale_` calls of the window's micro-steps, moved together to the boundary before
/// its step: unscale, clip, step.
fn to_boundary(m: &Model, f: &Found) -> Option<(String, Vec<Edit>)> {
    let moved: Vec<&Found> = m
        .found
        .iter()
        .filter(|g| {
            g.steps == f.steps
                && matches!(
                    g.misstep,
                    MisstepKind::ClipInWindow | MisstepKind::UnscaleInWindow
                )
        })
        .collect();
    let calls = m.recorded.calls;
    let moves_unscale = moved
        .iter()
        .any(|g| g.misstep == MisstepKind::UnscaleInWindow);
    // Before the boundary's step; an `unscale_` also before the boundary's own clips, on
    // whichever path they run.
    let first_step = f
        .boundary
        .iter()
        .copied()
        .find(|e| matches!(calls[*e].kind, CallKind::Step { .. }))?;
    let (block, step_anchor) = boundary_statement(m, f, first_step)?;
    let moved_ids: Vec<usize> = moved.iter().map(|g| g.ev).collect();
    // The boundary's own clips stay; a moved clip is no anchor (in an inner micro-step loop,
    // the statement holding it is that loop, which runs before the backward it must follow).
    let anchor = match moves_unscale {
        false => step_anchor,
        true => calls
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                !c.inlined && matches!(c.kind, CallKind::Clip { .. }) && !moved_ids.contains(i)
            })
            .filter_map(|(_, c)| child_of(call_node(m, &c.call.span)?, block))
            .filter(|n| n.start_byte() < step_anchor.start_byte())
            .min_by_key(|n| n.start_byte())
            .unwrap_or(step_anchor),
    };
    let anchor_call = first_step;
    let units = units_of(m, f, &moved_ids, block)?;
    // With a scaler the clip must come after an `unscale_`: one at the boundary already, one
    // moved with it, or one added.
    let scaler_step = f
        .boundary
        .iter()
        .copied()
        .find(|e| matches!(calls[*e].kind, CallKind::Step { scaler: true }));
    let boundary_unscale = f.boundary.iter().copied().find(|e| {
        matches!(calls[*e].kind, CallKind::Unscale { .. })
            && calls[*e].order < calls[anchor_call].order
    });
    let mut at = line_start(m.src, anchor.start_byte());
    let mut extra = None;
    if let Some(u) = boundary_unscale.filter(|_| !moves_unscale) {
        let node = call_node(m, &calls[u].call.span)?;
        let stmt = child_of(node, block)?;
        at = line_end_after(m.src, stmt.end_byte());
    } else if let (Some(step), false) = (scaler_step, moves_unscale) {
        extra = Some(unscale_for(text(m, &calls[step].call.span))?);
    }
    let indent = indent_of(m.src, anchor.start_byte())?;
    let unit = indent_unit(m.src, anchor)?;
    let mut body = String::new();
    if let Some(u) = extra {
        body.push_str(&format!("{indent}{u}\n"));
    }
    body.push_str(&render(m, &units, &indent, &unit)?);
    if !bindings_hold(m, &units, at, block) {
        return None;
    }
    let mut edits = remove(m, &units)?;
    edits.push(insert_lines(m.src, at, body));
    let message = match moved.iter().any(|g| g.misstep == MisstepKind::ClipInWindow) {
        true => "clip once, at the optimizer step",
        false => "unscale once, at the optimizer step",
    };
    Some((message.into(), edits))
}

/// A call that belongs once per optimizer step, moved after the boundary's last step, or
/// deleted when the boundary already makes it there.
fn after_step(
    m: &Model,
    f: &Found,
    message: &str,
    same: impl Fn(&CallKind) -> bool,
) -> Option<(String, Vec<Edit>)> {
    let calls = m.recorded.calls;
    let scaler_only = matches!(calls[f.ev].kind, CallKind::ScalerUpdate);
    let last_step = f.boundary.iter().copied().rfind(|e| match calls[*e].kind {
        CallKind::Step { scaler } => scaler || !scaler_only,
        _ => false,
    })?;
    let own = text(m, &calls[f.ev].call.span);
    let already = f.boundary.iter().any(|e| {
        *e != f.ev
            && same(&calls[*e].kind)
            && calls[*e].order > calls[last_step].order
            && (!matches!(calls[*e].kind, CallKind::SchedulerStep { .. })
                || text(m, &calls[*e].call.span) == own)
    });
    let (block, anchor) = boundary_statement(m, f, last_step)?;
    if unserved_step(m, f, last_step, block.byte_range(), scaler_only, &same) {
        return None;
    }
    let units = units_of(m, f, &[f.ev], block)?;
    let mut edits = remove(m, &units)?;
    if already {
        return Some((
            "remove it: the optimizer step's branch already does it".into(),
            edits,
        ));
    }
    let at = line_end_after(m.src, anchor.end_byte());
    if !bindings_hold(m, &units, at, block) {
        return None;
    }
    let indent = indent_of(m.src, anchor.start_byte())?;
    let unit = indent_unit(m.src, anchor)?;
    edits.push(insert_lines(m.src, at, render(m, &units, &indent, &unit)?));
    Some((message.into(), edits))
}

/// Whether the iteration steps outside the block the call moves to (the plain arm of `if
/// accum > 1: ... else: ...`) with no other call of the moved call's kind on that step's path:
/// moved away, the call would no longer run there.
fn unserved_step(
    m: &Model,
    f: &Found,
    last_step: usize,
    destination: Range<usize>,
    scaler_only: bool,
    same: &impl Fn(&CallKind) -> bool,
) -> bool {
    let calls = m.recorded.calls;
    let at = calls[last_step].call.span.start;
    let Some(body) = m
        .recorded
        .loops
        .iter()
        .filter(|l| l.span.contains(&at))
        .min_by_key(|l| l.span.len())
        .map(|l| l.span.clone())
    else {
        return false;
    };
    calls.iter().enumerate().any(|(i, c)| {
        let step = match c.kind {
            CallKind::Step { scaler } => scaler || !scaler_only,
            _ => false,
        };
        // A step in the block the call moves to (either arm of `if scaler: ... else: ...`
        // before it) runs it there.
        let start = c.call.span.start;
        if !step
            || c.inlined
            || f.boundary.contains(&i)
            || !body.contains(&start)
            || destination.contains(&start)
        {
            return false;
        }
        // Served by another call of the kind in its block or in a block around it.
        !calls.iter().any(|d| {
            d.call.span != calls[f.ev].call.span
                && same(&d.kind)
                && body.contains(&d.call.span.start)
                && call_node(m, &d.call.span)
                    .and_then(statement_of)
                    .and_then(|s| s.parent())
                    .is_some_and(|b| b.byte_range().contains(&c.call.span.start))
        })
    })
}

/// `scaler.step` moved to the boundary, just before the scaler's update.
fn step_before_update(m: &Model, f: &Found) -> Option<(String, Vec<Edit>)> {
    let calls = m.recorded.calls;
    let update = calls
        .iter()
        .position(|c| Some(&c.call.span) == f.related.as_ref())?;
    let node = call_node(m, &calls[update].call.span)?;
    let block = boundary_block(m, node, f.factor.as_deref()?)?;
    let anchor = child_of(node, block)?;
    let units = units_of(m, f, &[f.ev], block)?;
    let at = line_start(m.src, anchor.start_byte());
    if !bindings_hold(m, &units, at, block) {
        return None;
    }
    let mut edits = remove(m, &units)?;
    let indent = indent_of(m.src, anchor.start_byte())?;
    let unit = indent_unit(m.src, anchor)?;
    edits.push(Edit::insert(at, render(m, &units, &indent, &unit)?));
    let update = text(m, &calls[update].call.span);
    Some((format!("move it to the boundary, before `{update}`"), edits))
}

/// `scaler.unscale_(optimizer)` once, before the first statement that holds a clip needing it,
/// under the tests the scaler's step is under (a scaler that may be `None` is unscaled only when
/// it is not).
fn unscale_first(m: &Model, f: &Found) -> Option<(String, Vec<Edit>)> {
    let clips: Vec<Node> = m
        .found
        .iter()
        .filter(|g| g.misstep == MisstepKind::ClipBeforeUnscale && g.related == f.related)
        .map(|g| statement_of(call_node(m, &g.call.span)?))
        .collect::<Option<_>>()?;
    let first = *clips.iter().min_by_key(|n| n.start_byte())?;
    // The innermost block that holds every clip, and its statement that holds the first.
    let block = ancestors(first).find(|b| {
        matches!(b.kind(), "block" | "module")
            && clips
                .iter()
                .all(|c| b.start_byte() <= c.start_byte() && c.end_byte() <= b.end_byte())
    })?;
    let anchor = child_of(first, block)?;
    let step = f.related.as_ref()?;
    let unscale = unscale_for(text(m, step))?;
    let guards = guards_of(m, f, statement_of(call_node(m, step)?)?, anchor)?;
    own_lines(m.src, anchor.byte_range())?;
    let indent = indent_of(m.src, anchor.start_byte())?;
    let unit = indent_unit(m.src, anchor)?;
    let mut body = String::new();
    emit(
        m.recorded.conds,
        &[(guards.as_slice(), unscale.clone())],
        0,
        &indent,
        &unit,
        &mut body,
    );
    let edits = vec![Edit::insert(line_start(m.src, anchor.start_byte()), body)];
    Some((format!("unscale first: `{unscale}`"), edits))
}

// ---- checking ----------------------------------------------------------------------------------

/// The edits, when the edited text parses and its loop model shows this misstep gone and none
/// added.
fn checked(m: &Model, f: &Found, edits: Vec<Edit>) -> Option<Vec<Edit>> {
    let (new_text, applied) = apply_edits(m.src, &[edits.as_slice()]);
    if applied == 0 {
        return None;
    }
    let after = extract_unchecked(&new_text).ok()?;
    if after.syntax_error {
        return None;
    }
    let key = |kind: MisstepKind, span: &Range<usize>, src: &str| {
        let t: String = src
            .get(span.clone())
            .unwrap_or("")
            .split_whitespace()
            .collect();
        (kind, t)
    };
    let mut before: Vec<(MisstepKind, String)> = m
        .found
        .iter()
        .map(|g| key(g.misstep, &g.call.span, m.src))
        .collect();
    let gone = key(f.misstep, &f.call.span, m.src);
    let i = before.iter().position(|k| *k == gone)?;
    before.remove(i);
    for g in &after.missteps {
        let k = key(g.kind, &g.call, &new_text);
        let i = before.iter().position(|b| *b == k)?;
        before.remove(i);
    }
    Some(edits)
}

// ---- statements that move ----------------------------------------------------------------------

/// A statement to move, with the tests between it and the destination that the destination is
/// not under (outermost first): the moved text is wrapped in them.
struct Unit<'t> {
    node: Node<'t>,
    guards: Vec<(usize, bool)>,
}

/// The smallest statements that hold the calls `ids` and no other call the loop model reads: a
/// call's own statement, grown to an `if` on a steady test whose body holds only such
/// statements. `None` when a call is not a statement of its own or sits in a block the
/// destination is not in (a `with`, a `try`, a test that may change).
fn units_of<'a>(
    m: &Model<'a, '_>,
    f: &Found,
    ids: &[usize],
    destination: Node<'a>,
) -> Option<Vec<Unit<'a>>> {
    let calls = m.recorded.calls;
    let moved: Vec<Range<usize>> = ids.iter().map(|i| calls[*i].call.span.clone()).collect();
    let training: Vec<Range<usize>> = calls
        .iter()
        .filter(|c| !c.inlined)
        .map(|c| c.call.span.clone())
        .collect();
    let inside = |outer: &Range<usize>, inner: &Range<usize>| {
        outer.start <= inner.start && inner.end <= outer.end
    };
    let holds_only = |n: Node| {
        let r = n.byte_range();
        training
            .iter()
            .filter(|t| inside(&r, t))
            .all(|t| moved.contains(t))
    };
    let mut units: Vec<Unit> = Vec::new();
    for span in &moved {
        let mut unit = statement_of(call_node(m, span)?)?;
        if !holds_only(unit) {
            return None;
        }
        // Grow to an `if` on a steady test that holds only moved statements.
        while let Some(block) = unit.parent().filter(|b| b.kind() == "block") {
            let Some(owner) = block.parent().filter(|o| o.kind() == "if_statement") else {
                break;
            };
            let steady = m
                .cond_nodes
                .get(&owner.id())
                .is_some_and(|c| f.steady.contains(c));
            let mut c = block.walk();
            let every_statement_moves = block
                .named_children(&mut c)
                .filter(|st| st.kind() != "comment")
                .all(|st| moved.iter().any(|s| inside(&st.byte_range(), s)));
            if !steady
                || owner.child_by_field_name("alternative").is_some()
                || inside(&owner.byte_range(), &destination.byte_range())
                || !holds_only(owner)
                || !every_statement_moves
            {
                break;
            }
            unit = owner;
        }
        if units.iter().any(|u| u.node.id() == unit.id()) {
            continue;
        }
        let guards = guards_of(m, f, unit, destination)?;
        units.push(Unit { node: unit, guards });
    }
    units.sort_by_key(|u| u.node.start_byte());
    Some(units)
}

/// The `if` arms around `unit` up to the first statement that also holds the destination, each
/// on a steady test (`None` otherwise, or when another block is between).
fn guards_of<'a>(
    m: &Model<'a, '_>,
    f: &Found,
    unit: Node<'a>,
    destination: Node<'a>,
) -> Option<Vec<(usize, bool)>> {
    let dest = destination.byte_range();
    let mut guards = Vec::new();
    let mut n = unit;
    while let Some(p) = n.parent() {
        let r = p.byte_range();
        if r.start <= dest.start && dest.end <= r.end {
            break;
        }
        if p.kind() == "block" {
            let owner = p.parent()?;
            let (cond, taken) = match owner.kind() {
                "if_statement" | "elif_clause" => (*m.cond_nodes.get(&owner.id())?, true),
                "else_clause" => {
                    let stmt = owner.parent()?;
                    let mut c = stmt.walk();
                    if stmt.children(&mut c).any(|k| k.kind() == "elif_clause") {
                        return None;
                    }
                    (*m.cond_nodes.get(&stmt.id())?, false)
                }
                // The inner loop of micro-steps: the call leaves it for the code after it.
                "for_statement" | "while_statement"
                    if inner_loop(m, f) == Some(owner.byte_range()) =>
                {
                    n = p;
                    continue;
                }
                // A loop, a `with`, a `try` between the call and the destination: moving out of
                // it changes more than when the call runs.
                _ => return None,
            };
            if !f.steady.contains(&cond) {
                return None;
            }
            guards.push((cond, taken));
            // An `elif` arm also means its `if` was false.
            if owner.kind() == "elif_clause" {
                let stmt = owner.parent()?;
                guards.push((*m.cond_nodes.get(&stmt.id())?, false));
                if !f.steady.contains(&guards[guards.len() - 1].0) {
                    return None;
                }
            }
        }
        n = p;
    }
    guards.reverse();
    Some(guards)
}

/// The units' text at `indent`, wrapped in their guards: arms of one test side by side become
/// `if`/`else`.
fn render(m: &Model, units: &[Unit], indent: &str, unit: &str) -> Option<String> {
    let items: Vec<(&[(usize, bool)], String)> = units
        .iter()
        .map(|u| Some((u.guards.as_slice(), statement_text(m.src, u.node)?)))
        .collect::<Option<_>>()?;
    let mut out = String::new();
    emit(m.recorded.conds, &items, 0, indent, unit, &mut out);
    Some(out)
}

fn emit(
    conds: &[Cond],
    items: &[(&[(usize, bool)], String)],
    depth: usize,
    indent: &str,
    unit: &str,
    out: &mut String,
) {
    let mut i = 0;
    while i < items.len() {
        let (guards, text) = &items[i];
        let Some(&(cond, taken)) = guards.get(depth) else {
            out.push_str(&reindent(text, indent));
            i += 1;
            continue;
        };
        let run = |from: usize, want: bool| {
            let mut j = from;
            while j < items.len() && items[j].0.get(depth) == Some(&(cond, want)) {
                j += 1;
            }
            j
        };
        let end = run(i, taken);
        let test = conds.get(cond).map_or("", |c| c.text.as_str());
        let inner = format!("{indent}{unit}");
        if taken {
            out.push_str(&format!("{indent}if {test}:\n"));
            emit(conds, &items[i..end], depth + 1, &inner, unit, out);
            let other = run(end, false);
            if other > end {
                out.push_str(&format!("{indent}else:\n"));
                emit(conds, &items[end..other], depth + 1, &inner, unit, out);
            }
            i = other;
        } else {
            out.push_str(&format!("{indent}if not ({test}):\n"));
            emit(conds, &items[i..end], depth + 1, &inner, unit, out);
            i = end;
        }
    }
}

/// Delete the units' lines; a block left with nothing becomes `pass`.
fn remove(m: &Model, units: &[Unit]) -> Option<Vec<Edit>> {
    let mut edits = Vec::new();
    let mut emptied: Vec<usize> = Vec::new();
    for u in units {
        let (lines, _) = own_lines(m.src, u.node.byte_range())?;
        let block = u.node.parent()?;
        let mut c = block.walk();
        let all_removed = block
            .named_children(&mut c)
            .filter(|st| st.kind() != "comment")
            .all(|st| units.iter().any(|x| x.node.id() == st.id()));
        if all_removed && !emptied.contains(&block.id()) {
            emptied.push(block.id());
            let indent = indent_of(m.src, u.node.start_byte())?;
            edits.push(Edit::replace(lines, format!("{indent}pass\n")));
        } else {
            edits.push(Edit::replace(lines, ""));
        }
    }
    Some(edits)
}

/// Moving the units to `at` (in `block`) leaves every name bound where it is read: what a unit
/// assigns is read nowhere else in the iteration but after `at` in the block, and what it reads
/// is not assigned between `at` and the unit when it moves up.
fn bindings_hold(m: &Model, units: &[Unit], at: usize, block: Node) -> bool {
    let Some(region) = ancestors(block).find(|n| {
        matches!(
            n.kind(),
            "for_statement" | "while_statement" | "function_definition" | "module"
        )
    }) else {
        return false;
    };
    let names = names_in(m.src, region);
    let after_at = |p: usize| p >= at && p < block.end_byte();
    units.iter().all(|u| {
        let r = u.node.byte_range();
        let inside = |p: usize| p >= r.start && p < r.end;
        let own: Vec<&(&str, usize, bool)> = names.iter().filter(|n| inside(n.1)).collect();
        let writes_ok = own.iter().filter(|n| n.2).all(|(w, _, _)| {
            names
                .iter()
                .filter(|(n, p, _)| n == w && !inside(*p))
                .all(|(_, p, _)| after_at(*p))
        });
        let reads_ok = at >= r.start
            || own.iter().filter(|n| !n.2).all(|(read, _, _)| {
                !names
                    .iter()
                    .any(|(n, p, write)| *write && n == read && *p >= at && *p < r.start)
            });
        writes_ok && reads_ok
    })
}

/// Every name in `node` as written: its text, offset, and whether it is assigned there.
fn names_in<'s>(src: &'s str, node: Node) -> Vec<(&'s str, usize, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if n.kind() == "identifier" {
            let parent = n.parent();
            let field_of =
                |p: Node, f: &str| p.child_by_field_name(f).is_some_and(|c| c.id() == n.id());
            let member = parent.is_some_and(|p| {
                (p.kind() == "attribute" && field_of(p, "attribute"))
                    || (p.kind() == "keyword_argument" && field_of(p, "name"))
            });
            if !member {
                let write = parent.is_some_and(|p| {
                    let target = |q: Node| {
                        matches!(
                            q.kind(),
                            "assignment" | "augmented_assignment" | "for_statement"
                        ) && q.child_by_field_name("left").is_some_and(|l| {
                            l.start_byte() <= n.start_byte() && n.end_byte() <= l.end_byte()
                        })
                    };
                    target(p)
                        || (matches!(p.kind(), "pattern_list" | "tuple_pattern" | "list_pattern")
                            && p.parent().is_some_and(target))
                });
                out.push((src.get(n.byte_range()).unwrap_or(""), n.start_byte(), write));
            }
        }
        let mut c = n.walk();
        stack.extend(n.children(&mut c));
    }
    out
}

/// The span of the window's inner loop of micro-steps, when it has one.
fn inner_loop(m: &Model, f: &Found) -> Option<Range<usize>> {
    Some(m.recorded.loops.get(f.after_inner?)?.span.clone())
}

// ---- where the boundary is ---------------------------------------------------------------------

/// The block that holds the window's boundary code, and the statement of it that holds the call
/// `ev` (a step).
fn boundary_statement<'a>(m: &Model<'a, '_>, f: &Found, ev: usize) -> Option<(Node<'a>, Node<'a>)> {
    let node = call_node(m, &m.recorded.calls[ev].call.span)?;
    let block = match f.after_inner {
        Some(inner) => {
            let span = &m.recorded.loops.get(inner)?.span;
            let lp = m
                .tree
                .root_node()
                .descendant_for_byte_range(span.start, span.end)?;
            let lp = ancestors(lp).find(|n| n.byte_range() == *span)?;
            lp.parent()?
        }
        None => boundary_block(m, node, f.factor.as_deref()?)?,
    };
    Some((block, child_of(node, block)?))
}

/// The arm of the innermost `if` around `node` that is true on the iteration that steps.
fn boundary_block<'a>(m: &Model<'a, '_>, node: Node<'a>, factor: &str) -> Option<Node<'a>> {
    let conds = m.recorded.conds;
    let boundary = |stmt: Node, want: bool| {
        m.cond_nodes
            .get(&stmt.id())
            .and_then(|c| conds.get(*c))
            .and_then(|c| c.accum.as_ref())
            .is_some_and(|t| {
                t.boundary_when_true == want && crate::frontend::loops::same_expr(&t.factor, factor)
            })
    };
    ancestors(node).find(|b| {
        b.kind() == "block"
            && b.parent().is_some_and(|p| match p.kind() {
                "if_statement" | "elif_clause" => {
                    p.child_by_field_name("consequence").map(|c| c.id()) == Some(b.id())
                        && boundary(p, true)
                }
                "else_clause" => p.parent().is_some_and(|s| boundary(s, false)),
                _ => false,
            })
    })
}

// ---- syntax helpers ----------------------------------------------------------------------------

fn ancestors(node: Node) -> impl Iterator<Item = Node> {
    std::iter::successors(Some(node), |n| n.parent())
}

/// The call node with exactly this span.
fn call_node<'a>(m: &Model<'a, '_>, span: &Range<usize>) -> Option<Node<'a>> {
    let n = m
        .tree
        .root_node()
        .descendant_for_byte_range(span.start, span.end)?;
    ancestors(n).find(|a| a.byte_range() == *span && a.kind() == "call")
}

/// The expression statement a call stands in (as itself, or as the value of an assignment).
fn statement_of(node: Node) -> Option<Node> {
    let stmt = ancestors(node).find(|a| {
        a.parent()
            .is_some_and(|p| matches!(p.kind(), "block" | "module"))
    })?;
    (stmt.kind() == "expression_statement").then_some(stmt)
}

/// The ancestor of `node` that is a statement of `block`.
fn child_of<'a>(node: Node<'a>, block: Node<'a>) -> Option<Node<'a>> {
    ancestors(node).find(|a| a.parent().is_some_and(|p| p.id() == block.id()))
}

fn text<'s>(m: &Model<'_, 's>, span: &Range<usize>) -> &'s str {
    m.src.get(span.clone()).unwrap_or("")
}

fn line_start(src: &str, at: usize) -> usize {
    src[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// The offset just past the line break that ends the line holding `at`.
fn line_end_after(src: &str, at: usize) -> usize {
    src[at..].find('\n').map_or(src.len(), |i| at + i + 1)
}

/// Insert whole lines (each ending in a newline) at a line start; at the end of a text whose
/// last line has no newline (a notebook cell, a file without one), they follow a newline instead.
fn insert_lines(src: &str, at: usize, lines: String) -> Edit {
    match at == src.len() && !src.is_empty() && !src.ends_with('\n') {
        true => Edit::insert(at, format!("\n{}", lines.trim_end_matches('\n'))),
        false => Edit::insert(at, lines),
    }
}

/// The whitespace before `at` on its line; `None` when code precedes it.
fn indent_of(src: &str, at: usize) -> Option<String> {
    let before = &src[line_start(src, at)..at];
    before
        .chars()
        .all(|c| c == ' ' || c == '\t')
        .then(|| before.to_string())
}

/// One level of indentation as the file writes it: the anchor's indentation beyond its block
/// owner's.
fn indent_unit(src: &str, anchor: Node) -> Option<String> {
    let own = indent_of(src, anchor.start_byte())?;
    let owner = anchor.parent()?.parent()?;
    let outer = indent_of(src, owner.start_byte()).unwrap_or_default();
    Some(match own.strip_prefix(&outer) {
        Some(unit) if !unit.is_empty() => unit.to_string(),
        _ => "    ".to_string(),
    })
}

/// A statement that stands alone on its lines: the lines (to delete) and its text with any
/// trailing comment.
fn own_lines(src: &str, stmt: Range<usize>) -> Option<(Range<usize>, &str)> {
    let start = line_start(src, stmt.start);
    let end = src[stmt.end..]
        .find('\n')
        .map_or(src.len(), |i| stmt.end + i);
    let before = src.get(start..stmt.start)?;
    let after = src.get(stmt.end..end)?.trim();
    if !before.trim().is_empty() || !(after.is_empty() || after.starts_with('#')) {
        return None;
    }
    Some((
        start..(end + 1).min(src.len()),
        src.get(stmt.start..end)?.trim_end(),
    ))
}

/// A statement's text with every line but the first relative to the statement's indentation
/// (`\n`-joined), ready to be indented anew.
fn statement_text(src: &str, node: Node) -> Option<String> {
    let (_, text) = own_lines(src, node.byte_range())?;
    let indent = indent_of(src, node.start_byte())?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (k, line) in lines.iter().enumerate() {
        let line = line.trim_end_matches('\r');
        if k == 0 || line.trim().is_empty() {
            out.push(line.trim_start().to_string());
        } else {
            out.push(line.strip_prefix(indent.as_str())?.to_string());
        }
    }
    Some(out.join("\n"))
}

fn reindent(text: &str, indent: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            out.push('\n');
        } else {
            out.push_str(&format!("{indent}{line}\n"));
        }
    }
    out
}

/// `scaler.step(optimizer)` → `scaler.unscale_(optimizer)`.
pub(super) fn unscale_for(step: &str) -> Option<String> {
    let (recv, rest) = step.split_once(".step(")?;
    let arg = rest.strip_suffix(')')?.split(',').next()?.trim();
    if arg.is_empty() || arg.contains('=') {
        return None;
    }
    Some(format!("{recv}.unscale_({arg})"))
}
