//! Embeds the rule catalogue (`rules/*.toml`) and the knowledge tables (`rules/knowledge/*.toml`).

use std::fmt::Write;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=rules");
    let mut out = String::new();
    for (dir, name) in [("rules", "PAGES"), ("rules/knowledge", "TABLES")] {
        println!("cargo:rerun-if-changed={dir}");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|p: &std::path::PathBuf| p.extension().is_some_and(|e| e == "toml"));
        files.sort();
        let _ = writeln!(out, "pub static {name}: &[(&str, &str)] = &[");
        for f in files {
            let stem = f
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            let abs = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join(&f);
            let _ = writeln!(
                out,
                "    ({stem:?}, include_str!({:?})),",
                abs.display().to_string()
            );
        }
        let _ = writeln!(out, "];");
    }
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap_or_default()).join("catalog.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}
