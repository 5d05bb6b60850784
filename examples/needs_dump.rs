//! Prints the prefilter's decision for every file under a folder, for several sets of reported
//! rules: `path wanted parse loop_model value_model`. Diff two runs to prove a change to the
//! prefilter keeps its decisions. A notebook is printed twice: its raw JSON, and its code cells
//! as Python (what a run scans).
use memlint::prefilter::{needs, Wanted};
use memlint::source::{Language, SourceFile};
use std::io::Write;
use std::path::PathBuf;

fn wanted_sets() -> Vec<(&'static str, Wanted)> {
    let none = Wanted::default();
    vec![
        ("all", Wanted::ALL),
        (
            "all-nosupp",
            Wanted {
                suppressions: false,
                ..Wanted::ALL
            },
        ),
        (
            "memory",
            Wanted {
                memory: true,
                ..none
            },
        ),
        (
            "accumulation",
            Wanted {
                accumulation: true,
                ..none
            },
        ),
        (
            "global_batch",
            Wanted {
                global_batch: true,
                ..none
            },
        ),
        (
            "units",
            Wanted {
                units: true,
                ..none
            },
        ),
        (
            "tables",
            Wanted {
                tables: true,
                ..none
            },
        ),
        (
            "batch",
            Wanted {
                batch: true,
                ..none
            },
        ),
        ("fit", Wanted { fit: true, ..none }),
        (
            "states",
            Wanted {
                states: true,
                ..none
            },
        ),
        (
            "checkpointing",
            Wanted {
                checkpointing: true,
                ..none
            },
        ),
        (
            "trainer_loss",
            Wanted {
                trainer_loss: true,
                ..none
            },
        ),
    ]
}

fn main() {
    let sets = wanted_sets();
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    for dir in std::env::args().skip(1) {
        let mut paths: Vec<PathBuf> = ignore::Walk::new(&dir)
            .flatten()
            .map(|e| e.into_path())
            .filter(|p| {
                let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
                matches!(ext, "py" | "ipynb" | "yaml" | "yml" | "json") && p.is_file()
            })
            .collect();
        paths.sort();
        for path in paths {
            let Some(language) = Language::from_path(&path) else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let mut inputs = vec![(language, text.clone(), "")];
            if language == Language::Notebook {
                if let Ok(Some(file)) =
                    SourceFile::from_notebook(path.clone(), String::new(), text.clone())
                {
                    inputs.push((Language::Python, file.text.to_string(), " cells"));
                }
            }
            for (language, text, tag) in &inputs {
                for (name, wanted) in &sets {
                    let n = needs(*language, text, *wanted);
                    let _ = writeln!(
                        out,
                        "{}{tag} {name} {} {} {}",
                        path.display(),
                        n.parse as u8,
                        n.loop_model as u8,
                        n.value_model as u8
                    );
                }
            }
        }
    }
}
