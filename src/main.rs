//! The `omnigraph` binary; the command line lives in [`cli`].

mod cli;

fn main() {
    cli::main()
}
