//! Fixes are promises that the program still works. Every training-loop fixture that
//! `--fix --unsafe-fixes` changes is run, before and after, on recording stand-ins for torch,
//! apex, accelerate, DeepSpeed and Lightning (`tests/standins/run.py`, no torch needed) under
//! every combination of the settings it tests: the fixed program must run without an exception,
//! keep the optimizer-step protocol (each step applies its window's mean gradient, clips after
//! the window's last backward and after `unscale_`, one `unscale_` and one `step` per scaler
//! update, the schedule once per step), and draw no finding from memlint's default rules; the
//! original must break the protocol on the stand-ins, or the run proves nothing about it.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};
use std::process;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("read").filter_map(Result::ok) {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            fs::copy(&path, &target).expect("copy");
        }
    }
}

fn python_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read").filter_map(Result::ok) {
        let p = entry.path();
        if p.is_dir() {
            python_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "py") {
            out.push(p);
        }
    }
}

/// Programs whose optimizers step on different cadences (a GAN's discriminator on every batch,
/// its generator once per window). The stand-ins keep one gradient account for all optimizers,
/// as they cannot tell which parameters a backward reaches: they neither see these bugs nor pass
/// the fixes. Their fixed text is checked by the snapshots and by the lint below, not run.
const SEVERAL_CADENCES: &[&str] = &[
    "GA001/bad_m107_dcgan_disc_accumulation.py",
    "GA001/bad_m107_ema_student_confidence_head.py",
    "GA003/bad_m106_gan_generator_window.py",
    "GA003/bad_m107_actor_critic_episode_batches.py",
    "GA003/bad_m107_ddpg_critic_accumulation.py",
    "GA003/bad_m107_encoder_with_linear_probe.py",
    "GA003/bad_m107_gan_generator_accumulation.py",
    "GA003/bad_m107_soft_q_temperature.py",
    "GA005/bad_generator_clip_before_critic_step.py",
];

/// Run the stand-ins on one program: `Ok(summary)` when it keeps the protocol.
fn on_standins(file: &Path) -> Result<String, String> {
    let out = process::Command::new("python3")
        .arg(root().join("tests/standins/run.py"))
        .arg(file.file_name().expect("name"))
        .current_dir(file.parent().expect("folder"))
        .output()
        .expect("python3 is needed for this test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

#[test]
fn fixed_loops_run_and_keep_the_protocol() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut originals = Vec::new();
    for entry in fs::read_dir(root().join("fixtures"))
        .expect("fixtures")
        .filter_map(Result::ok)
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("GA") {
            copy_tree(&entry.path(), &work.path().join(&name));
            python_files(&entry.path(), &mut originals);
        }
    }
    Command::cargo_bin("memlint")
        .expect("binary")
        .current_dir(work.path())
        .args([
            "check",
            "--isolated",
            "--select",
            "ALL",
            "--fix",
            "--unsafe-fixes",
            ".",
        ])
        .output()
        .expect("run memlint");
    let mut fixed = Vec::new();
    for original in &originals {
        let rel = original
            .strip_prefix(root().join("fixtures"))
            .expect("inside fixtures");
        let copy = work.path().join(rel);
        if fs::read_to_string(original).ok() != fs::read_to_string(&copy).ok() {
            fixed.push((original.clone(), copy));
        }
    }
    assert!(
        fixed.len() >= 140,
        "only {} loop fixtures were fixed: the fixes stopped applying",
        fixed.len()
    );
    for listed in SEVERAL_CADENCES {
        assert!(
            fixed.iter().any(|(o, _)| o.ends_with(listed)),
            "{listed} is listed in SEVERAL_CADENCES, but no fix changes it"
        );
    }
    // Each program runs on its own; the machine's cores share them.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((original, copy)) = fixed.get(k) else {
                    break;
                };
                let found = check_fixed(original, copy);
                failures.lock().expect("lock").extend(found);
            });
        }
    });
    let mut failures = failures.into_inner().expect("lock");
    failures.sort();
    assert!(
        failures.is_empty(),
        "{} of {} fixed programs:\n{}",
        failures.len(),
        fixed.len(),
        failures.join("\n")
    );
}

/// What is wrong with one fixed program: it breaks on the stand-ins, its original does not (for
/// the programs the stand-ins can judge), or it still draws findings.
fn check_fixed(original: &Path, copy: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let name = original.display();
    let rel = original
        .strip_prefix(root().join("fixtures"))
        .expect("inside fixtures");
    if !SEVERAL_CADENCES.iter().any(|s| rel == Path::new(s)) {
        if let Err(why) = on_standins(copy) {
            failures.push(format!("{name}, fixed, breaks on the stand-ins:\n{why}"));
        }
        if let Ok(ran) = on_standins(original) {
            failures.push(format!(
                "{name}, before its fix, keeps the protocol on the stand-ins ({}): they do not see its bug",
                ran.trim()
            ));
        }
    }
    // With the rules users run: an opt-in rule (GA006's mean of token means) may ask for
    // more of a loop than the fix that made it divide once.
    let lint = Command::cargo_bin("memlint")
        .expect("binary")
        .current_dir(copy.parent().expect("folder"))
        .args(["check", "--isolated", "--output-format", "concise"])
        .arg(copy.file_name().expect("name"))
        .output()
        .expect("run memlint");
    if !lint.status.success() {
        failures.push(format!(
            "{name}, fixed, still draws findings:\n{}",
            String::from_utf8_lossy(&lint.stdout)
        ));
    }
    failures
}
