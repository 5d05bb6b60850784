//! What the end-to-end tests share: the binary run in a folder, and a project written to one.

use assert_cmd::Command;
use std::fs;
use std::path::Path;

/// The `memlint` binary, run in `dir`, with no colour or format set by the environment.
pub fn memlint(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("memlint").expect("binary");
    cmd.current_dir(dir)
        .env_remove("NO_COLOR")
        .env_remove("FORCE_COLOR")
        .env_remove("MEMLINT_OUTPUT_FORMAT");
    cmd
}

/// A temporary folder holding `files` (paths relative to it, folders created).
pub fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        let path = dir.path().join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("mkdir");
        }
        fs::write(path, text).expect("write");
    }
    dir
}
