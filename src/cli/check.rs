//! `memlint [check] [PATHS]`: what is checked before a run starts (the selectors, the
//! configuration files, the paths), the run itself over files or over standard input, and what
//! is printed where: diagnostics on stdout, warnings and errors on stderr, `--quiet` keeping only
//! the diagnostics and `--silent` nothing but the errors that end a run.

use super::{print_out, show, use_color, Color};
use crate::diagnostic::Applicability;
use crate::discover::Candidate;
use crate::fix;
use crate::lint::{self, LintOptions, Overlay, Run};
use crate::report::{self, Format, Tally};
use crate::settings::{self, CliOverrides, Resolver};
use crate::source::Language;
use clap::Args;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Default)]
pub struct CheckArgs {
    /// Files or folders to lint (default: the current folder); `-` reads standard input.
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
    /// Lint standard input as this file (with `-` as the path): its project gives the context.
    #[arg(long, value_name = "NAME")]
    stdin_filename: Option<PathBuf>,
    /// Count the diagnostics per code instead of listing them.
    #[arg(long, conflicts_with_all = ["fix", "diff"])]
    statistics: bool,
    /// Print the diagnostics and nothing else.
    #[arg(short, long, conflicts_with = "silent")]
    quiet: bool,
    /// Print nothing; the exit code tells (errors that end the run are still printed).
    #[arg(short, long)]
    silent: bool,
    /// Add `# memlint: ignore[CODE]` to each line that reports a diagnostic.
    #[arg(long, conflicts_with_all = ["fix", "diff", "statistics", "stdin_filename"])]
    add_noqa: bool,
    /// List the files that would be linted and exit.
    #[arg(long, conflicts_with_all = ["fix", "diff", "statistics", "add_noqa", "show_settings"])]
    show_files: bool,
    /// Print the settings that apply to the first file and exit.
    #[arg(long, conflicts_with_all = ["fix", "diff", "statistics", "add_noqa"])]
    show_settings: bool,
    /// Parse every file, even those the literal prefilter rules out (for testing the prefilter).
    #[arg(long, hide = true)]
    no_prefilter: bool,
    /// Number of worker threads (default: one per core).
    #[arg(long, hide = true)]
    threads: Option<usize>,
}

/// How much is printed besides the errors.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Silent,
    Quiet,
    Default,
}

/// An error that ends the run: printed whatever the level, exit code 2.
fn fail(message: impl std::fmt::Display) -> i32 {
    eprintln!("memlint: error: {message}");
    2
}

fn warn(level: Level, message: impl std::fmt::Display) {
    if level == Level::Default {
        eprintln!("memlint: warning: {message}");
    }
}

pub fn check(args: CheckArgs) -> i32 {
    if let Some(n) = args.threads {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global();
    }
    let level = if args.silent {
        Level::Silent
    } else if args.quiet {
        Level::Quiet
    } else {
        Level::Default
    };
    let cwd = crate::discover::cwd();
    let overrides = CliOverrides {
        select: args.select.clone(),
        ignore: args.ignore.clone(),
        extend_select: args.extend_select.clone(),
        extend_exclude: args.extend_exclude.clone(),
    };
    // Everything that can end the run is checked before any file is read.
    if let Err(e) = settings::validate_cli(&overrides) {
        return fail(e);
    }
    if args.statistics
        && !matches!(
            args.output_format,
            None | Some(Format::Full | Format::Concise | Format::Json)
        )
    {
        return fail("--statistics prints text (full, concise) or json");
    }
    let stdin = match stdin_name(&args) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let resolver = match Resolver::new(overrides, args.config.as_deref(), args.isolated, cwd) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let opts = LintOptions {
        prefilter: !args.no_prefilter,
        force_exclude: args.force_exclude,
    };
    if let Some(name) = stdin {
        if args.add_noqa || args.show_files || args.show_settings {
            return fail(
                "standard input is linted as a text: --add-noqa, --show-files and --show-settings need paths",
            );
        }
        return check_stdin(&args, level, &name, &resolver, opts);
    }
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let mut missing = false;
    for p in &paths {
        if let Err(e) = std::fs::metadata(p) {
            eprintln!(
                "memlint: error: {}: {}",
                p.display(),
                crate::discover::io_message(&e)
            );
            missing = true;
        }
    }
    if missing {
        return 2;
    }
    for p in &paths {
        let settings = if p.is_dir() {
            resolver.for_dir(p)
        } else {
            resolver.for_file(p)
        };
        if let Err(e) = settings {
            return fail(e);
        }
    }
    let (candidates, errors) = lint::candidates_with(&paths, &resolver, opts, &Overlay::new());
    // A configuration file below a path given (a project's own `.memlint.toml`) is read before
    // its files are.
    for c in &candidates {
        if let Err(e) = resolver.for_file(&c.path) {
            return fail(e);
        }
    }
    if args.show_settings {
        return show::settings(&resolver, &candidates, &paths, &args.extend_exclude);
    }
    if args.show_files {
        return show::files(&candidates, &errors);
    }
    if candidates.is_empty() {
        warn(level, "no files found under the given paths");
    }
    let run = lint_in_context(candidates, errors, &paths, &resolver, opts);
    if args.add_noqa {
        return add_noqa(&run, level);
    }
    finish(&args, level, run, None)
}

/// Lint `candidates`, with the launchers and configs around each file named on the command line
/// read for context (a pre-commit hook names only the files that changed: the launcher that runs
/// a script, and the config it opens, still give the script its context).
fn lint_in_context(
    candidates: Vec<Candidate>,
    errors: Vec<crate::discover::PathError>,
    paths: &[PathBuf],
    resolver: &Resolver,
    opts: LintOptions,
) -> Run {
    let cwd = crate::discover::cwd();
    let files: Vec<PathBuf> = paths
        .iter()
        .filter(|p| p.is_file())
        .map(|p| settings::absolute(p, &cwd))
        .collect();
    let around = crate::discover::neighbours(&files, &cwd);
    lint::lint_in_context(candidates, errors, &around, resolver, opts, &Overlay::new())
}

/// The name standard input is linted under: `Some` when `-` is the only path (or no path is
/// given with `--stdin-filename`); `-` is read as Python without a name.
fn stdin_name(args: &CheckArgs) -> Result<Option<PathBuf>, String> {
    let dash = args.paths.iter().any(|p| p.as_os_str() == "-");
    if dash && args.paths.len() > 1 {
        return Err("`-` (standard input) cannot be given with other paths".into());
    }
    match (&args.stdin_filename, dash || args.paths.is_empty()) {
        (Some(name), true) => Ok(Some(name.clone())),
        (Some(_), false) => {
            Err("--stdin-filename names standard input: give `-` as the only path".into())
        }
        (None, _) if dash => Ok(Some(PathBuf::from("-"))),
        (None, _) => Ok(None),
    }
}

/// Lint standard input as `name`, inside `name`'s project: its configuration applies and the
/// files around it give the context. With `--fix` the fixed text goes to stdout and the report
/// to stderr.
fn check_stdin(
    args: &CheckArgs,
    level: Level,
    name: &Path,
    resolver: &Resolver,
    opts: LintOptions,
) -> i32 {
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        return fail(format!("cannot read standard input: {e}"));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return fail("standard input is not valid UTF-8");
    };
    let language = if name.as_os_str() == "-" {
        Some(Language::Python)
    } else if name.extension().is_some() {
        Language::from_path(name)
    } else {
        Language::from_shebang(text.lines().next().unwrap_or("").as_bytes())
    };
    if language.is_none() {
        return fail(format!(
            "{}: not a file memlint reads (.py, .ipynb, .sh, .yaml, .json, .toml, a shell shebang)",
            name.display()
        ));
    }
    let settings = match resolver.for_file(name) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let cwd = crate::discover::cwd();
    let abs = settings::absolute(name, &cwd);
    if args.force_exclude && settings.is_excluded(&abs) {
        // Excluded: nothing to report, and the text passes through unchanged.
        if args.fix {
            print_out(&text);
        }
        return 0;
    }
    let overlay: Overlay = [(abs.clone(), text.clone())].into_iter().collect();
    // The project gives the context; only the text read is reported on.
    let (candidates, errors) =
        lint::candidates_with(&[name.to_path_buf()], resolver, opts, &overlay);
    let around = crate::discover::neighbours(std::slice::from_ref(&abs), &cwd);
    let mut run = lint::lint_in_context(candidates, errors, &around, resolver, opts, &overlay);
    run.warnings.clear();
    finish(args, level, run, Some(&text))
}

/// Apply or show fixes, print the report, and give the exit code. `stdin`: the text read from
/// standard input, which `--fix` prints fixed instead of writing a file.
fn finish(args: &CheckArgs, level: Level, mut run: Run, stdin: Option<&str>) -> i32 {
    let threshold = if args.unsafe_fixes {
        Applicability::Unsafe
    } else {
        Applicability::Safe
    };
    let mut fixed = 0;
    let mut io_failed = false;
    let mut diffs = String::new();
    let mut fixed_stdin: Option<String> = None;
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
            let written = match stdin {
                Some(_) => {
                    fixed_stdin = Some(result.new_text.clone());
                    Ok(())
                }
                None => fix::write_atomic(&r.file.path, &result.new_text),
            };
            match written {
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
        warn(level, format!("{}: skipped: {}", s.path, s.reason));
    }
    for w in &run.warnings {
        warn(level, w);
    }
    if args.fix {
        for r in &run.results {
            if r.syntax_error && r.diagnostics.iter().any(|d| d.fix.is_some()) {
                warn(
                    level,
                    format!(
                        "{}: has syntax errors; analysed what parses, not rewritten",
                        r.file.display
                    ),
                );
            }
        }
    }
    let failed = !run.errors.is_empty() || io_failed;

    if args.diff {
        if level > Level::Silent {
            print_out(&diffs);
        }
        if fixed > 0 && level == Level::Default {
            eprintln!(
                "Would fix {fixed} diagnostic{}.",
                if fixed == 1 { "" } else { "s" }
            );
        }
        return if failed {
            2
        } else if fixed > 0 && !args.exit_zero {
            1
        } else {
            0
        };
    }

    let entries = report::entries(&run.results);
    // With `--fix` on standard input, stdout carries the text: the report goes to stderr.
    let report_to_stderr = stdin.is_some() && args.fix;
    let terminal = if report_to_stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let format = args.output_format.unwrap_or(if terminal {
        Format::Full
    } else {
        Format::Concise
    });
    let tally = Tally {
        fixed,
        threshold: Some(threshold),
        failed,
    };
    let summary = |s: &mut String| {
        if level == Level::Default {
            s.push_str(&report::summary(&entries, tally));
        }
    };
    let out = if args.statistics {
        match format {
            Format::Json => report::render_statistics_json(&entries, threshold),
            _ => {
                let mut s = report::render_statistics(&entries, threshold);
                summary(&mut s);
                s
            }
        }
    } else {
        match format {
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
                summary(&mut s);
                s
            }
            Format::Concise => {
                let mut s = report::render_concise_with(&entries, threshold);
                summary(&mut s);
                s
            }
            Format::Json => report::render_json(&entries),
            Format::JsonLines => report::render_json_lines(&entries),
            Format::Github => {
                let mut s = report::render_github(&entries);
                summary(&mut s);
                s
            }
            Format::Sarif => report::render_sarif(&entries),
        }
    };
    if let Some(text) = stdin.filter(|_| args.fix) {
        // The fixed text, or the text as read when nothing was fixed.
        print_out(fixed_stdin.as_deref().unwrap_or(text));
        if level > Level::Silent {
            eprint!("{out}");
        }
    } else if level > Level::Silent {
        print_out(&out);
    }

    if failed {
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

/// `--add-noqa`: a directive for every diagnostic, written atomically file by file; a file that
/// does not parse, or where a directive would not silence its line, is left as it is.
fn add_noqa(run: &Run, level: Level) -> i32 {
    let mut failed = !run.errors.is_empty();
    for e in &run.errors {
        eprintln!("memlint: error: {}: {}", e.path, e.message);
    }
    for s in &run.skipped {
        warn(level, format!("{}: skipped: {}", s.path, s.reason));
    }
    for w in &run.warnings {
        warn(level, w);
    }
    let mut added = 0;
    for r in &run.results {
        match fix::add_directives(r) {
            Ok(None) => {}
            Ok(Some(d)) => match fix::write_atomic(&r.file.path, d.file.disk_text()) {
                Ok(()) => added += d.lines,
                Err(e) => {
                    eprintln!(
                        "memlint: error: {}: cannot write the directives: {e}",
                        r.file.display
                    );
                    failed = true;
                }
            },
            Err(reason) => warn(
                level,
                format!("{}: no directive added: {reason}", r.file.display),
            ),
        }
    }
    if level == Level::Default {
        eprintln!(
            "Added {added} suppression directive{}.",
            if added == 1 { "" } else { "s" }
        );
    }
    if failed {
        2
    } else {
        0
    }
}
