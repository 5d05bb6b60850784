//! The command line: `memlint [check] [PATHS]`, `memlint rule CODE`, `memlint rules`,
//! `memlint estimate`, `memlint server`. `check.rs` runs a lint, `show.rs` answers
//! `--show-files` and `--show-settings`.

mod check;
mod estimate;
mod show;

use crate::report::{self, DocFormat};
use crate::rules::catalog;
use check::CheckArgs;
use clap::{Parser, Subcommand, ValueEnum};
use std::io::{IsTerminal, Write};

#[derive(Parser, Debug)]
#[command(
    name = "memlint",
    version,
    about = "Lint GPU-memory, gradient-accumulation and batch-size arithmetic in ML training code and configs",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    check: CheckArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Lint files and folders (the default command).
    Check(CheckArgs),
    /// Print a rule's documentation.
    Rule {
        code: String,
        #[arg(long, value_enum, default_value = "text")]
        output_format: DocFormat,
    },
    /// Speak the Language Server Protocol over stdin and stdout (for editors).
    Server,
    /// Estimate the GPU memory of each run of a project, or of the run the flags describe.
    Estimate(estimate::EstimateArgs),
    /// List the rules.
    Rules {
        #[arg(long, value_enum, default_value = "text")]
        output_format: DocFormat,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub(crate) enum Color {
    Auto,
    Always,
    Never,
}

/// Run the command line; returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match cli.command {
        Some(Command::Check(args)) => check::check(args),
        Some(Command::Rule {
            code,
            output_format,
        }) => rule(&code, output_format),
        Some(Command::Rules { output_format }) => rules(output_format),
        Some(Command::Server) => crate::server::main(),
        Some(Command::Estimate(args)) => estimate::run(args),
        None => check::check(cli.check),
    }
}

fn rule(code: &str, format: DocFormat) -> i32 {
    let code = code.to_ascii_uppercase();
    let Some(page) = catalog::page(&code)
        .filter(|p| crate::rules::implemented_codes().contains(&p.code.as_str()))
    else {
        eprintln!("memlint: error: unknown rule `{code}` (see `memlint rules`)");
        return 2;
    };
    print_out(&report::render_rule_page(page, format));
    0
}

fn rules(format: DocFormat) -> i32 {
    let codes = crate::rules::implemented_codes();
    let pages: Vec<_> = codes.iter().filter_map(|c| catalog::page(c)).collect();
    print_out(&report::render_rule_list(&pages, format));
    0
}

fn print_out(s: &str) {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let _ = lock.write_all(s.as_bytes());
    let _ = lock.flush();
}

fn use_color(choice: Color) -> bool {
    match choice {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => {
            let set = |k: &str| {
                std::env::var_os(k).is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
            };
            if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
                false
            } else if set("FORCE_COLOR") || set("CLICOLOR_FORCE") {
                true
            } else {
                std::io::stdout().is_terminal()
            }
        }
    }
}
