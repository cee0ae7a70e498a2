//! The `airlock` command: serve the proxy, drive runs and effects over the admin API, run the demo.

/// The process's allocator: mimalloc (fewer cycles per request than glibc malloc on the
/// pass path; docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    airlock::cli::main()
}
