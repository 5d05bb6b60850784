// Parsing makes many small, short-lived allocations, in tree-sitter's C as in Rust; mimalloc
// serves both faster than the system allocator (see `scripts/bench.sh`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // SAFETY: set once, before any tree is built, to functions with the C allocator's contracts.
    unsafe {
        tree_sitter::set_allocator(
            Some(libmimalloc_sys::mi_malloc),
            Some(libmimalloc_sys::mi_calloc),
            Some(libmimalloc_sys::mi_realloc),
            Some(libmimalloc_sys::mi_free),
        );
    }
    std::process::exit(memlint::cli::main());
}
