// jemalloc, for Rust and (unprefixed) for tree-sitter's C allocations too: a parse allocates and
// frees one small node at a time; with glibc's malloc a run spends a sixth of its time allocating.
#[cfg(any(
    all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"),
    target_os = "macos"
))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    std::process::exit(memlint::cli::main());
}
