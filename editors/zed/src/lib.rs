//! The Zed extension: starts `memlint server` from the PATH the worktree sees.

use zed_extension_api::{self as zed, LanguageServerId, Result, Worktree};

struct Memlint;

impl zed::Extension for Memlint {
    fn new() -> Self {
        Memlint
    }

    fn language_server_command(
        &mut self,
        _id: &LanguageServerId,
        worktree: &Worktree,
    ) -> Result<zed::Command> {
        let command = worktree.which("memlint").ok_or_else(|| {
            "memlint is not on PATH: `pip install memlint-ml` or `cargo install --path .`"
                .to_string()
        })?;
        Ok(zed::Command {
            command,
            args: vec!["server".into()],
            env: Vec::new(),
        })
    }
}

zed::register_extension!(Memlint);
