//! The formulas and memory facts memlint reads from one Python file (a debugging aid).
fn main() {
    let path = std::env::args().nth(1).expect("usage: facts_dump FILE");
    let text = std::fs::read_to_string(&path).expect("read");
    match memlint::frontend::python::extract_with(&text, memlint::frontend::python::Reads::ALL) {
        Ok(f) => {
            for x in &f.formulas {
                println!(
                    "FORMULA {:?} `{}` stages={:?} stage_guard={}\n  {:?}",
                    x.kind,
                    &text[x.span.clone()],
                    x.stages,
                    x.guard.stage,
                    x.lin
                );
            }
            println!("EVIDENCE {:#?}", f.evidence);
            println!("CONSTANTS {:?}", f.constants);
            println!("CHECKPOINTED {:?}", f.checkpointed);
            if std::env::var("LOOPS").is_ok() {
                println!("LOOPS {:#?}", f.loops);
                println!("LINKS {:#?}", f.links);
            }
            for t in &f.tables {
                println!("TABLE {t:?}");
            }
        }
        Err(e) => eprintln!("{e}"),
    }
}
