//! The command line: `memlint [check] [PATHS]`, `memlint rule CODE`, `memlint rules`,
//! `memlint estimate`, `memlint server`.

mod estimate;

use crate::diagnostic::Applicability;
use crate::fix;
use crate::lint::{lint, LintOptions};
use crate::report::{self, DocFormat, Format};
use crate::rules::catalog;
use crate::settings::{CliOverrides, Resolver};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

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
enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Args, Debug, Default)]
struct CheckArgs {
    /// Files or folders to lint (default: the current folder).
    paths: Vec<PathBuf>,
    /// Rule codes or prefixes to enable (replaces the default set).
    #[arg(long, value_delimiter = ',')]
    select: Option<Vec<String>>,
    /// Rule codes or prefixes to disable.
    #[arg(long, value_delimiter = ',')]
    ignore: Vec<String>,
    /// Rule codes or prefixes to enable in addition.
    #[arg(long, value_delimiter = ',')]
    extend_select: Vec<String>,
    /// Glob patterns to exclude in addition to the configured ones.
    #[arg(long, value_delimiter = ',')]
    extend_exclude: Vec<String>,
    /// Apply safe fixes.
    #[arg(long)]
    fix: bool,
    /// Also apply unsafe fixes (with --fix or --diff).
    #[arg(long)]
    unsafe_fixes: bool,
    /// Print the fixes as a unified diff and change nothing.
    #[arg(long)]
    diff: bool,
    /// Exit with 0 even when diagnostics are reported.
    #[arg(long)]
    exit_zero: bool,
    /// Apply excludes to files given explicitly too (for pre-commit).
    #[arg(long)]
    force_exclude: bool,
    /// Use this configuration file instead of discovering one.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Ignore all configuration files.
    #[arg(long, conflicts_with = "config")]
    isolated: bool,
    /// Output format (default: full on a terminal, concise otherwise).
    #[arg(long, value_enum, env = "MEMLINT_OUTPUT_FORMAT")]
    output_format: Option<Format>,
    #[arg(long, value_enum, default_value = "auto")]
    color: Option<Color>,
    /// Parse every file, even those the literal prefilter rules out (for testing the prefilter).
    #[arg(long, hide = true)]
    no_prefilter: bool,
    /// Number of worker threads (default: one per core).
    #[arg(long, hide = true)]
    threads: Option<usize>,
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
        Some(Command::Check(args)) => check(args),
        Some(Command::Rule {
            code,
            output_format,
        }) => rule(&code, output_format),
        Some(Command::Rules { output_format }) => rules(output_format),
        Some(Command::Server) => crate::server::main(),
        Some(Command::Estimate(args)) => estimate::run(args),
        None => check(cli.check),
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

fn check(args: CheckArgs) -> i32 {
    if let Some(n) = args.threads {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global();
    }
    let cwd = crate::discover::cwd();
    let overrides = CliOverrides {
        select: args.select.clone(),
        ignore: args.ignore.clone(),
        extend_select: args.extend_select.clone(),
        extend_exclude: args.extend_exclude.clone(),
    };
    let resolver = match Resolver::new(overrides, args.config.as_deref(), args.isolated, cwd) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("memlint: error: {e}");
            return 2;
        }
    };
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let opts = LintOptions {
        prefilter: !args.no_prefilter,
        force_exclude: args.force_exclude,
    };
    let mut run = lint(&paths, &resolver, opts);

    let threshold = if args.unsafe_fixes {
        Applicability::Unsafe
    } else {
        Applicability::Safe
    };
    let mut fixed = 0;
    let mut io_failed = false;
    let mut diffs = String::new();
    if args.fix || args.diff {
        for r in &mut run.results {
            let Some(result) = fix::fix_file(r, threshold) else {
                continue;
            };
            if args.diff {
                diffs.push_str(&fix::unified_diff(
                    &r.file.display,
                    r.file.disk_text(),
                    &result.new_text,
                ));
                fixed += result.applied;
                continue;
            }
            match fix::write_atomic(&r.file.path, &result.new_text) {
                Ok(()) => {
                    fixed += r.diagnostics.len().saturating_sub(result.remaining.len());
                    r.diagnostics = result.remaining;
                    // Positions of what remains refer to the new text.
                    r.file = std::sync::Arc::new(result.file);
                }
                Err(e) => {
                    eprintln!(
                        "memlint: error: {}: cannot write the fix: {e}",
                        r.file.display
                    );
                    io_failed = true;
                }
            }
        }
    }
    for e in &run.errors {
        eprintln!("memlint: error: {}: {}", e.path, e.message);
    }
    for s in &run.skipped {
        eprintln!("memlint: warning: {}: skipped: {}", s.path, s.reason);
    }
    if args.fix {
        for r in &run.results {
            if r.syntax_error && r.diagnostics.iter().any(|d| d.fix.is_some()) {
                eprintln!(
                    "memlint: warning: {}: has syntax errors; analysed what parses, not rewritten",
                    r.file.display
                );
            }
        }
    }

    if args.diff {
        print_out(&diffs);
        if fixed > 0 {
            eprintln!(
                "Would fix {fixed} diagnostic{}.",
                if fixed == 1 { "" } else { "s" }
            );
        }
        return if !run.errors.is_empty() || io_failed {
            2
        } else if fixed > 0 && !args.exit_zero {
            1
        } else {
            0
        };
    }

    let entries = report::entries(&run.results);
    let terminal = std::io::stdout().is_terminal();
    let format = args.output_format.unwrap_or(if terminal {
        Format::Full
    } else {
        Format::Concise
    });
    let out = match format {
        Format::Full => {
            let width = std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(100);
            let mut s = report::render_full(
                &entries,
                use_color(args.color.unwrap_or(Color::Auto)),
                width,
            );
            s.push_str(&report::summary(&entries, fixed));
            s
        }
        Format::Concise => {
            let mut s = report::render_concise(&entries);
            s.push_str(&report::summary(&entries, fixed));
            s
        }
        Format::Json => report::render_json(&entries),
        Format::JsonLines => report::render_json_lines(&entries),
        Format::Github => {
            let mut s = report::render_github(&entries);
            s.push_str(&report::summary(&entries, fixed));
            s
        }
        Format::Sarif => report::render_sarif(&entries),
    };
    print_out(&out);

    if !run.errors.is_empty() || io_failed {
        return 2;
    }
    let failing = run.results.iter().any(|r| {
        r.diagnostics
            .iter()
            .any(|d| report::severity_of(d.code) >= r.settings.fail_on)
    });
    if failing && !args.exit_zero {
        1
    } else {
        0
    }
}
