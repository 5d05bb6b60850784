fn main() {
    std::process::exit(memlint::cli::main());
}
