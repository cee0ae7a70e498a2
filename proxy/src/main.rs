//! The `airlock` command: serve the proxy, drive runs and effects over the admin API, run the demo.

fn main() -> std::process::ExitCode {
    airlock::cli::main()
}
