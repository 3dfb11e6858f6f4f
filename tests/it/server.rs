//! `omnigraph serve` end to end over loopback: every route and status,
//! tokens and actors, Arrow IPC, streamed loads and exports, blob ranges,
//! concurrent clients, two servers on one graph, and a SIGKILL during
//! writes. Each server is the real binary; each request loop is bounded.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

/// How long a server may take to open its graphs and bind.
const START_LIMIT: Duration = Duration::from_secs(120);
/// How long one request may take before the test fails.
const REQUEST_LIMIT: Duration = Duration::from_secs(60);

const TOKENS: &str = r#"{"alice": "alice-token", "bob": "bob-token"}"#;

/// A policy that lets every token's actor do anything: tokens alone allow
/// only reads (tests/it/policy.rs holds the rest).
pub const ALLOW_ALL: &str =
    "version: 1\nrules:\n  - id: all\n    allow: { actors: \"*\", actions: [\"*\"] }\n";

const QUERIES: &str = r#"
query person($n: String) { match { $p: Person { name: $n } } return { $p.name, $p.age } }
query people() { match { $p: Person } return { $p.name } order { $p.name } }
"#;
const ADD: &str = r#"query add($n: String, $age: I32?) { insert Person { name: $n, age: $age } }"#;

struct Server {
    child: Child,
    base: String,
    _tokens: tempfile::NamedTempFile,
    _policy: Option<tempfile::NamedTempFile>,
}

impl Server {
    /// Start `omnigraph serve` on `graphs` with the test tokens in a file
    /// (or with `extra` in their place, when it says otherwise).
    fn start(graphs: &[(&str, &str)], extra: &[&str]) -> Self {
        let tokens = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tokens.path(), TOKENS).unwrap();
        let mut cmd = serve_command(graphs);
        let mut policy = None;
        if !extra.contains(&"--unauthenticated") {
            cmd.arg("--tokens").arg(tokens.path());
            if !extra.contains(&"--policy") {
                let p = allow_all();
                cmd.arg("--policy").arg(p.path());
                policy = Some(p);
            }
        }
        cmd.args(extra)
            .env_remove("OMNIGRAPH_TOKENS")
            .env_remove("OMNIGRAPH_POLICY");
        let mut s = Self::spawn(cmd, tokens);
        s._policy = policy;
        s
    }

    /// Start `cmd` and wait for the address it prints.
    fn spawn(mut cmd: Command, tokens: tempfile::NamedTempFile) -> Self {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(START_LIMIT)
            .expect("the server printed its address");
        let addr = line
            .trim()
            .strip_prefix("OMNIGRAPH_LISTEN_ADDR=")
            .unwrap_or_else(|| panic!("the first line was {line:?}"))
            .to_string();
        Server {
            child,
            base: format!("http://{addr}"),
            _tokens: tokens,
            _policy: None,
        }
    }

    fn client(&self, token: Option<&str>) -> Client {
        Client {
            http: reqwest::Client::builder()
                .timeout(REQUEST_LIMIT)
                .build()
                .unwrap(),
            base: self.base.clone(),
            token: token.map(str::to_string),
        }
    }

    /// SIGTERM, then the exit status (bounded).
    fn stop(mut self) -> std::process::ExitStatus {
        signal(&self.child, "TERM");
        wait_bounded(&mut self.child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A file of [`ALLOW_ALL`].
pub fn allow_all() -> tempfile::NamedTempFile {
    let p = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::fs::write(p.path(), ALLOW_ALL).unwrap();
    p
}

/// `omnigraph serve` on `graphs`, on any free loopback port.
fn serve_command(graphs: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_omnigraph"));
    cmd.arg("serve").args(["--listen", "127.0.0.1:0"]);
    for (id, uri) in graphs {
        cmd.args(["--graph", &format!("{id}={uri}")]);
    }
    cmd
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + START_LIMIT;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        json_of(self.req(reqwest::Method::GET, path).send().await.unwrap()).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        json_of(
            self.req(reqwest::Method::POST, path)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// The Prometheus text of `/metrics`.
    async fn metrics(&self) -> String {
        let r = self
            .req(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.text().await.unwrap()
    }

    async fn delete(&self, path: &str) -> (StatusCode, Value) {
        json_of(
            self.req(reqwest::Method::DELETE, path)
                .send()
                .await
                .unwrap(),
        )
        .await
    }
}

async fn json_of(r: reqwest::Response) -> (StatusCode, Value) {
    let status = r.status();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v)
}

/// An error answer: its status, `code` and `kind`, and the body.
fn assert_error(got: &(StatusCode, Value), status: u16, code: &str, kind: &str) {
    assert_eq!(got.0.as_u16(), status, "{}", got.1);
    assert_eq!(got.1["code"], code, "{}", got.1);
    assert_eq!(got.1["kind"], kind, "{}", got.1);
    assert!(
        got.1["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{}",
        got.1
    );
}

/// A loaded graph on disk, its handle closed (the server opens its own).
async fn graph_on_disk() -> (tempfile::TempDir, String) {
    let t = loaded_graph().await;
    let uri = t.uri();
    t.g.close().await;
    (t.dir, uri)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_decide_who_may_call_and_who_a_write_records() {
    let (_dir, uri) = graph_on_disk().await;
    let s = Server::start(&[("g", &uri)], &[]);
    let anon = s.client(None);
    let health = anon.get("/healthz").await;
    assert_eq!(health.0, StatusCode::OK);
    assert_eq!(health.1["status"], "ok");
    assert_eq!(health.1["version"], env!("CARGO_PKG_VERSION"));
    let doc = anon.get("/openapi.json").await;
    assert_eq!(doc.0, StatusCode::OK);
    for route in [
        "/graphs/{id}/query",
        "/graphs/{id}/blob",
        "/graphs/{id}/load/ndjson",
    ] {
        assert!(doc.1["paths"][route].is_object(), "{route} missing");
    }
    let schemas = &doc.1["components"]["schemas"];
    assert!(schemas["QueryRequest"].is_object());
    // The write responses in the reference's wire shapes: affected counts
    // as integers (per type in fields of their own), a load's types as a
    // list of {name, entities_loaded}.
    let mutated = &schemas["MutateResponse"]["properties"];
    for field in ["affected_nodes", "affected_edges"] {
        assert_eq!(mutated[field]["type"], "integer", "{field}: {mutated}");
        assert_eq!(
            mutated[format!("{field}_by_type")]["type"],
            "object",
            "{mutated}"
        );
    }
    let loaded = &schemas["LoadResponse"]["properties"];
    assert_eq!(loaded["total_entities"]["type"], "integer", "{loaded}");
    for field in ["nodes", "edges"] {
        assert_eq!(
            loaded[field]["items"]["$ref"], "#/components/schemas/LoadedType",
            "{loaded}"
        );
    }
    assert_eq!(
        schemas["LoadedType"]["properties"]["entities_loaded"]["type"],
        "integer"
    );

    let missing = anon
        .req(reqwest::Method::GET, "/graphs")
        .send()
        .await
        .unwrap();
    assert_eq!(
        missing.headers()["www-authenticate"],
        "Bearer realm=\"omnigraph\""
    );
    assert_error(&json_of(missing).await, 401, "unauthorized", "Unauthorized");
    let wrong = s.client(Some("alice-token-not"));
    assert_error(
        &wrong.get("/graphs").await,
        401,
        "unauthorized",
        "Unauthorized",
    );
    assert_error(
        &wrong
            .post(
                "/graphs/g/mutate",
                json!({"query": ADD, "params": {"n": "X"}}),
            )
            .await,
        401,
        "unauthorized",
        "Unauthorized",
    );

    let bob = s.client(Some("bob-token"));
    assert_eq!(bob.get("/graphs").await.1, json!({"graphs": [{"id": "g"}]}));
    let m = bob
        .post(
            "/graphs/g/mutate",
            json!({"query": ADD, "params": {"n": "Dan", "age": 7}}),
        )
        .await;
    assert_eq!(m.0, StatusCode::OK, "{}", m.1);
    assert_eq!(m.1["actor_id"], "bob");
    assert_eq!(m.1["branch"], "main");
    assert_eq!(m.1["query_name"], "add");
    assert_eq!(m.1["affected_nodes"], json!(1));
    assert_eq!(m.1["affected_edges"], json!(0));
    assert_eq!(m.1["affected_nodes_by_type"], json!({"Person": 1}));
    assert_eq!(m.1["affected_edges_by_type"], json!({}));
    let cid = m.1["commit"]["graph_commit_id"]
        .as_str()
        .unwrap()
        .to_string();
    let c = bob.get(&format!("/graphs/g/commits/{cid}")).await;
    assert_eq!(c.1["actor_id"], "bob", "{}", c.1);
    // A body cannot choose its actor.
    let chosen = bob
        .post(
            "/graphs/g/mutate",
            json!({"query": ADD, "params": {"n": "Eve"}, "actor_id": "alice"}),
        )
        .await;
    assert_error(&chosen, 400, "bad_request", "BadRequest");
    assert!(chosen.1["error"].as_str().unwrap().contains("actor_id"));
    let alice = s.client(Some("alice-token"));
    let m = alice
        .post(
            "/graphs/g/mutate",
            json!({"query_source": ADD, "query_name": "add", "params": {"n": "Eve"}}),
        )
        .await;
    assert_eq!(m.1["actor_id"], "alice", "{}", m.1);
    let list = alice.get("/graphs/g/commits?limit=2").await;
    let actors: Vec<&str> = list.1["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["actor_id"].as_str().unwrap())
        .collect();
    assert_eq!(actors, ["alice", "bob"]);
    assert_eq!(s.stop().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_without_tokens_refuses_to_start_unless_told() {
    let (_dir, uri) = graph_on_disk().await;
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--graph",
            &format!("g={uri}"),
        ])
        .env_remove("OMNIGRAPH_TOKENS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no tokens") && err.contains("--unauthenticated"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    for bad in ["{}", "not json", r#"{"a": "same", "b": "same"}"#] {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), bad).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--graph",
                &format!("g={uri}"),
            ])
            .arg("--tokens")
            .arg(f.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
    // The same JSON in OMNIGRAPH_TOKENS.
    let mut cmd = serve_command(&[("g", &uri)]);
    let policy = allow_all();
    cmd.env("OMNIGRAPH_TOKENS", r#"{"carol": "carol-token"}"#)
        .arg("--policy")
        .arg(policy.path());
    let from_env = Server::spawn(cmd, tempfile::NamedTempFile::new().unwrap());
    assert_error(
        &from_env.client(Some("alice-token")).get("/graphs").await,
        401,
        "unauthorized",
        "Unauthorized",
    );
    let carol = from_env.client(Some("carol-token"));
    let m = carol
        .post(
            "/graphs/g/mutate",
            json!({"query": ADD, "params": {"n": "Cy"}}),
        )
        .await;
    assert_eq!(m.1["actor_id"], "carol", "{}", m.1);
    assert_eq!(from_env.stop().code(), Some(0));

    let open = Server::start(&[("g", &uri)], &["--unauthenticated"]);
    let anyone = open.client(None);
    let m = anyone
        .post(
            "/graphs/g/mutate",
            json!({"query": ADD, "params": {"n": "Dan"}}),
        )
        .await;
    assert_eq!(m.0, StatusCode::OK, "{}", m.1);
    let author = m.1["actor_id"].as_str().unwrap().to_string();
    let cid = m.1["commit"]["graph_commit_id"].as_str().unwrap();
    let c = anyone.get(&format!("/graphs/g/commits/{cid}")).await;
    assert_eq!(c.1["actor_id"], author.as_str());
    assert_eq!(open.stop().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queries_answer_as_json_and_as_arrow_and_refuse_bad_requests() {
    let (_dir, uri) = graph_on_disk().await;
    let s = Server::start(&[("g", &uri)], &["--max-body-bytes", "4096"]);
    let c = s.client(Some("alice-token"));
    let q = c
        .post(
            "/graphs/g/query",
            json!({"query": QUERIES, "name": "person", "params": {"n": "Alice"}}),
        )
        .await;
    assert_eq!(q.0, StatusCode::OK, "{}", q.1);
    assert_eq!(q.1["query_name"], "person");
    assert_eq!(q.1["target"], json!({"branch": "main"}));
    assert_eq!(q.1["columns"], json!(["p.name", "p.age"]));
    assert_eq!(q.1["row_count"], 1);
    assert_eq!(q.1["rows"], json!([{"p.name": "Alice", "p.age": 34}]));
    // A row's keys come in the `return` order, not sorted.
    let raw = c
        .req(reqwest::Method::POST, "/graphs/g/query")
        .json(&json!({"query": QUERIES, "name": "person", "params": {"n": "Alice"}}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(raw.contains(r#"{"p.name":"Alice","p.age":34}"#), "{raw}");
    let head = c.get("/graphs/g/snapshot").await.1["graph_commit_id"].clone();
    assert_eq!(q.1["graph_commit_id"], head);
    // The only query of a text needs no name; a snapshot reads the past.
    let one = r#"query all() { match { $p: Person } return { $p.name } order { $p.name } }"#;
    let before = head.as_str().unwrap().to_string();
    c.post(
        "/graphs/g/mutate",
        json!({"query": ADD, "params": {"n": "Zed"}}),
    )
    .await;
    let now = c.post("/graphs/g/query", json!({"query": one})).await;
    assert_eq!(now.1["row_count"], 4, "{}", now.1);
    let past = c
        .post("/graphs/g/query", json!({"query": one, "snapshot": before}))
        .await;
    assert_eq!(past.1["row_count"], 3, "{}", past.1);
    assert_eq!(past.1["target"], json!({"snapshot": before}));

    // Arrow IPC, read back with arrow-rs.
    let r = c
        .req(reqwest::Method::POST, "/graphs/g/query")
        .header("accept", "application/vnd.apache.arrow.stream")
        .json(&json!({"query": one}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["content-type"],
        "application/vnd.apache.arrow.stream"
    );
    let bytes = r.bytes().await.unwrap();
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let mut names = Vec::new();
    for b in reader {
        let b = b.unwrap();
        let col = arrow::array::AsArray::as_string::<i32>(b.column(0));
        names.extend(col.iter().map(|v| v.unwrap().to_string()));
    }
    assert_eq!(names, ["Alice", "Bob", "Carol", "Zed"]);

    // Bad requests, each named.
    assert_error(
        &c.post("/graphs/nope/query", json!({"query": one})).await,
        404,
        "not_found",
        "NotFound",
    );
    let bad_json = json_of(
        c.req(reqwest::Method::POST, "/graphs/g/query")
            .body("{not json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&bad_json, 400, "bad_request", "BadRequest");
    let unknown = c
        .post("/graphs/g/query", json!({"query": one, "limit": 3}))
        .await;
    assert_error(&unknown, 400, "bad_request", "BadRequest");
    assert!(
        unknown.1["error"].as_str().unwrap().contains("limit"),
        "{}",
        unknown.1
    );
    let parse = c
        .post("/graphs/g/query", json!({"query": "query q( {"}))
        .await;
    assert_error(&parse, 400, "bad_request", "ParseError");
    let which = c.post("/graphs/g/query", json!({"query": QUERIES})).await;
    assert_error(&which, 400, "bad_request", "BadRequest");
    let mutation = c
        .post(
            "/graphs/g/query",
            json!({"query": ADD, "params": {"n": "Q"}}),
        )
        .await;
    assert_eq!(mutation.0, StatusCode::BAD_REQUEST, "{}", mutation.1);
    assert_eq!(mutation.1["code"], "bad_request");
    let both = c
        .post(
            "/graphs/g/query",
            json!({"query": one, "branch": "main", "snapshot": before}),
        )
        .await;
    assert_error(&both, 400, "bad_request", "BadRequest");
    let no_branch = c
        .post("/graphs/g/query", json!({"query": one, "branch": "nope"}))
        .await;
    assert_error(&no_branch, 404, "not_found", "NotFound");
    let huge = c
        .post(
            "/graphs/g/query",
            json!({"query": one, "params": {"x": "y".repeat(5000)}}),
        )
        .await;
    assert_error(&huge, 413, "bad_request", "ResourceLimitExceeded");
    assert_error(&c.get("/no/such/route").await, 404, "not_found", "NotFound");
    // None of the refused requests wrote anything.
    let after = c.post("/graphs/g/query", json!({"query": one})).await;
    assert_eq!(after.1["row_count"], 4);
    assert_eq!(s.stop().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_branches_merges_and_history_over_http() {
    let (_dir, uri) = graph_on_disk().await;
    let s = Server::start(&[("g", &uri)], &[]);
    let c = s.client(Some("alice-token"));
    let snap = c.get("/graphs/g/snapshot?branch=main").await;
    assert_eq!(snap.0, StatusCode::OK, "{}", snap.1);
    assert_eq!(snap.1["graph_branch"], "main");
    let person = snap.1["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["type"] == "Person")
        .unwrap()
        .clone();
    assert_eq!(person["rows"], 3);
    assert!(person["version"].as_u64().unwrap() >= 1);
    let head = snap.1["graph_commit_id"].as_str().unwrap().to_string();

    // Compare-and-swap: stale head 409, no header 400, current head 200.
    let cas = |h: Option<String>, n: &str| {
        let mut r = c
            .req(reqwest::Method::POST, "/graphs/g/mutate/if-graph-commit")
            .json(&json!({"query": ADD, "params": {"n": n}}));
        if let Some(h) = h {
            r = r.header("Omnigraph-If-Graph-Commit", h);
        }
        async move { json_of(r.send().await.unwrap()).await }
    };
    let ok = cas(Some(head.clone()), "Cas1").await;
    assert_eq!(ok.0, StatusCode::OK, "{}", ok.1);
    let stale = cas(Some(head.clone()), "Cas2").await;
    assert_error(&stale, 409, "conflict", "PreconditionFailed");
    assert_error(&cas(None, "Cas3").await, 400, "bad_request", "BadRequest");
    // A keyed insert is an upsert; a second strict insert of an id is not.
    let doc = r#"query doc($id: String) { insert Doc { title: "t", id: $id } }"#;
    let first = c
        .post(
            "/graphs/g/mutate",
            json!({"query": doc, "params": {"id": "D1"}}),
        )
        .await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.1);
    let dup = c
        .post(
            "/graphs/g/mutate",
            json!({"query": doc, "params": {"id": "D1"}}),
        )
        .await;
    assert_error(&dup, 409, "conflict", "KeyConflict");
    assert_eq!(dup.1["key_conflict"], json!({"type": "Doc", "id": "D1"}));

    // Branches: create, list, a conflict on each side, merge, delete.
    let b = c
        .post("/graphs/g/branches", json!({"name": "feature"}))
        .await;
    assert_eq!(b.0, StatusCode::OK, "{}", b.1);
    assert_eq!(b.1["name"], "feature");
    assert_error(
        &c.post("/graphs/g/branches", json!({"name": "feature"}))
            .await,
        409,
        "conflict",
        "AlreadyExists",
    );
    let names: Vec<Value> = c.get("/graphs/g/branches").await.1["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].clone())
        .collect();
    assert_eq!(names, [json!("feature"), json!("main")]);
    let set_age =
        r#"query s($n: String, $a: I32) { update Person set { age: $a } where name = $n }"#;
    let on = |branch: &str, age: i32| {
        c.post(
            "/graphs/g/mutate",
            json!({"query": set_age, "params": {"n": "Bob", "a": age}, "branch": branch}),
        )
    };
    assert_eq!(on("feature", 50).await.0, StatusCode::OK);
    assert_eq!(on("main", 60).await.0, StatusCode::OK);
    let conflict = c
        .post("/graphs/g/branches/merge", json!({"source": "feature"}))
        .await;
    assert_error(&conflict, 409, "conflict", "MergeConflicts");
    assert_eq!(conflict.1["merge_conflicts"][0]["type"], "Person");
    assert_eq!(conflict.1["merge_conflicts"][0]["id"], "Bob");
    assert_eq!(on("feature", 60).await.0, StatusCode::OK);
    let add_on_feature = c
        .post(
            "/graphs/g/mutate",
            json!({"query": ADD, "params": {"n": "Fay"}, "branch": "feature"}),
        )
        .await;
    assert_eq!(add_on_feature.0, StatusCode::OK);
    let merged = c
        .post(
            "/graphs/g/branches/merge",
            json!({"source": "feature", "target": "main"}),
        )
        .await;
    assert_eq!(merged.0, StatusCode::OK, "{}", merged.1);
    assert_eq!(merged.1["outcome"], "merged");
    assert_eq!(merged.1["source"], "feature");
    assert_eq!(merged.1["target"], "main");
    let mid = merged.1["graph_commit_id"].as_str().unwrap().to_string();
    let mc = c.get(&format!("/graphs/g/commits/{mid}")).await.1;
    assert!(mc["merged_parent_commit_id"].is_string(), "{mc}");
    assert!(mc["parent_commit_id"].is_string(), "{mc}");
    assert!(mc["created_at"].is_string(), "{mc}");
    let changes = c.get(&format!("/graphs/g/commits/{mid}/changes")).await;
    assert!(
        changes.1["changes"]
            .as_array()
            .unwrap()
            .contains(&json!({"change": "insert", "type": "Person", "id": "Fay"})),
        "{}",
        changes.1
    );
    let only_knows = c
        .get(&format!("/graphs/g/commits/{mid}/changes?type=Knows"))
        .await;
    assert_eq!(only_knows.1["changes"], json!([]));
    assert_error(
        &c.get("/graphs/g/commits/nope").await,
        404,
        "not_found",
        "NotFound",
    );
    assert_error(
        &c.get("/graphs/g/commits?branch=main&limit=x").await,
        400,
        "bad_request",
        "BadRequest",
    );
    let d = c.delete("/graphs/g/branches/feature").await;
    assert_eq!(d.1, json!({"deleted": "feature"}));
    assert_error(
        &c.delete("/graphs/g/branches/feature").await,
        404,
        "not_found",
        "NotFound",
    );

    // Schema: read, apply a change, refuse a bad one.
    let sc = c.get("/graphs/g/schema").await;
    assert!(
        sc.1["schema_source"]
            .as_str()
            .unwrap()
            .contains("node Person")
    );
    let new_schema = format!("{SCHEMA}\nnode Tag {{ label: String @key }}\n");
    let applied = c
        .post(
            "/graphs/g/schema/apply",
            json!({"schema_source": new_schema}),
        )
        .await;
    assert_eq!(applied.0, StatusCode::OK, "{}", applied.1);
    assert_eq!(applied.1["changed"], true);
    assert!(applied.1["graph_commit_id"].is_string());
    let again = c
        .post(
            "/graphs/g/schema/apply",
            json!({"schema_source": new_schema}),
        )
        .await;
    assert_eq!(again.1["changed"], false, "{}", again.1);
    let bad = c
        .post("/graphs/g/schema/apply", json!({"schema_source": "node {"}))
        .await;
    assert_eq!(bad.0, StatusCode::BAD_REQUEST, "{}", bad.1);

    // Metrics count what was answered.
    let m = c.metrics().await;
    assert!(
        m.contains("omnigraph_http_requests_total{route=\"/graphs/{id}/mutate\",method=\"POST\",status=\"409\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("omnigraph_writes_committed_total{graph=\"g\"}"),
        "{m}"
    );
    assert!(m.contains("omnigraph_open_handles 1"), "{m}");
    assert!(m.contains("omnigraph_http_request_duration_seconds_bucket{route=\"/graphs/{id}/snapshot\",le=\"+Inf\"} 1"), "{m}");
    assert_eq!(s.stop().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn loads_stream_in_and_exports_stream_out() {
    let (_dir, uri) = graph_on_disk().await;
    let s = Server::start(&[("g", &uri)], &["--max-body-bytes", "1024"]);
    let c = s.client(Some("bob-token"));
    // A body far over the JSON limit: loads stream, so it is taken.
    let lines: String = (0..2000)
        .map(|i| {
            format!(
                "{{\"type\":\"Person\",\"data\":{{\"name\":\"L{i:05}\",\"age\":{}}}}}\n",
                i % 100
            )
        })
        .collect();
    assert!(lines.len() > 1024 * 40);
    let load = |q: &str, body: String| {
        let r = c
            .req(reqwest::Method::POST, &format!("/graphs/g/load/ndjson{q}"))
            .body(body);
        async move { json_of(r.send().await.unwrap()).await }
    };
    let r = load("?mode=append&branch=bulk&from=main", lines.clone()).await;
    assert_eq!(r.0, StatusCode::OK, "{}", r.1);
    assert_eq!(r.1["branch"], "bulk");
    assert_eq!(r.1["branch_created"], true);
    assert_eq!(r.1["base_branch"], "main");
    assert_eq!(
        r.1["nodes"],
        json!([{"name": "Person", "entities_loaded": 2000}])
    );
    assert_eq!(r.1["edges"], json!([]));
    assert_eq!(r.1["total_entities"], 2000);
    assert_eq!(r.1["actor_id"], "bob");
    assert_eq!(count_on(&c, "bulk").await, 2003);
    // A bad line is named, and nothing is written.
    let bad =
        format!("{lines}{{\"type\":\"Person\",\"data\":{{\"name\":\"X\",\"age\":\"old\"}}}}\n");
    let before = c.get("/graphs/g/snapshot?branch=bulk").await.1["graph_commit_id"].clone();
    let refused = load("?mode=append&branch=bulk", bad).await;
    assert_error(&refused, 400, "bad_request", "InvalidData");
    assert!(
        refused.1["error"].as_str().unwrap().contains("line 2001"),
        "{}",
        refused.1
    );
    assert_eq!(
        c.get("/graphs/g/snapshot?branch=bulk").await.1["graph_commit_id"],
        before
    );
    assert_error(
        &load("", "{}".into()).await,
        400,
        "bad_request",
        "BadRequest",
    );
    assert_error(
        &load("?mode=sideways", "{}".into()).await,
        400,
        "bad_request",
        "BadRequest",
    );

    // Export: whole, one type, and an unknown type refused up front.
    let export = |body: Value| {
        let r = c.req(reqwest::Method::POST, "/graphs/g/export").json(&body);
        async move {
            let r = r.send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        }
    };
    let (st, text) = export(json!({"branch": "bulk"})).await;
    assert_eq!(st, StatusCode::OK);
    let got: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let people = got.iter().filter(|v| v["type"] == "Person").count();
    assert_eq!(people, 2003);
    assert!(got.iter().any(|v| v["edge"] == "Knows"));
    let (_, only) = export(json!({"branch": "bulk", "type_names": ["Company"]})).await;
    assert_eq!(only.lines().count(), 1, "{only}");
    assert!(only.contains("Acme"));
    let (st, text) = export(json!({"type_names": ["Nope"]})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("Nope"));
    // The export loads back into an identical graph.
    let copy = tempfile::tempdir().unwrap();
    let copy_uri = copy.path().join("c.omni").to_string_lossy().to_string();
    let g2 = omnigraph::Omnigraph::init(&copy_uri, SCHEMA).await.unwrap();
    let (_, all) = export(json!({"branch": "bulk"})).await;
    g2.load("main", &all, omnigraph::LoadMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(count(&g2, "main", "Person").await, 2003);
    assert_eq!(s.stop().code(), Some(0));
}

async fn count_on(c: &Client, branch: &str) -> u64 {
    let snap = c
        .get(&format!("/graphs/g/snapshot?branch={branch}"))
        .await
        .1;
    snap["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["type"] == "Person")
        .unwrap()["rows"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blobs_are_served_with_ranges_and_conditional_requests() {
    let dir = tempfile::tempdir().unwrap();
    let g = crate::blobs::blob_graph(&dir).await;
    let uri = g.uri().to_string();
    g.close().await;
    let s = Server::start(&[("b", &uri)], &[]);
    let c = s.client(Some("alice-token"));
    let get = |q: &str, h: Option<(&str, String)>, method: reqwest::Method| {
        let mut r = c.req(method, &format!("/graphs/b/blob?{q}"));
        if let Some((k, v)) = h {
            r = r.header(k, v);
        }
        async move { r.send().await.unwrap() }
    };
    let whole = get("type=Asset&id=a4&property=data", None, reqwest::Method::GET).await;
    assert_eq!(whole.status(), StatusCode::OK);
    let etag = whole.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(whole.headers()["accept-ranges"], "bytes");
    assert_eq!(
        whole.headers()["content-length"],
        (5u64 << 20).to_string().as_str()
    );
    assert_eq!(
        whole.bytes().await.unwrap().as_ref(),
        crate::blobs::big_bytes().as_slice()
    );
    let part = get(
        "type=Asset&id=a4&property=data",
        Some(("range", "bytes=4194300-4194309".into())),
        reqwest::Method::GET,
    )
    .await;
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        part.headers()["content-range"],
        format!("bytes 4194300-4194309/{}", 5u64 << 20).as_str()
    );
    assert_eq!(
        part.bytes().await.unwrap().as_ref(),
        &crate::blobs::big_bytes()[4194300..4194310]
    );
    let tail = get(
        "type=Asset&id=a1&property=data",
        Some(("range", "bytes=-4".into())),
        reqwest::Method::GET,
    )
    .await;
    assert_eq!(tail.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(tail.bytes().await.unwrap().as_ref(), b"blob");
    let cached = get(
        "type=Asset&id=a4&property=data",
        Some(("if-none-match", etag.clone())),
        reqwest::Method::GET,
    )
    .await;
    assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(cached.headers()["etag"], etag.as_str());
    let head = get(
        "type=Asset&id=a4&property=data",
        None,
        reqwest::Method::HEAD,
    )
    .await;
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["etag"], etag.as_str());
    assert_eq!(
        head.headers()["content-length"],
        (5u64 << 20).to_string().as_str()
    );
    assert!(head.bytes().await.unwrap().is_empty());
    let past = get(
        "type=Asset&id=a1&property=data",
        Some(("range", "bytes=10-20".into())),
        reqwest::Method::GET,
    )
    .await;
    assert_eq!(past.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(past.headers()["content-range"], "bytes */10");
    let body = json_of(past).await;
    assert_error(&body, 416, "bad_request", "BlobRangeNotSatisfiable");
    assert_eq!(body.1["blob_range"]["length"], 10);
    let edge = get(
        "type=Attached&id=e1&property=payload",
        None,
        reqwest::Method::GET,
    )
    .await;
    assert_eq!(edge.bytes().await.unwrap().as_ref(), b"edge bytes");
    let null =
        json_of(get("type=Asset&id=a3&property=data", None, reqwest::Method::GET).await).await;
    assert_error(&null, 404, "not_found", "NotFound");
    let nobody =
        json_of(get("type=Asset&id=zz&property=data", None, reqwest::Method::GET).await).await;
    assert_error(&nobody, 404, "not_found", "NotFound");
    let not_blob =
        json_of(get("type=Asset&id=a1&property=kind", None, reqwest::Method::GET).await).await;
    assert_error(&not_blob, 400, "bad_request", "BadRequest");
    let missing = json_of(get("type=Asset&id=a1", None, reqwest::Method::GET).await).await;
    assert_error(&missing, 400, "bad_request", "BadRequest");
    assert!(
        missing.1["error"].as_str().unwrap().contains("property"),
        "{}",
        missing.1
    );
    assert_eq!(s.stop().code(), Some(0));
}

/// The names of every Person on main, read through `c`.
async fn names_on(c: &Client) -> std::collections::BTreeSet<String> {
    let q = c
        .post(
            "/graphs/g/query",
            json!({"query": QUERIES, "name": "people"}),
        )
        .await;
    assert_eq!(q.0, StatusCode::OK, "{}", q.1);
    q.1["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["p.name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_readers_and_four_writers_at_once_lose_nothing() {
    const READERS: usize = 16;
    const READS: usize = 20;
    const WRITERS: usize = 4;
    const WRITES: usize = 8;
    let (_dir, uri) = graph_on_disk().await;
    let s = Server::start(&[("g", &uri)], &[]);
    let mut tasks = Vec::new();
    for r in 0..READERS {
        let c = s.client(Some("alice-token"));
        tasks.push(tokio::spawn(async move {
            for _ in 0..READS {
                let q = c
                    .post(
                        "/graphs/g/query",
                        json!({"query": QUERIES, "name": "person", "params": {"n": "Alice"}}),
                    )
                    .await;
                assert_eq!(q.0, StatusCode::OK, "reader {r}: {}", q.1);
                assert_eq!(q.1["rows"][0]["p.age"], 34);
            }
            Vec::new()
        }));
    }
    for w in 0..WRITERS {
        let c = s.client(Some("bob-token"));
        tasks.push(tokio::spawn(async move {
            let mut written = Vec::new();
            for i in 0..WRITES {
                let n = format!("W{w}-{i}");
                let m = c
                    .post(
                        "/graphs/g/mutate",
                        json!({"query": ADD, "params": {"n": n}}),
                    )
                    .await;
                assert_eq!(m.0, StatusCode::OK, "writer {w}: {}", m.1);
                written.push(n);
            }
            written
        }));
    }
    let mut written = Vec::new();
    for t in tasks {
        written.extend(t.await.unwrap());
    }
    assert_eq!(written.len(), WRITERS * WRITES);
    let names = names_on(&s.client(Some("alice-token"))).await;
    for n in &written {
        assert!(names.contains(n), "{n} was answered 200 but is not there");
    }
    assert_eq!(names.len(), 3 + WRITERS * WRITES);
    assert_eq!(s.stop().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_share_one_graph() {
    let (_dir, uri) = graph_on_disk().await;
    let a = Server::start(&[("g", &uri)], &[]);
    let b = Server::start(&[("g", &uri)], &[]);
    let (ca, cb) = (a.client(Some("alice-token")), b.client(Some("bob-token")));
    let mut tasks = Vec::new();
    for (k, c) in [ca.clone(), cb.clone()].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for i in 0..6 {
                let m = c
                    .post(
                        "/graphs/g/mutate",
                        json!({"query": ADD, "params": {"n": format!("S{k}-{i}")}}),
                    )
                    .await;
                assert_eq!(m.0, StatusCode::OK, "server {k}: {}", m.1);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Each server reads the other's writes.
    let (na, nb) = (names_on(&ca).await, names_on(&cb).await);
    assert_eq!(na, nb);
    assert_eq!(na.len(), 3 + 12);
    assert_eq!(a.stop().code(), Some(0));
    assert_eq!(b.stop().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_during_writes_keeps_every_answered_write() {
    let (_dir, uri) = graph_on_disk().await;
    let mut s = Server::start(&[("g", &uri)], &[]);
    let answered = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..4 {
        let c = s.client(Some("bob-token"));
        let answered = answered.clone();
        tasks.push(tokio::spawn(async move {
            // Bounded: the kill ends the loop long before its end.
            for i in 0..200 {
                let n = format!("K{w}-{i}");
                let sent = c
                    .req(reqwest::Method::POST, "/graphs/g/mutate")
                    .json(&json!({"query": ADD, "params": {"n": n}}))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == StatusCode::OK => answered.lock().push(n),
                    Ok(r) => panic!("writer {w}: {}", r.text().await.unwrap()),
                    Err(_) => return,
                }
            }
        }));
    }
    // Kill once some writes were answered.
    let deadline = std::time::Instant::now() + START_LIMIT;
    while answered.lock().len() < 8 {
        assert!(
            std::time::Instant::now() < deadline,
            "no write was answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(&s.child, "KILL");
    wait_bounded(&mut s.child);
    for t in tasks {
        t.await.unwrap();
    }
    let answered = answered.lock().clone();
    let again = Server::start(&[("g", &uri)], &[]);
    let names = names_on(&again.client(Some("alice-token"))).await;
    for n in &answered {
        assert!(names.contains(n), "{n} was answered 200 but is gone");
    }
    assert_eq!(again.stop().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_that_waits_past_its_limit_is_too_many_requests_with_retry_after() {
    use std::os::fd::AsRawFd;
    let (_dir, uri) = graph_on_disk().await;
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), TOKENS).unwrap();
    let mut cmd = serve_command(&[("g", &uri)]);
    let policy = allow_all();
    cmd.arg("--tokens")
        .arg(tokens.path())
        .arg("--policy")
        .arg(policy.path())
        .env("OMNIGRAPH_GATE_WAIT_MS", "200");
    let s = Server::spawn(cmd, tokens);
    let c = s.client(Some("alice-token"));
    // Another process's hold of main's branch gate, as a writer would.
    let locks = std::path::Path::new(&uri).join("_graph/locks");
    std::fs::create_dir_all(&locks).unwrap();
    let held = std::fs::File::create(locks.join("branch-main.lock")).unwrap();
    // SAFETY: flock on a file this test owns.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let r = c
        .req(reqwest::Method::POST, "/graphs/g/mutate")
        .json(&json!({"query": ADD, "params": {"n": "Late"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["retry-after"], "1");
    let body = json_of(r).await;
    assert_error(&body, 429, "too_many_requests", "Contended");
    assert!(
        body.1["error"].as_str().unwrap().contains("main"),
        "{}",
        body.1
    );
    drop(held);
    let ok = c
        .post(
            "/graphs/g/mutate",
            json!({"query": ADD, "params": {"n": "Late"}}),
        )
        .await;
    assert_eq!(ok.0, StatusCode::OK, "{}", ok.1);
    let m = c.metrics().await;
    assert!(
        m.contains("omnigraph_writes_contended_total{graph=\"g\"} 1\n"),
        "{m}"
    );
    assert_eq!(s.stop().code(), Some(0));
}

/// The change feed over HTTP: a poll from the beginning, a cursor, a
/// long-poll answered by the commit it waited for, the typed refusals, and
/// the baseline with its cursor in its headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_change_feed_polls_waits_and_gives_a_baseline() {
    let (_dir, uri) = graph_on_disk().await;
    let s = Server::start(&[("g", &uri)], &[]);
    let c = s.client(Some("bob-token"));
    let page = c
        .get("/graphs/g/changes?start=beginning&type=Person,Company")
        .await;
    assert_eq!(page.0, StatusCode::OK, "{}", page.1);
    assert_eq!(page.1["caught_up"], true);
    let blocks = page.1["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        blocks[1]["changes"].as_array().unwrap().len(),
        4,
        "{}",
        blocks[1]
    );
    let cursor = page.1["cursor"].as_str().unwrap().to_string();

    // A long-poll waits for the next commit and answers with it.
    let waiting = {
        let c = c.clone();
        let path = format!("/graphs/g/changes?cursor={cursor}&type=Person,Company&wait_ms=60000");
        tokio::spawn(async move { c.get(&path).await })
    };
    let m = c
        .post(
            "/graphs/g/mutate",
            json!({"query": ADD, "params": {"n": "Waited"}}),
        )
        .await;
    assert_eq!(m.0, StatusCode::OK, "{}", m.1);
    let got = waiting.await.unwrap();
    assert_eq!(got.0, StatusCode::OK, "{}", got.1);
    assert_eq!(
        got.1["blocks"][0]["graph_commit_id"],
        m.1["commit"]["graph_commit_id"]
    );
    assert_eq!(got.1["blocks"][0]["actor"], "bob");
    assert_eq!(
        got.1["blocks"][0]["changes"][0]["after"]["data"]["name"],
        "Waited"
    );
    // Nothing new and no wait: an empty page at once, the cursor kept.
    let after = got.1["cursor"].as_str().unwrap().to_string();
    let idle = c
        .get(&format!(
            "/graphs/g/changes?cursor={after}&type=Person,Company"
        ))
        .await;
    assert_eq!(idle.1["blocks"], json!([]));
    assert_eq!(idle.1["cursor"], after.as_str());

    assert_error(
        &c.get(&format!("/graphs/g/changes?cursor={after}")).await,
        400,
        "bad_request",
        "CursorRejected",
    );
    assert_error(
        &c.get("/graphs/g/changes?cursor=x&start=now").await,
        400,
        "bad_request",
        "BadRequest",
    );

    // The baseline: the branch at one head, its cursor in the headers.
    let r = c
        .req(
            reqwest::Method::POST,
            "/graphs/g/changes/baseline?type=Person",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let head = r.headers()["omnigraph-snapshot-commit"]
        .to_str()
        .unwrap()
        .to_string();
    let resume = r.headers()["omnigraph-cursor"]
        .to_str()
        .unwrap()
        .to_string();
    let body = r.text().await.unwrap();
    assert_eq!(body.lines().count(), 4, "{body}");
    assert_eq!(head, m.1["commit"]["graph_commit_id"].as_str().unwrap());
    let from = c
        .get(&format!("/graphs/g/changes?cursor={resume}&type=Person"))
        .await;
    assert_eq!(from.0, StatusCode::OK, "{}", from.1);
    assert_eq!(from.1["blocks"], json!([]));
}

/// An HTTP call of the policy matrix, acting with `c`'s token.
async fn policy_call(c: &Client, op: crate::policy::Op, actor: &str) -> (StatusCode, Value) {
    use crate::policy::{Op, READ, insert, wider_schema};
    let post = |path: &str, body: Value| c.req(reqwest::Method::POST, path).json(&body).send();
    let r = match op {
        Op::ReadMain => post("/graphs/g/query", json!({ "query": READ })).await,
        Op::ExportMain => post("/graphs/g/export", json!({ "branch": "main" })).await,
        Op::ChangeMain => {
            post(
                "/graphs/g/mutate",
                json!({ "query": insert(actor, "main"), "branch": "main" }),
            )
            .await
        }
        Op::ChangeDev => {
            post(
                "/graphs/g/mutate",
                json!({ "query": insert(actor, "dev"), "branch": "dev" }),
            )
            .await
        }
        Op::CreateBranch => {
            post(
                "/graphs/g/branches",
                json!({ "name": format!("{actor}-feature"), "from": "main" }),
            )
            .await
        }
        Op::DeleteBranch => {
            c.req(reqwest::Method::DELETE, "/graphs/g/branches/dev2")
                .send()
                .await
        }
        Op::MergeDevIntoMain => {
            post(
                "/graphs/g/branches/merge",
                json!({ "source": "dev", "target": "main" }),
            )
            .await
        }
        Op::ApplySchema => {
            post(
                "/graphs/g/schema/apply",
                json!({ "schema_source": wider_schema() }),
            )
            .await
        }
        Op::Cleanup | Op::Admin => unreachable!("no route"),
    }
    .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

const TEAM_TOKENS: &str =
    r#"{"agent": "agent-token", "rev": "rev-token", "stranger": "stranger-token"}"#;

fn serve_team(uri: &str, policy: &std::path::Path) -> Server {
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), TEAM_TOKENS).unwrap();
    let mut cmd = serve_command(&[("g", uri)]);
    cmd.arg("--tokens").arg(tokens.path());
    cmd.arg("--policy").arg(policy);
    Server::spawn(cmd, tokens)
}

/// Each token's actor as the policy decides, over HTTP: a denial is 403
/// `PolicyDenied` and leaves every file as it was, an allow writes; an
/// actor header cannot change who a token is; `/metrics` counts denials
/// by action.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_policy_decides_for_each_tokens_actor() {
    use crate::policy::{ACTORS, OPS, Op, TEAM, team_graph};
    let t = team_graph().await;
    let policy = t.dir.path().join("team.yaml");
    std::fs::write(&policy, TEAM).unwrap();
    let s = serve_team(&t.uri(), &policy);
    let mut denials: std::collections::BTreeMap<&str, u64> = Default::default();
    for actor in ACTORS {
        let c = s.client(Some(format!("{actor}-token").as_str()));
        for op in OPS
            .into_iter()
            .filter(|o| !matches!(o, Op::Cleanup | Op::Admin))
        {
            let what = format!("{actor} {op:?}");
            let before = Untouched::of(&t).await;
            let got = policy_call(&c, op, actor).await;
            if op.allowed(actor) {
                assert_eq!(got.0, StatusCode::OK, "{what}: {}", got.1);
                if op.writes() {
                    before.assert_written(&t, &what);
                }
            } else {
                assert_error(&got, 403, "forbidden", "PolicyDenied");
                let (action, _) = op.action();
                assert!(
                    got.1["error"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("'{actor}' may not {action}")),
                    "{what}: {}",
                    got.1
                );
                *denials.entry(action).or_default() += 1;
                before.check(&t, &what).await;
            }
        }
    }
    // A header naming another actor changes nothing: the token decides.
    let agent = s.client(Some("agent-token"));
    let spoofed = agent
        .req(reqwest::Method::POST, "/graphs/g/schema/apply")
        .header("x-actor-id", "rev")
        .header("omnigraph-actor", "rev")
        .json(&json!({ "schema_source": SCHEMA }))
        .send()
        .await
        .unwrap();
    assert_eq!(spoofed.status().as_u16(), 403);
    *denials.entry("schema_apply").or_default() += 1;
    assert_error(
        &s.client(Some("nobody-token"))
            .get("/graphs/g/snapshot")
            .await,
        401,
        "unauthorized",
        "Unauthorized",
    );
    let metrics = agent.metrics().await;
    for (action, n) in denials {
        let line = format!("omnigraph_policy_denials_total{{graph=\"g\",action=\"{action}\"}} {n}");
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }
    assert_eq!(s.stop().code(), Some(0));
}

/// Tokens and no policy: reads only (default-deny); a policy and no
/// tokens: the server refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_without_a_policy_allow_only_reads() {
    let (dir, uri) = graph_on_disk().await;
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), TOKENS).unwrap();
    let mut cmd = serve_command(&[("g", &uri)]);
    cmd.arg("--tokens")
        .arg(tokens.path())
        .env_remove("OMNIGRAPH_POLICY");
    let s = Server::spawn(cmd, tokens);
    let c = s.client(Some("alice-token"));
    let read = c
        .post(
            "/graphs/g/query",
            json!({ "query": QUERIES, "name": "people" }),
        )
        .await;
    assert_eq!(read.0, StatusCode::OK, "{}", read.1);
    let write = c
        .post(
            "/graphs/g/mutate",
            json!({"query": ADD, "params": {"n": "Zed"}}),
        )
        .await;
    assert_error(&write, 403, "forbidden", "PolicyDenied");
    assert!(
        write.1["error"].as_str().unwrap().contains("default-deny"),
        "{}",
        write.1
    );
    let merge = c.post("/graphs/g/branches", json!({"name": "x"})).await;
    assert_error(&merge, 403, "forbidden", "PolicyDenied");
    assert_eq!(s.stop().code(), Some(0));
    let policy = dir.path().join("p.yaml");
    std::fs::write(&policy, ALLOW_ALL).unwrap();
    let out = serve_command(&[("g", &uri)])
        .arg("--unauthenticated")
        .arg("--policy")
        .arg(&policy)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs tokens"));
}

/// SIGHUP puts the policy file in force again; a bad file keeps the old
/// policy (and counts as a failed reload).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sighup_reloads_the_policy_and_a_bad_file_keeps_the_old_one() {
    use crate::policy::{TEAM, insert, team_graph};
    let t = team_graph().await;
    let policy = t.dir.path().join("team.yaml");
    std::fs::write(&policy, TEAM).unwrap();
    let s = serve_team(&t.uri(), &policy);
    let agent = s.client(Some("agent-token"));
    let write = |n: &str| json!({ "query": insert(n, "main"), "branch": "main" });
    assert_eq!(
        agent.post("/graphs/g/mutate", write("a1")).await.0.as_u16(),
        403
    );
    let reloads = |outcome: &'static str, n: u64| {
        let agent = agent.clone();
        async move {
            for _ in 0..400 {
                let m = agent.metrics().await;
                if m.contains(&format!(
                    "omnigraph_policy_reloads_total{{outcome=\"{outcome}\"}} {n}"
                )) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("no {outcome} reload number {n}");
        }
    };
    std::fs::write(&policy, ALLOW_ALL).unwrap();
    signal(&s.child, "HUP");
    reloads("ok", 1).await;
    assert_eq!(
        agent.post("/graphs/g/mutate", write("a2")).await.0,
        StatusCode::OK
    );
    std::fs::write(&policy, "version: 1\nrules: [ {id: r} ]\n").unwrap();
    signal(&s.child, "HUP");
    reloads("failed", 1).await;
    assert_eq!(
        agent.post("/graphs/g/mutate", write("a3")).await.0,
        StatusCode::OK,
        "the old policy stays in force"
    );
    std::fs::write(&policy, TEAM).unwrap();
    signal(&s.child, "HUP");
    reloads("ok", 2).await;
    assert_eq!(
        agent.post("/graphs/g/mutate", write("a4")).await.0.as_u16(),
        403
    );
    assert_eq!(s.stop().code(), Some(0));
}
