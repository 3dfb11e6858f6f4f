//! The `omnigraph` command line: arguments ([`args`]), one function per
//! command ([`commands`]), human output ([`table`]), the load progress bar
//! and the guided demo. Errors go to stderr as `error[Kind]: message` with
//! an exit code per kind.

mod args;
mod commands;
mod demo;
mod progress;
mod table;

use clap::Parser;

pub fn main() {
    // SAFETY: the first thing the process does, before any thread starts.
    unsafe { omnigraph::util::cores::let_lance_use_the_cores() };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OMNIGRAPH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,lance=error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = args::Cli::parse();
    if !matches!(cli.cmd, args::Cmd::Serve(_)) {
        // A reader that stops reading (`omnigraph commit list | head`) ends
        // the command quietly, as it ends any Unix tool, instead of a panic
        // in the middle of a print. The server keeps Rust's ignore: a client
        // that goes away fails its own request, not the process.
        // SAFETY: no thread has started yet.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(commands::run(cli.cmd));
    if let Err(e) = result {
        eprintln!("error[{}]: {e}", e.kind());
        std::process::exit(e.exit_code());
    }
}
