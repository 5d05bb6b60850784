//! Positions in a text: a line index for O(log n) offset → (row, column) lookups, the row and
//! column users see, and character boundaries.

/// Byte offsets of line starts, for O(log n) offset → (row, column) lookups.
#[derive(Debug, Clone)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1));
        LineIndex { starts }
    }

    /// 0-based line of a byte offset.
    pub fn line_of(&self, offset: usize) -> usize {
        match self.starts.binary_search(&offset) {
            Ok(line) => line,
            Err(next) => next - 1,
        }
    }

    pub fn line_start(&self, line: usize) -> usize {
        self.starts.get(line).copied().unwrap_or(usize::MAX)
    }

    pub fn line_count(&self) -> usize {
        self.starts.len()
    }
}

fn memchr_iter(needle: u8, hay: &[u8]) -> impl Iterator<Item = usize> + '_ {
    hay.iter()
        .enumerate()
        .filter_map(move |(i, &b)| (b == needle).then_some(i))
}

/// A 1-based row and a 1-based column counted in characters, as every output format reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub row: usize,
    pub column: usize,
}

/// The nearest character boundary at or before `offset`.
pub fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// The rest of the logical line from `from`: up to a newline outside brackets and not escaped.
/// A bracket in a string may carry it further, never stop it sooner than the line's end.
pub fn logical_line(bytes: &[u8], from: usize) -> &[u8] {
    let mut depth = 0i32;
    let mut at = from;
    while at < bytes.len() {
        match bytes[at] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'\n' if depth <= 0 && (at == 0 || bytes[at - 1] != b'\\') => break,
            _ => {}
        }
        at += 1;
    }
    &bytes[from..at]
}
