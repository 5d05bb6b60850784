use memlint::prefilter::{needs_parse, Wanted};
use std::io::BufRead;
fn main() {
    let kinds = [
        (
            "memory",
            Wanted {
                memory: true,
                ..Wanted::default()
            },
        ),
        (
            "acc",
            Wanted {
                accumulation: true,
                ..Wanted::default()
            },
        ),
        (
            "units",
            Wanted {
                units: true,
                ..Wanted::default()
            },
        ),
        (
            "tables",
            Wanted {
                tables: true,
                ..Wanted::default()
            },
        ),
        (
            "batch",
            Wanted {
                batch: true,
                ..Wanted::default()
            },
        ),
        ("all", Wanted::ALL),
    ];
    let mut counts = vec![0; kinds.len()];
    let mut n = 0;
    for line in std::io::stdin().lock().lines() {
        let Ok(p) = line else { continue };
        let Ok(t) = std::fs::read_to_string(&p) else {
            continue;
        };
        n += 1;
        for (i, (_, w)) in kinds.iter().enumerate() {
            if needs_parse(memlint::source::Language::Python, &t, *w) {
                counts[i] += 1;
            }
        }
    }
    for (i, (k, _)) in kinds.iter().enumerate() {
        eprintln!("{k}: {}/{n}", counts[i]);
    }
}
