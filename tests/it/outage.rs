//! The S3 server stopped in the middle of a write: a TCP proxy in front of
//! the local S3 server goes down (every connection cut, new ones refused)
//! right after it forwards a chosen request of a writer process. The writer
//! must fail typed and promptly, and once the server is back the graph
//! recovers the interrupted write and accepts writes again.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use omnigraph::{LoadMode, Omnigraph};
use parking_lot::Mutex;
use serde_json::json;

use crate::common::{
    PEOPLE, Place, SCHEMA, assert_each_write_published_once, changes, person_names, stored,
};

/// The lease time of the writer processes: short, so that the cut-off
/// writer's gates pass on quickly once the server is back.
const CHILD_LEASE_MS: &str = "1000";

/// How long a writer process may take to give up once the server is gone
/// before the test calls it hung.
const GIVE_UP_LIMIT: Duration = Duration::from_secs(120);

/// A forwarding proxy that can be stopped like a server: when down, every
/// open connection is shut and the port refuses connections.
struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: SocketAddr,
    /// A request line holding this (with method PUT) stops the server once
    /// its response has been forwarded.
    trip: String,
    down: AtomicBool,
    tripped: AtomicBool,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
        for c in self.conns.lock().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Proxy {
    fn start(upstream: SocketAddr, trip: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream,
            trip: trip.to_string(),
            down: AtomicBool::new(false),
            tripped: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        std::thread::spawn(move || serve(listener, s));
        Self { port, shared }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn tripped(&self) -> bool {
        self.shared.tripped.load(Ordering::SeqCst)
    }

    /// The server is back, on the same port.
    fn restart(&self) {
        self.shared.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.go_down();
    }
}

/// Accept while up; while down the listener is closed, so connecting is
/// refused as with a stopped server, and it is bound again on restart.
fn serve(first: TcpListener, s: Arc<Shared>) {
    let port = first.local_addr().unwrap().port();
    let mut listener = Some(first);
    while !s.stop.load(Ordering::SeqCst) {
        if s.down.load(Ordering::SeqCst) {
            listener = None;
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let l = listener.get_or_insert_with(|| {
            TcpListener::bind(("127.0.0.1", port)).expect("rebind the proxy's port")
        });
        l.set_nonblocking(true).unwrap();
        match l.accept() {
            Ok((client, _)) => {
                client.set_nonblocking(false).unwrap();
                let Ok(server) = TcpStream::connect(s.upstream) else {
                    continue;
                };
                {
                    let mut conns = s.conns.lock();
                    conns.push(client.try_clone().unwrap());
                    conns.push(server.try_clone().unwrap());
                }
                let armed = Arc::new(AtomicBool::new(false));
                let (s1, a1) = (s.clone(), armed.clone());
                let (c1, v1) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || requests(c1, v1, &s1, &a1));
                let s2 = s.clone();
                std::thread::spawn(move || responses(server, client, &s2, &armed));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => {}
        }
    }
}

/// Client to server, watching request lines for the trip request.
fn requests(mut from: TcpStream, mut to: TcpStream, s: &Shared, armed: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                let l = String::from_utf8_lossy(&line);
                if l.starts_with("PUT ")
                    && l.contains(&s.trip)
                    && !s.tripped.swap(true, Ordering::SeqCst)
                {
                    armed.store(true, Ordering::SeqCst);
                }
                line.clear();
            } else if line.len() < 4096 {
                line.push(b);
            }
        }
        if s.down.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// Server to client; the trip request's answer is the last thing through.
fn responses(mut from: TcpStream, mut to: TcpStream, s: &Shared, armed: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if s.down.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
            break;
        }
        if armed.load(Ordering::SeqCst) {
            s.go_down();
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// The local S3 server the suite runs against.
fn upstream() -> SocketAddr {
    let url = std::env::var("AWS_ENDPOINT_URL")
        .expect("the S3 tests need the local S3 server, which the test binary starts (scripts/s3-env.sh): see its message above");
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    hostport
        .parse()
        .expect("AWS_ENDPOINT_URL is http://IP:PORT")
}

/// `omnigraph load --mode append` of one person through the proxy, with a
/// small retry budget (as a user would set for a fast failure).
fn load_through(proxy: &Proxy, place: &Place, uri: &str, name: &str) -> std::process::Output {
    let file = place.scratch().join(format!("{name}.jsonl"));
    std::fs::write(
        &file,
        format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"{name}\"}}}}\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .env("AWS_ENDPOINT_URL", proxy.endpoint())
        .env("OMNIGRAPH_LEASE_MS", CHILD_LEASE_MS)
        .env("OBJECT_STORE_CLIENT_MAX_RETRIES", "1")
        .env("OBJECT_STORE_CLIENT_RETRY_TIMEOUT", "5")
        .args([
            "load",
            "--data",
            file.to_str().unwrap(),
            "--mode",
            "append",
            uri,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > GIVE_UP_LIMIT {
            child.kill().unwrap();
            panic!("a writer cut off from the S3 server hung for {GIVE_UP_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Stop the server right after the writer's request matching `trip`; the
/// writer fails typed; after the restart a second writer recovers the
/// interrupted write (forward if `rolled_forward`, else back) and commits.
async fn server_stopped_mid_write(trip: &str, rolled_forward: bool) {
    let place = Place::s3();
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.close().await;
    let before = changes(&uri).await;

    let proxy = Proxy::start(upstream(), trip);
    let cut = load_through(&proxy, &place, &uri, "Cut");
    assert!(proxy.tripped(), "the writer never sent a PUT of {trip}");
    let stderr = String::from_utf8_lossy(&cut.stderr);
    assert_eq!(cut.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error[StorageError]"), "{stderr}");
    // The interrupted write is on storage, waiting for recovery.
    assert_eq!(stored(&uri, "_graph/recovery").await.len(), 1);

    proxy.restart();
    let after = load_through(&proxy, &place, &uri, "After");
    assert!(
        after.status.success(),
        "{}",
        String::from_utf8_lossy(&after.stderr)
    );
    let mut expected = vec![json!("Alice"), json!("After"), json!("Bob"), json!("Carol")];
    if rolled_forward {
        expected.push(json!("Cut"));
    }
    expected.sort_by_key(|v| v.as_str().unwrap().to_string());
    assert_eq!(
        person_names(&Omnigraph::open_read_only(&uri).await.unwrap()).await,
        expected
    );
    assert!(stored(&uri, "_graph/recovery").await.is_empty());

    // The interrupted write was resolved once, and only its own commit
    // (if rolled forward) and the second writer's were published.
    assert_each_write_published_once(&uri).await;
    let now = changes(&uri).await;
    let new = &now[before.len()..];
    let commits = new.iter().filter(|(kind, _)| kind == "commit").count();
    assert_eq!(
        commits,
        if rolled_forward { 2 } else { 1 },
        "commits after the cut: {new:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_server_stopped_after_the_intent_is_recorded_rolls_back_after_restart() {
    server_stopped_mid_write("/_graph/recovery/", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_server_stopped_after_the_table_commit_rolls_forward_after_restart() {
    server_stopped_mid_write("/_versions/", true).await;
}
