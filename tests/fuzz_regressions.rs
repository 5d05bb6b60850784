//! The fuzz targets' checks (shared with `fuzz/`) over the inputs kept in `tests/fuzz_inputs/`:
//! edge cases written for each target, and every input a fuzzing run found failing, once fixed.
//! To add one: copy `fuzz/artifacts/TARGET/crash-*` to `tests/fuzz_inputs/TARGET/`.

#[path = "../fuzz/src/checks.rs"]
mod checks;

use std::path::PathBuf;

#[test]
fn kept_fuzz_inputs_pass_every_check() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_inputs");
    for (target, check) in checks::TARGETS {
        let dir = root.join(target);
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "no inputs for {target}");
        for path in inputs {
            let data = std::fs::read(&path).expect("read input");
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{target}: {} fails", path.display());
        }
    }
}
