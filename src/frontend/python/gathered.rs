//! Lists a training loop gathers across the micro-steps of a window: a loss computed from them
//! covers the whole window (see `provenance.rs`).

/// Names a file fills across the micro-steps of a window and empties again: appended to
/// (`feats.append(x)`, `feats[k].append(x)`, `feats.extend(xs)`) and bound to an empty list or
/// dict (`feats = []`, `imgs, feats = [], {}`). Read before the walk: a loss over data gathered
/// so covers the whole window (see `provenance.rs`).
pub(super) fn window_lists(src: &str) -> Vec<String> {
    let bytes = src.as_bytes();
    let mut filled: Vec<String> = Vec::new();
    for call in [&b".append("[..], b".extend("] {
        for at in memchr::memmem::find_iter(bytes, call) {
            // `feats[k].append(...)`: the container is the name before the subscript.
            let mut end = at;
            if bytes[..end].ends_with(b"]") {
                let mut depth = 0usize;
                while end > 0 {
                    end -= 1;
                    match bytes[end] {
                        b']' => depth += 1,
                        b'[' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            filled.extend(super::statements::receiver_before(src, end));
        }
    }
    if filled.is_empty() {
        return filled;
    }
    let empty = |v: &str| matches!(v.trim(), "[]" | "{}" | "list()" | "dict()");
    let mut emptied: Vec<&str> = Vec::new();
    for line in src.lines() {
        let Some((left, right)) = line.split_once('=') else {
            continue;
        };
        if right.starts_with('=') || left.ends_with(['!', '<', '>', '=']) {
            continue;
        }
        if right.split(',').all(empty) {
            emptied.extend(left.split(',').map(str::trim));
        }
    }
    filled.retain(|n| emptied.contains(&n.as_str()) && !only_filled(src, n));
    filled.sort();
    filled.dedup();
    filled
}

/// Whether a list is only ever filled in this file, never read: every use of its name appends
/// to it, binds it, returns it, or hands it to a function of this file that only appends to it
/// (`forward_step(..., losses_reduced)`). Such a list is a log, not data a loss reads.
fn only_filled(src: &str, name: &str) -> bool {
    uses(src, name).all(|at| {
        let rest = &src[at + name.len()..];
        let before = src[..at].trim_end();
        let after = rest.trim_start();
        rest.starts_with(".append(")
            || rest.starts_with(".extend(")
            || (after.starts_with('=') && !after.starts_with("=="))
            || before.ends_with("return")
            || ((before.ends_with(['(', ',']) && after.starts_with([',', ')']))
                && handed_to_filler(src, at))
    })
}

/// The word-bounded uses of `name` in `src`, by byte offset.
fn uses<'a>(src: &'a str, name: &'a str) -> impl Iterator<Item = usize> + 'a {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    src.match_indices(name).map(|(i, _)| i).filter(move |&i| {
        !src[..i]
            .chars()
            .next_back()
            .is_some_and(|c| word(c) || c == '.')
            && !src[i + name.len()..].chars().next().is_some_and(word)
    })
}

/// Whether the bare argument `name` at `at` is a parameter of a `def`, or is handed to a
/// function of this file (`f(...)` or `self.f(...)`, defined once) whose body only appends to
/// the parameter it is given for.
fn handed_to_filler(src: &str, at: usize) -> bool {
    // The call's opening parenthesis and the argument's position among the ones before it.
    let (mut depth, mut position, mut open) = (0usize, 0usize, None);
    for (i, c) in src[..at].char_indices().rev() {
        match c {
            ')' | ']' | '}' => depth += 1,
            '(' | '[' | '{' if depth > 0 => depth -= 1,
            '(' => {
                open = Some(i);
                break;
            }
            '[' | '{' => return false,
            ',' if depth == 0 => position += 1,
            _ => {}
        }
    }
    let Some(open) = open else {
        return false;
    };
    let head = src[..open].trim_end();
    let callee_start = head
        .char_indices()
        .rfind(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '.'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let callee = &head[callee_start..];
    if head[..callee_start].trim_end().ends_with("def") {
        return true;
    }
    let (function, method) = match callee.strip_prefix("self.") {
        Some(f) => (f, true),
        None => (callee, false),
    };
    if function.is_empty() || function.contains('.') {
        return false;
    }
    let def = format!("def {function}(");
    let mut defs = src.match_indices(&def).map(|(i, _)| i);
    let (Some(def_at), None) = (defs.next(), defs.next()) else {
        return false;
    };
    let params_start = def_at + def.len();
    let Some(params_len) = src[params_start..]
        .find("):")
        .or_else(|| src[params_start..].find(')'))
    else {
        return false;
    };
    let params: Vec<&str> = src[params_start..params_start + params_len]
        .split(',')
        .map(|p| p.split([':', '=']).next().unwrap_or("").trim())
        .filter(|p| !p.is_empty() && !p.starts_with('*'))
        .collect();
    let Some(param) = params.get(position + usize::from(method)) else {
        return false;
    };
    if !param.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return false;
    }
    // The body: the lines after the signature indented deeper than the `def`.
    let indent = def_at - src[..def_at].rfind('\n').map_or(0, |n| n + 1);
    let body_start = src[params_start..]
        .find('\n')
        .map_or(src.len(), |n| params_start + n + 1);
    let mut body_end = body_start;
    for line in src[body_start..].split_inclusive('\n') {
        let text = line.trim_start();
        if !text.is_empty() && !text.starts_with('#') && line.len() - text.len() <= indent {
            break;
        }
        body_end += line.len();
    }
    let body = &src[body_start..body_end];
    let mut any = false;
    uses(body, param).all(|i| {
        any = true;
        let rest = &body[i + param.len()..];
        rest.starts_with(".append(") || rest.starts_with(".extend(")
    }) && any
}

#[cfg(test)]
mod tests {
    #[test]
    fn window_lists_are_filled_and_emptied() {
        let src = "cache, seen = [], {}\nlog = []\nfor b in dl:\n    cache.append(b)\n    seen[k].append(b)\n    log.append(1)\n    other.append(2)\n    log = log[-10:]\n";
        assert_eq!(
            super::window_lists(src),
            vec!["cache".to_string(), "log".to_string(), "seen".to_string()]
        );
    }

    #[test]
    fn a_call_after_a_wide_character_is_read_whole() {
        // `→(logs)`: the callee ends at a character of several bytes.
        let src = "logs = []\nfor _ in range(4):\n    logs.append(1)\n    x = \"→\"→(logs)\n";
        assert_eq!(super::window_lists(src), vec!["logs".to_string()]);
    }

    #[test]
    fn a_list_only_filled_is_not_gathered() {
        let src = "def fwd(it, logs):\n    logs.append(it)\n    return it\n\ndef run(it):\n    logs = []\n    for _ in range(4):\n        fwd(it, logs)\n    return logs\n";
        assert!(super::window_lists(src).is_empty());
        let read = src.replace("    return logs\n", "    loss = sum(logs)\n");
        assert_eq!(super::window_lists(&read), vec!["logs".to_string()]);
    }
}
