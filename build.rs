//! Links the `omnigraph` command as a fixed-address executable on Linux.
//! The binary is large (Lance, DataFusion), and as a position-independent
//! executable the dynamic linker applies some 350,000 relocations before
//! `main`: 9.6 ms of every one-shot command's start against 2.5 ms
//! without them (docs/benchmarks.md, "Cold key lookups").

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-link-arg-bin=omnigraph=-no-pie");
    }
}
