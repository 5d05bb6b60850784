//! How many files of a folder each rule family makes memlint parse (a profiling aid).
use memlint::prefilter::{needs, Wanted};
use memlint::source::Language;

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let families: Vec<(&str, Wanted)> = vec![
        (
            "memory",
            Wanted {
                memory: true,
                ..Wanted::default()
            },
        ),
        (
            "accumulation",
            Wanted {
                accumulation: true,
                ..Wanted::default()
            },
        ),
        (
            "trainer_loss",
            Wanted {
                trainer_loss: true,
                ..Wanted::default()
            },
        ),
        (
            "global_batch",
            Wanted {
                global_batch: true,
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
        (
            "fit",
            Wanted {
                fit: true,
                memory: true,
                batch: true,
                ..Wanted::default()
            },
        ),
        (
            "states",
            Wanted {
                states: true,
                ..Wanted::default()
            },
        ),
        (
            "checkpointing",
            Wanted {
                checkpointing: true,
                ..Wanted::default()
            },
        ),
        (
            "default",
            Wanted {
                suppressions: false,
                ..Wanted::ALL
            },
        ),
        (
            "base-default",
            Wanted {
                suppressions: false,
                states: false,
                checkpointing: false,
                trainer_loss: false,
                global_batch: false,
                ..Wanted::ALL
            },
        ),
    ];
    let mut counts = vec![(0usize, 0usize); families.len()];
    for entry in ignore::Walk::new(&dir).flatten() {
        let p = entry.path();
        if p.extension().and_then(|e| e.to_str()) != Some("py") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(p) else {
            continue;
        };
        for (i, (_, w)) in families.iter().enumerate() {
            let n = needs(Language::Python, &text, *w);
            if n.parse {
                if std::env::var("LIST").is_ok_and(|l| l == families[i].0) {
                    println!("{}", p.display());
                }
                counts[i].0 += 1;
                counts[i].1 += text.len();
            }
        }
    }
    for ((name, _), (n, bytes)) in families.iter().zip(counts) {
        println!("{name:14} {n:5} files {:8.1} KB", bytes as f64 / 1024.0);
    }
}
