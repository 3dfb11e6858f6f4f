//! The `omnigraph` command line: arguments ([`args`]), one function per
//! command ([`commands`]), human output ([`table`]), the load progress bar
//! and the guided demo. Errors go to stderr as `error[Kind]: message` with
//! an exit code per kind.

mod access;
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
    // A reader that stops reading (`omnigraph commit list | head`) ends the
    // command quietly with exit 0, as `blob get` always did; Rust's print
    // macros panic on a closed stdout, so that one panic ends the process.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default_hook(info);
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        access::configure(cli.actor, cli.policy)?;
        commands::run(cli.cmd).await
    });
    if let Err(e) = result {
        eprintln!("error[{}]: {e}", e.kind());
        std::process::exit(e.exit_code());
    }
}
