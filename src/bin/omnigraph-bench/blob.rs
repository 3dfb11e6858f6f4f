//! The blob workload: one 64 MiB managed value read in 4 MiB ranges, side
//! by side with the same bytes read from a plain file and through pylance's
//! `take_blobs` (when python has it); a stat's cost (ETag included); and the
//! time to first byte of `omnigraph blob get` in a fresh process.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use base64::Engine;
use omnigraph::{Blob, BlobCell, LoadMode, Omnigraph, Target};

/// The plain file is read in the steps the blob reader takes.
const STEP: u64 = omnigraph::exec::blob::MAX_RANGE_BYTES;
const SCHEMA: &str = "node Asset { name: String @key\n data: Blob? }";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

pub async fn run(dir: &str, mib: usize, repeats: usize) {
    let n = mib << 20;
    let data = bytes(n);
    std::fs::create_dir_all(dir).expect("dir");
    let plain = format!("{dir}/plain.bin");
    std::fs::write(&plain, &data).expect("plain file");
    let uri = format!("{dir}/blob.omni");
    let _ = std::fs::remove_dir_all(&uri);
    let g = Omnigraph::init(&uri, SCHEMA).await.expect("init");
    let line = format!(
        r#"{{"type":"Asset","data":{{"name":"a1","data":"base64:{}"}}}}"#,
        base64::engine::general_purpose::STANDARD.encode(&data)
    );
    g.load("main", &line, LoadMode::Overwrite)
        .await
        .expect("load");
    let cell = BlobCell::new("Asset", "a1", "data");
    let main = Target::main();

    let mut ours = Vec::new();
    for _ in 0..repeats {
        let Blob::Managed { reader, length, .. } =
            g.read_blob_at(&main, &cell).await.expect("stat")
        else {
            panic!("managed")
        };
        assert_eq!(length, n as u64);
        let t0 = Instant::now();
        let mut sum = 0u64;
        for step in omnigraph::exec::blob::steps(0..length) {
            let b = reader.read_range(step).await.expect("read");
            sum += b[b.len() - 1] as u64;
        }
        std::hint::black_box(sum);
        ours.push(t0.elapsed().as_secs_f64());
    }
    let mut file = Vec::new();
    let f = std::fs::File::open(&plain).expect("open");
    let mut buf = vec![0u8; STEP as usize];
    for _ in 0..repeats {
        let t0 = Instant::now();
        let mut at = 0;
        while at < n as u64 {
            let len = STEP.min(n as u64 - at) as usize;
            f.read_exact_at(&mut buf[..len], at).expect("pread");
            std::hint::black_box(&buf);
            at += len as u64;
        }
        file.push(t0.elapsed().as_secs_f64());
    }
    let mbs = |secs: f64| n as f64 / (1 << 20) as f64 / secs;
    let (ours, file) = (median(ours), median(file));
    println!("| read of a {mib} MiB blob in 4 MiB ranges | MB/s | vs plain file |");
    println!("|---|---|---|");
    println!("| plain file (pread) | {:.0} | 1.00x |", mbs(file));
    println!(
        "| Omnigraph `read_range` | {:.0} | {:.2}x the time |",
        mbs(ours),
        ours / file
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/blob_pylance.py");
    let table = format!("{uri}/nodes/Asset.lance");
    match std::process::Command::new("python3")
        .args([script, &table, "data", &repeats.to_string()])
        .output()
    {
        Ok(out) if out.status.success() => {
            let secs: f64 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("the script prints seconds");
            println!(
                "| pylance `take_blobs` + `read_range` | {:.0} | {:.2}x the time |",
                mbs(secs),
                secs / file
            );
        }
        Ok(out) => println!(
            "| pylance | skipped: {} | |",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ),
        Err(e) => println!("| pylance | skipped: {e} | |"),
    }

    // A stat on a warm handle: locate the row, the descriptor, the ETag.
    let mut stats = Vec::new();
    for _ in 0..200 {
        let t0 = Instant::now();
        let b = g.read_blob_at(&main, &cell).await.expect("stat");
        stats.push(t0.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(b);
    }
    let mut hashes = Vec::new();
    let witness = omnigraph::util::ulid::new_ulid();
    for _ in 0..10_000 {
        let t0 = Instant::now();
        let e = omnigraph::storage::blob::etag(&omnigraph::storage::blob::EtagInput {
            table_id: 1,
            incarnation: 2,
            property_id: 3,
            table_version: 4,
            row_id: 5,
            transaction: witness.as_bytes(),
        });
        hashes.push(t0.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(e.expect("etag"));
    }
    println!();
    println!(
        "stat (warm handle, ETag included): median {:.2} ms; the ETag digest itself: median {:.2} us",
        median(stats),
        median(hashes)
    );
    g.close().await;

    // A fresh process: open, locate, first range, first byte on stdout.
    let cli = std::env::current_exe()
        .expect("exe")
        .with_file_name("omnigraph");
    let mut first = Vec::new();
    let mut whole = Vec::new();
    for _ in 0..repeats.max(5) {
        let t0 = Instant::now();
        let mut child = std::process::Command::new(&cli)
            .args(["blob", "get", "--store", &uri, "Asset", "a1", "data"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the omnigraph binary next to this one");
        let mut out = child.stdout.take().expect("stdout");
        let mut one = [0u8; 1];
        out.read_exact(&mut one).expect("a first byte");
        first.push(t0.elapsed().as_secs_f64() * 1e3);
        let mut rest = Vec::with_capacity(n);
        out.read_to_end(&mut rest).expect("the rest");
        assert_eq!(rest.len() + 1, n);
        assert!(child.wait().expect("wait").success());
        whole.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "`omnigraph blob get` in a fresh process: first byte median {:.1} ms, all {mib} MiB median {:.1} ms",
        median(first),
        median(whole)
    );
}
