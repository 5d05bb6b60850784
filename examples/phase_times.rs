//! Where a run's time goes: the prefilter, parsing, and the walk that extracts facts, over the
//! Python files of a folder held in memory (a profiling aid). `REPEAT=n` repeats each phase.
use memlint::prefilter::{needs, Wanted};
use memlint::source::Language;
use std::time::{Duration, Instant};

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let repeat: usize = std::env::var("REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let wanted = Wanted {
        suppressions: false,
        ..Wanted::ALL
    };
    let texts: Vec<(String, String)> = ignore::Walk::new(&dir)
        .flatten()
        .filter(|e| e.path().extension().and_then(|e| e.to_str()) == Some("py"))
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            Some((e.path().display().to_string(), text))
        })
        .collect();
    let t = Instant::now();
    let mut parsed = Vec::new();
    for _ in 0..repeat {
        parsed = texts
            .iter()
            .filter_map(|(p, t)| {
                let n = needs(Language::Python, t, wanted);
                n.parse.then_some((p, t, n))
            })
            .collect();
    }
    let scan = t.elapsed() / repeat as u32;
    let (mut parse, mut extract) = (Duration::ZERO, Duration::ZERO);
    let mut per_file: Vec<(Duration, usize, &str)> = Vec::new();
    for (p, text, loops) in &parsed {
        let t = Instant::now();
        for _ in 0..repeat {
            drop(memlint::frontend::python::parse(text));
        }
        parse += t.elapsed() / repeat as u32;
        let t = Instant::now();
        for _ in 0..repeat {
            let reads = memlint::frontend::python::Reads {
                loops: loops.loop_model,
                values: loops.value_model,
            };
            let _ = memlint::frontend::python::extract_with(text, reads);
        }
        let e = t.elapsed() / repeat as u32;
        extract += e;
        per_file.push((e, text.len(), p));
    }
    per_file.sort();
    for (e, len, p) in per_file.iter().rev().take(10) {
        println!("{:8.1} ms {:7} KB {p}", e.as_secs_f64() * 1e3, len / 1024);
    }
    println!(
        "scan {scan:?} ({} files); parse {parse:?}, parse and walk {extract:?} ({} files)",
        texts.len(),
        parsed.len()
    );
}
