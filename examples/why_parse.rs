//! Why the prefilter keeps each Python file under a folder: `size path check,check,...` for every
//! file the default scan parses, largest first (a profiling aid).
use memlint::prefilter::{needs, reasons, Wanted};
use memlint::source::Language;

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let wanted = Wanted {
        suppressions: false,
        ..Wanted::ALL
    };
    let mut kept: Vec<(usize, String, String)> = ignore::Walk::new(&dir)
        .flatten()
        .filter(|e| e.path().extension().and_then(|e| e.to_str()) == Some("py"))
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            needs(Language::Python, &text, wanted).parse.then(|| {
                let why = reasons(&text).join(",");
                (text.len(), e.path().display().to_string(), why)
            })
        })
        .collect();
    kept.sort_by(|a, b| b.cmp(a));
    for (size, path, why) in kept {
        println!("{size} {path} {why}");
    }
}
