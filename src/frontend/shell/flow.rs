//! Which statements run when the script runs as written: a frame per node on the path from the
//! root, branches whose condition (`[ "$X" = y ]`, `case`) is known taken or skipped, loop bodies,
//! the right side of `&&`, and the option-parsing loop that runs only when given arguments.

use super::expand::{is_known, text_of, Mode, RChar};
use super::Walker;
use crate::facts::Topics;
use crate::frontend::fields::ShField;
use tree_sitter::Node;

#[derive(Debug)]
pub(super) struct StatusFrame {
    /// The node's id: the walk drops the frame when it leaves the node.
    pub(super) id: usize,
    pub(super) kind: &'static str,
    status: Status,
    /// `if`: the status of each branch (then, elif..., else); `case`: of each item.
    branches: Vec<Status>,
    /// Branches (elif/else clauses, case items) entered so far.
    pub(super) seen: usize,
    /// `if`/`case`: how many branches have a test of their own (an `else`, a `*)` item have
    /// none); the tests are numbered from `test` on, for the paths values take.
    pub(super) conds: usize,
    pub(super) test: u32,
    /// A loop: the status of its body.
    body: Status,
    /// A `list` (`a && b`): its first command, which always runs.
    pub(super) first: Option<usize>,
    /// `if`/`case`: what its tests read (`if [[ $USE_LORA == 1 ]]`), for the formulas under it.
    pub(super) topics: Topics,
}

/// Whether a statement runs when the script runs as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Live,
    /// On some paths only.
    Maybe,
    /// Never (a branch whose condition is known to be false), or only when the script is given
    /// arguments (the option-parsing loop): the script as written does not run it.
    Dead,
}

impl Status {
    fn and(self, other: Status) -> Status {
        match (self, other) {
            (Status::Dead, _) | (_, Status::Dead) => Status::Dead,
            (Status::Maybe, _) | (_, Status::Maybe) => Status::Maybe,
            _ => Status::Live,
        }
    }
}

impl<'s> Walker<'s> {
    /// The kind of the parent of the node being visited.
    pub(super) fn parent_kind(&self) -> Option<&'static str> {
        let n = self.frames.len();
        n.checked_sub(2).map(|i| self.frames[i].kind)
    }

    /// Whether the node being visited runs when the script runs as written.
    pub(super) fn status(&self, _node: Node) -> Status {
        self.frames.last().map_or(Status::Live, |f| f.status)
    }

    /// The frame of a node entered under the current top frame: its status follows from the
    /// parent's (a branch of a known condition, a loop body, the right side of `&&`).
    pub(super) fn push_frame(&mut self, node: Node, field: Option<&str>) {
        let kind = node.kind();
        let status = match self.frames.last_mut() {
            None => Status::Live,
            Some(parent) => {
                let inherited = parent.status;
                let own = if !parent.branches.is_empty() || parent.seen > 0 {
                    // The parent is an `if` or a `case`.
                    match kind {
                        "elif_clause" | "else_clause" | "case_item" => {
                            let index = if kind == "case_item" {
                                parent.seen
                            } else {
                                parent.seen + 1
                            };
                            parent.seen += 1;
                            parent.branches.get(index).copied().unwrap_or(Status::Maybe)
                        }
                        _ if field == Some("condition") || !node.is_named() => Status::Live,
                        "comment" => Status::Live,
                        _ => parent.branches.first().copied().unwrap_or(Status::Maybe),
                    }
                } else if kind == "do_group" {
                    parent.body
                } else if let Some(first) = parent.first {
                    if node.id() == first || !node.is_named() {
                        Status::Live
                    } else {
                        Status::Maybe
                    }
                } else {
                    Status::Live
                };
                inherited.and(own)
            }
        };
        let mut frame = StatusFrame {
            id: node.id(),
            kind,
            status,
            branches: Vec::new(),
            seen: 0,
            conds: 0,
            test: self.next_test,
            body: Status::Live,
            first: None,
            topics: Topics::default(),
        };
        match kind {
            "if_statement" | "case_statement" => {
                frame.topics = self.tested(node);
                // As in Python, a function (or the script) that tests LoRA has an arm for each.
                let scope = self.scope();
                if let Some(s) = self.facts.scopes.get_mut(scope) {
                    s.tests = s.tests.union(frame.topics);
                }
            }
            _ => {}
        }
        match kind {
            "if_statement" => {
                frame.branches = self.if_branches(node);
                let mut c = node.walk();
                let has_else = node.children(&mut c).any(|n| n.kind() == "else_clause");
                frame.conds = frame.branches.len() - usize::from(has_else);
            }
            "case_statement" => {
                frame.branches = self.case_branches(node);
                let mut c = node.walk();
                frame.conds = node
                    .named_children(&mut c)
                    .filter(|n| n.kind() == "case_item")
                    .position(|it| {
                        let mut cc = it.walk();
                        let any = it
                            .children_by_field_name("value", &mut cc)
                            .any(|p| self.text(p) == "*");
                        any
                    })
                    .unwrap_or(frame.branches.len());
                // A case with no items still marks the frame as a branching one.
                if frame.branches.is_empty() {
                    frame.branches.push(Status::Maybe);
                }
            }
            "while_statement" | "until_statement" | "for_statement" | "c_style_for_statement" => {
                frame.body = self.loop_status(node)
            }
            "list" => {
                frame.first = node.named_child(0).map(|n| n.id());
                frame.conds = 1;
            }
            _ => {}
        }
        self.next_test += frame.conds as u32;
        self.frames.push(frame);
    }

    /// What the tests of an `if` (and its `elif`s) or the word a `case` matches read.
    fn tested(&self, node: Node) -> Topics {
        let mut topics = Topics::default();
        let mut c = node.walk();
        for (i, ch) in node.children(&mut c).enumerate() {
            let field = node.field_name_for_child(i as u32);
            if matches!(field, Some("condition" | "value")) {
                topics = topics.union(Topics::of(self.text(ch)));
            } else if ch.kind() == "elif_clause" {
                topics = topics.union(self.tested(ch));
            }
        }
        topics
    }

    /// The topics the tests around the node being visited read.
    pub(super) fn guard(&self) -> Topics {
        self.frames
            .iter()
            .fold(Topics::default(), |t, f| t.union(f.topics))
    }

    /// The status of each branch of an `if`: the first whose known condition holds runs, the
    /// ones before it whose conditions are known false never run.
    fn if_branches(&mut self, stmt: Node) -> Vec<Status> {
        let mut conds: Vec<Option<Node>> = Vec::new();
        let mut c = stmt.walk();
        let mut first = None;
        for (i, ch) in stmt.children(&mut c).enumerate() {
            if first.is_none()
                && stmt.field_name_for_child(i as u32) == Some("condition")
                && ch.is_named()
            {
                first = Some(ch);
            }
        }
        conds.push(first);
        let mut has_else = false;
        let mut c = stmt.walk();
        for ch in stmt.children(&mut c) {
            match ch.kind() {
                "elif_clause" => {
                    let mut cc = ch.walk();
                    let cond = ch.named_children(&mut cc).find(|n| n.kind() != "comment");
                    conds.push(cond);
                }
                "else_clause" => has_else = true,
                _ => {}
            }
        }
        let mut out = Vec::new();
        let (mut decided, mut unsure) = (false, false);
        for cond in conds {
            if decided {
                out.push(Status::Dead);
                continue;
            }
            match cond.and_then(|n| self.cond_value(n)) {
                Some(true) => {
                    decided = true;
                    out.push(if unsure { Status::Maybe } else { Status::Live });
                }
                Some(false) => out.push(Status::Dead),
                None => {
                    unsure = true;
                    out.push(Status::Maybe);
                }
            }
        }
        if has_else {
            out.push(if decided {
                Status::Dead
            } else if unsure {
                Status::Maybe
            } else {
                Status::Live
            });
        }
        out
    }

    /// The value of a test (`[ "$X" = y ]`, `[[ $N -gt 1 ]]`) when its operands are known.
    fn cond_value(&mut self, node: Node) -> Option<bool> {
        let test = match node.kind() {
            "test_command" => node.named_child(0)?,
            _ => return None,
        };
        if test.kind() != "binary_expression" {
            return None;
        }
        let (l, r, op) = (
            test.field("left")?,
            test.field("right")?,
            test.field("operator")?,
        );
        let lv = self.known_text(l)?;
        let rv = self.known_text(r)?;
        let num = |s: &str| s.trim().parse::<i64>().ok();
        Some(match self.text(op) {
            "=" | "==" if !rv.contains(['*', '?', '[']) => lv == rv,
            "!=" if !rv.contains(['*', '?', '[']) => lv != rv,
            "-eq" => num(&lv)? == num(&rv)?,
            "-ne" => num(&lv)? != num(&rv)?,
            "-gt" => num(&lv)? > num(&rv)?,
            "-ge" => num(&lv)? >= num(&rv)?,
            "-lt" => num(&lv)? < num(&rv)?,
            "-le" => num(&lv)? <= num(&rv)?,
            _ => return None,
        })
    }

    fn known_text(&mut self, node: Node) -> Option<String> {
        let chars: Vec<RChar> = self
            .vars
            .expand_source(self.text(node), node.start_byte(), Mode::Assign)
            .into_iter()
            .flatten()
            .collect();
        is_known(&chars).then(|| text_of(&chars))
    }

    /// The status of each item of a `case` whose value is known: the first that matches runs.
    fn case_branches(&mut self, stmt: Node) -> Vec<Status> {
        let value = stmt.field("value").and_then(|v| self.known_text(v));
        let mut states = Vec::new();
        let mut decided = false;
        let mut c = stmt.walk();
        let items: Vec<Node> = stmt
            .named_children(&mut c)
            .filter(|n| n.kind() == "case_item")
            .collect();
        for it in items {
            let state = match &value {
                None => Status::Maybe,
                Some(_) if decided => Status::Dead,
                Some(v) => {
                    let mut cc = it.walk();
                    let pats: Vec<String> = it
                        .children_by_field_name("value", &mut cc)
                        .map(|p| self.text(p).trim_matches(['"', '\'']).to_string())
                        .collect();
                    if pats.iter().any(|p| p == "*" || p == v) {
                        decided = true;
                        Status::Live
                    } else if pats.iter().any(|p| p.contains(['*', '?', '[', '$'])) {
                        Status::Maybe
                    } else {
                        Status::Dead
                    }
                }
            };
            states.push(state);
        }
        states
    }

    /// A loop body runs zero or more times; the option-parsing loop (`while [[ $# -gt 0 ]]`,
    /// `for arg in "$@"`) only when the script is given arguments.
    fn loop_status(&self, lp: Node) -> Status {
        let body_start = lp.field("body").map_or(lp.end_byte(), |b| b.start_byte());
        let header = self.src.get(lp.start_byte()..body_start).unwrap_or("");
        if ["$#", "$@", "$*", "$1", "${1", "getopts"]
            .iter()
            .any(|w| header.contains(w))
        {
            return Status::Dead;
        }
        if lp.kind() == "for_statement" {
            let mut c = lp.walk();
            if lp.children_by_field_name("value", &mut c).count() == 1 {
                return Status::Live;
            }
        }
        Status::Maybe
    }
}
