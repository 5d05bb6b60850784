//! `memlint estimate --model ORG/NAME` for a model the table does not hold, read from a stand-in
//! for the Hugging Face Hub that each test starts on 127.0.0.1 and points `HF_ENDPOINT` at. The
//! stand-in answers `/ORG/NAME/resolve/main/FILE` for HEAD and for GET with or without `Range`,
//! sends `ETag` and `X-Repo-Commit` as the Hub does, and logs every request. No test needs the
//! network.

mod common;

use common::{memlint, project};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const COMMIT: &str = "5f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d4";

/// One request the stand-in received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    range: Option<String>,
    authorization: Option<String>,
    /// Bytes of body sent back.
    sent: usize,
}

#[derive(Clone)]
enum Answer {
    File(Vec<u8>),
    /// A status with the Hub's `X-Error-Code`.
    Status(u16, &'static str),
}

#[derive(Clone)]
struct Route {
    path: String,
    answer: Answer,
    /// Served only to this bearer token; 401 otherwise.
    token: Option<&'static str>,
}

struct Standin {
    endpoint: String,
    log: Arc<Mutex<Vec<Seen>>>,
    /// Connections accepted and not yet logged: a client can read its answer and exit before
    /// the stand-in logs the request.
    in_flight: Arc<AtomicUsize>,
}

impl Standin {
    fn requests(&self) -> Vec<Seen> {
        self.settle();
        self.log.lock().expect("log").clone()
    }

    fn clear(&self) {
        self.settle();
        self.log.lock().expect("log").clear();
    }

    /// Wait (a few seconds at most) until every connection accepted is logged.
    fn settle(&self) {
        let started = std::time::Instant::now();
        while self.in_flight.load(Ordering::SeqCst) > 0
            && started.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn file(repo: &str, name: &str, bytes: Vec<u8>) -> Route {
    Route {
        path: format!("/{repo}/resolve/main/{name}"),
        answer: Answer::File(bytes),
        token: None,
    }
}

/// The stand-in, serving `routes`; `ranges` false ignores `Range` (answers 200 with the whole
/// file). It serves at most 400 connections, then stops.
fn standin(routes: Vec<Route>, ranges: bool) -> Standin {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let log = Arc::new(Mutex::new(Vec::new()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let (shared, serving) = (Arc::clone(&log), Arc::clone(&in_flight));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(400) {
            let Ok(stream) = stream else { continue };
            serving.fetch_add(1, Ordering::SeqCst);
            serve(stream, &routes, ranges, &shared);
            serving.fetch_sub(1, Ordering::SeqCst);
        }
    });
    Standin {
        endpoint,
        log,
        in_flight,
    }
}

fn serve(mut stream: TcpStream, routes: &[Route], ranges: bool, log: &Mutex<Vec<Seen>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") && raw.len() < 65536 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let mut lines = text.lines();
    let first: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    let (method, path) = (
        first.first().copied().unwrap_or("").to_string(),
        first.get(1).copied().unwrap_or("").to_string(),
    );
    let mut headers = BTreeMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").cloned();
    let authorization = headers.get("authorization").cloned();
    let route = routes.iter().find(|r| r.path == path);
    let refused = route.is_some_and(|r| {
        r.token
            .is_some_and(|t| authorization.as_deref() != Some(&format!("Bearer {t}")))
    });
    let (status, code, body, extra): (u16, &str, Vec<u8>, Vec<String>) = match route {
        _ if refused => (401, "", Vec::new(), Vec::new()),
        None => {
            let repo_known = routes.iter().any(|r| {
                let repo = |p: &str| p.split("/resolve/").next().map(String::from);
                repo(&r.path) == repo(&path)
            });
            let code = if repo_known {
                "EntryNotFound"
            } else {
                "RepoNotFound"
            };
            (404, code, Vec::new(), Vec::new())
        }
        Some(Route {
            answer: Answer::Status(s, code),
            ..
        }) => (*s, *code, Vec::new(), Vec::new()),
        Some(Route {
            answer: Answer::File(bytes),
            ..
        }) => {
            let whole = |bytes: &Vec<u8>| (200, "", bytes.clone(), Vec::new());
            match range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
                Some(r) if ranges => {
                    let (a, b) = r.split_once('-').unwrap_or((r, ""));
                    let a: usize = a.parse().unwrap_or(0);
                    let b: usize = b
                        .parse()
                        .unwrap_or(usize::MAX)
                        .min(bytes.len().saturating_sub(1));
                    if a > b {
                        (416, "", Vec::new(), Vec::new())
                    } else {
                        (
                            206,
                            "",
                            bytes[a..=b].to_vec(),
                            vec![format!("Content-Range: bytes {a}-{b}/{}", bytes.len())],
                        )
                    }
                }
                _ => whole(bytes),
            }
        }
    };
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nConnection: close\r\nX-Repo-Commit: {COMMIT}\r\nAccept-Ranges: bytes\r\n"
    );
    if let Some(Route {
        answer: Answer::File(bytes),
        ..
    }) = route
    {
        head.push_str(&format!("ETag: \"etag-{}\"\r\n", bytes.len()));
    }
    if !code.is_empty() {
        head.push_str(&format!("X-Error-Code: {code}\r\n"));
    }
    for e in extra {
        head.push_str(&e);
        head.push_str("\r\n");
    }
    let is_head = method == "HEAD";
    let length = match route {
        Some(Route {
            answer: Answer::File(bytes),
            ..
        }) if is_head => bytes.len(),
        _ => body.len(),
    };
    head.push_str(&format!("Content-Length: {length}\r\n\r\n"));
    let mut sent = 0;
    if stream.write_all(head.as_bytes()).is_ok() && !is_head {
        // A client that has read what it wanted closes: the rest is not sent.
        for chunk in body.chunks(16384) {
            if stream.write_all(chunk).is_err() {
                break;
            }
            sent += chunk.len();
        }
    }
    let _ = stream.flush();
    log.lock().expect("log").push(Seen {
        method,
        path,
        range,
        authorization,
        sent,
    });
}

/// The tensors of a small Llama-like model with biases on q, k and v (which its config does not
/// say, so only the headers count them): (name, shape).
fn tensors() -> Vec<(String, Vec<u64>)> {
    let (h, kv, ff, v) = (256u64, 128u64, 688u64, 1024u64);
    let mut t = vec![("model.embed_tokens.weight".to_string(), vec![v, h])];
    for l in 0..2 {
        let p = format!("model.layers.{l}");
        for (name, shape) in [
            ("self_attn.q_proj.weight", vec![h, h]),
            ("self_attn.q_proj.bias", vec![h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.k_proj.bias", vec![kv]),
            ("self_attn.v_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.bias", vec![kv]),
            ("self_attn.o_proj.weight", vec![h, h]),
            ("mlp.gate_proj.weight", vec![ff, h]),
            ("mlp.up_proj.weight", vec![ff, h]),
            ("mlp.down_proj.weight", vec![h, ff]),
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
        ] {
            t.push((format!("{p}.{name}"), shape));
        }
    }
    t.push(("model.norm.weight".into(), vec![h]));
    t.push(("lm_head.weight".into(), vec![v, h]));
    t
}

fn count(t: &[(String, Vec<u64>)]) -> u64 {
    t.iter().map(|(_, s)| s.iter().product::<u64>()).sum()
}

const CONFIG: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 256,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "intermediate_size": 688,
  "vocab_size": 1024,
  "max_position_embeddings": 2048,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"
}"#;

/// The same model without the biases, from its shape alone.
const SHAPE_COUNT: u64 = 1_975_552;

/// A safetensors file of bf16 zeros: the 8-byte header length, the header, the data.
fn safetensors(t: &[(String, Vec<u64>)]) -> (Vec<u8>, usize) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0u64;
    for (name, shape) in t {
        let bytes = shape.iter().product::<u64>() * 2;
        header.insert(
            name.clone(),
            json!({"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut text = Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.resize(out.len() + offset as usize, 0);
    (out, text.len())
}

/// `memlint estimate ARGS` against the stand-in, with `home` as `HF_HOME` and nothing else of
/// the Hub's environment set.
/// A run that stopped with a usage error (exit 2) whose message holds every one of `wants`.
fn assert_error(code: i32, err: &str, wants: &[&str]) {
    assert_eq!(code, 2, "{err}");
    for want in wants {
        assert!(err.contains(want), "`{err}` lacks `{want}`");
    }
}

fn run(hub: &Standin, home: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = memlint(dir.path());
    cmd.arg("estimate")
        .args(args)
        .env("HF_ENDPOINT", &hub.endpoint);
    cmd.env("HF_HOME", home);
    for k in [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_OFFLINE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_hub_model_is_estimated_from_its_config_and_safetensors_header() {
    let t = tensors();
    let exact = count(&t);
    assert_eq!(exact - SHAPE_COUNT, 2 * (256 + 128 + 128), "the biases");
    let (weights, header_len) = safetensors(&t);
    let repo = "acme/tiny-llama";
    let hub = standin(
        vec![
            file(repo, "config.json", CONFIG.as_bytes().to_vec()),
            file(repo, "model.safetensors", weights),
        ],
        true,
    );
    let home = tempfile::tempdir().expect("home");
    let args = ["--model", repo, "--seq-len", "512", "--micro-batch", "2"];
    let (code, out, err) = run(&hub, home.path(), &args, &[]);
    assert_eq!(code, 0, "{err}");
    // The count the headers give, the biases included, and where it came from.
    assert!(
        out.contains(&format!(
            "parameters 1.98M ({repo} (--model, config.json from {} at commit {}; exact count from the safetensors headers (model.safetensors): 1,976,576 parameters, stored as BF16))",
            hub.endpoint,
            &COMMIT[..12]
        )),
        "{out}"
    );
    for part in [
        "weights",
        "gradients",
        "optimizer states",
        "activations",
        "peak",
    ] {
        assert!(out.contains(part), "no `{part}` in\n{out}");
    }
    let seen = hub.requests();
    let asked: Vec<(String, String, Option<String>)> = seen
        .iter()
        .map(|s| {
            let file = s.path.rsplit('/').next().unwrap_or("").to_string();
            (s.method.clone(), file, s.range.clone())
        })
        .collect();
    let want =
        |m: &str, f: &str, r: Option<&str>| (m.to_string(), f.to_string(), r.map(String::from));
    assert_eq!(
        asked,
        vec![
            want("GET", "config.json", None),
            want("GET", "model.safetensors.index.json", None),
            want("HEAD", "model.safetensors", None),
            want("GET", "model.safetensors", Some("bytes=0-7")),
            want(
                "GET",
                "model.safetensors",
                Some(&format!("bytes=8-{}", 8 + header_len - 1))
            ),
        ]
    );
    // Never the weights: no answer carried more than the header.
    assert!(seen.iter().all(|s| s.sent <= header_len), "{seen:?}");
    assert!(seen.iter().all(|s| s.authorization.is_none()));

    // The same in JSON, from the cache: no request at all.
    hub.clear();
    let (code, json, err) = run(
        &hub,
        home.path(),
        &[&args[..], &["--output-format", "json"]].concat(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(hub.requests().len(), 0, "{:?}", hub.requests());
    let e: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(e[0]["parameters"], exact);
    assert_eq!(
        e[0]["breakdown"]["weights"].as_u64().map(|w| w > 0),
        Some(true)
    );
    let from = e[0]["inputs"]["parameters"]["from"].as_str().unwrap_or("");
    assert!(
        from.contains("exact count from the safetensors headers"),
        "{from}"
    );

    // Offline with the cache filled: the same answer, still no request.
    let (code, again, err) = run(&hub, home.path(), &args, &[("HF_HUB_OFFLINE", "1")]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(again, out);
    assert_eq!(hub.requests().len(), 0);
}

#[test]
fn a_sharded_model_counts_every_shard_of_its_index() {
    let t = tensors();
    let (first, second) = t.split_at(t.len() / 2);
    let repo = "acme/tiny-sharded";
    let names = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let mut weight_map = serde_json::Map::new();
    for (part, name) in [(first, names[0]), (second, names[1])] {
        for (tensor, _) in part {
            weight_map.insert(tensor.clone(), json!(name));
        }
    }
    let index = json!({"metadata": {"total_size": count(&t) * 2}, "weight_map": weight_map});
    let hub = standin(
        vec![
            file(repo, "config.json", CONFIG.as_bytes().to_vec()),
            file(
                repo,
                "model.safetensors.index.json",
                index.to_string().into_bytes(),
            ),
            file(repo, names[0], safetensors(first).0),
            file(repo, names[1], safetensors(second).0),
        ],
        true,
    );
    let home = tempfile::tempdir().expect("home");
    let (code, out, err) = run(
        &hub,
        home.path(),
        &["--model", repo, "--output-format", "json"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let e: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(e[0]["parameters"], count(&t));
    let from = e[0]["inputs"]["parameters"]["from"].as_str().unwrap_or("");
    assert!(from.contains("safetensors headers (2 files)"), "{from}");
    let seen = hub.requests();
    assert_eq!(seen.len(), 2 + 2 * names.len(), "{seen:?}");
    for name in names {
        assert!(seen
            .iter()
            .any(|s| s.path.ends_with(name) && s.range.as_deref() == Some("bytes=0-7")));
    }

    // Shards whose headers cannot be read: the index's total size at the config's dtype.
    let repo = "acme/lost-shards";
    let hub = standin(
        vec![
            file(repo, "config.json", CONFIG.as_bytes().to_vec()),
            file(
                repo,
                "model.safetensors.index.json",
                index.to_string().into_bytes(),
            ),
        ],
        true,
    );
    let (code, out, err) = run(
        &hub,
        home.path(),
        &["--model", repo, "--output-format", "json"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let e: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(e[0]["parameters"], count(&t));
    let from = e[0]["inputs"]["parameters"]["from"].as_str().unwrap_or("");
    assert!(
        from.contains("the index's total_size of 3,953,152 bytes at 2 bytes each (bfloat16)"),
        "{from}"
    );
}

#[test]
fn a_server_that_ignores_range_still_gives_only_the_header() {
    let t = tensors();
    let repo = "acme/no-ranges";
    let hub = standin(
        vec![
            file(repo, "config.json", CONFIG.as_bytes().to_vec()),
            file(repo, "model.safetensors", safetensors(&t).0),
        ],
        false,
    );
    let home = tempfile::tempdir().expect("home");
    let (code, out, err) = run(
        &hub,
        home.path(),
        &["--model", repo, "--output-format", "json"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let e: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(e[0]["parameters"], count(&t));
}

#[test]
fn without_safetensors_the_count_comes_from_the_shape() {
    let repo = "acme/bin-only";
    let hub = standin(
        vec![file(repo, "config.json", CONFIG.as_bytes().to_vec())],
        true,
    );
    let home = tempfile::tempdir().expect("home");
    let (code, out, err) = run(&hub, home.path(), &["--model", repo], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("computed from the shape (no safetensors files on the Hub)"),
        "{out}"
    );
    let (_, json, _) = run(
        &hub,
        home.path(),
        &["--model", repo, "--output-format", "json"],
        &[],
    );
    let e: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(e[0]["parameters"], SHAPE_COUNT);
    // The same config read locally gives the same estimate.
    let local = project(&[("config.json", CONFIG)]);
    let out = memlint(local.path())
        .args([
            "estimate",
            "--model",
            "config.json",
            "--output-format",
            "json",
        ])
        .output()
        .expect("run");
    let l: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(l[0]["breakdown"], e[0]["breakdown"]);
    assert_eq!(l[0]["total_bytes"], e[0]["total_bytes"]);
}

#[test]
fn offline_and_not_cached_is_an_error_that_says_what_to_do() {
    let hub = standin(Vec::new(), true);
    let home = tempfile::tempdir().expect("home");
    let (code, out, err) = run(
        &hub,
        home.path(),
        &["--model", "acme/never-fetched"],
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert!(out.is_empty(), "{out}");
    assert_error(
        code,
        &err,
        &[
            "`acme/never-fetched` is not in the cache",
            "HF_HUB_OFFLINE is set",
            "run once without HF_HUB_OFFLINE",
            "--params N",
        ],
    );
    assert_eq!(hub.requests().len(), 0);
}

#[test]
fn gated_private_and_missing_models_are_clear_errors() {
    let hub = standin(
        vec![
            Route {
                path: "/acme/gated/resolve/main/config.json".into(),
                answer: Answer::Status(401, "GatedRepo"),
                token: None,
            },
            Route {
                path: "/acme/private/resolve/main/config.json".into(),
                answer: Answer::Status(403, ""),
                token: None,
            },
            file("acme/no-config", "README.md", b"# no config".to_vec()),
        ],
        true,
    );
    let home = tempfile::tempdir().expect("home");
    let cases: &[(&str, &[&str])] = &[
        (
            "acme/gated",
            &[
                "`acme/gated` is gated",
                "HTTP 401",
                "accept its conditions",
                "set HF_TOKEN",
                "`huggingface-cli login`",
            ],
        ),
        (
            "acme/private",
            &[
                "`acme/private` is gated or private",
                "HTTP 403",
                "set HF_TOKEN",
                "`huggingface-cli login`",
            ],
        ),
        (
            "acme/missing",
            &[
                "`acme/missing` is not on",
                "HTTP 404",
                "check the id",
                "--model PATH/config.json",
            ],
        ),
        (
            "acme/no-config",
            &["`acme/no-config` on", "has no config.json", "--params N"],
        ),
    ];
    for (repo, wants) in cases {
        let (code, out, err) = run(&hub, home.path(), &["--model", repo], &[]);
        assert!(out.is_empty(), "{repo}: {out}");
        assert_error(code, &err, wants);
    }
}

#[test]
fn the_token_is_sent_as_a_bearer_header() {
    let repo = "acme/private";
    let private = |name: &str, bytes: Vec<u8>| Route {
        token: Some("hf_standin"),
        ..file(repo, name, bytes)
    };
    let hub = standin(
        vec![
            private("config.json", CONFIG.as_bytes().to_vec()),
            private("model.safetensors", safetensors(&tensors()).0),
        ],
        true,
    );
    let home = tempfile::tempdir().expect("home");
    let (code, _, err) = run(&hub, home.path(), &["--model", repo], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("is gated or private"), "{err}");
    hub.clear();
    let (code, out, err) = run(
        &hub,
        home.path(),
        &["--model", repo],
        &[("HF_TOKEN", "hf_standin")],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("exact count from the safetensors headers"),
        "{out}"
    );
    let seen = hub.requests();
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(
            s.authorization.as_deref(),
            Some("Bearer hf_standin"),
            "{s:?}"
        );
    }
    // The token `huggingface-cli login` leaves in HF_HOME serves as well.
    let other = tempfile::tempdir().expect("home");
    std::fs::write(other.path().join("token"), "hf_standin\n").expect("token");
    hub.clear();
    let (code, _, err) = run(&hub, other.path(), &["--model", repo], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(hub
        .requests()
        .iter()
        .all(|s| s.authorization.as_deref() == Some("Bearer hf_standin")));
}

#[test]
fn an_unreachable_hub_is_a_network_error() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let hub = Standin {
        endpoint: format!("http://127.0.0.1:{port}"),
        log: Arc::new(Mutex::new(Vec::new())),
        in_flight: Arc::new(AtomicUsize::new(0)),
    };
    let home = tempfile::tempdir().expect("home");
    let (code, _, err) = run(&hub, home.path(), &["--model", "acme/far-away"], &[]);
    assert_error(
        code,
        &err,
        &[
            "cannot reach",
            "for `acme/far-away`",
            "HF_ENDPOINT",
            "--params N",
        ],
    );
}

#[test]
fn a_config_without_the_keys_the_estimate_needs_names_them() {
    let repo = "acme/odd-config";
    let hub = standin(
        vec![file(
            repo,
            "config.json",
            br#"{"model_type": "llama", "hidden_size": 256, "vocab_size": 1024}"#.to_vec(),
        )],
        true,
    );
    let home = tempfile::tempdir().expect("home");
    let (code, _, err) = run(&hub, home.path(), &["--model", repo], &[]);
    assert_error(
        code,
        &err,
        &[
            "acme/odd-config: no layer count",
            "num_hidden_layers, n_layer, num_layers",
            "config.json from the Hub",
            "--params N",
        ],
    );
    // It stops at the config: nothing else is asked for.
    assert_eq!(hub.requests().len(), 1);
}

#[test]
fn a_short_unknown_name_does_not_reach_the_hub() {
    let hub = standin(Vec::new(), true);
    let home = tempfile::tempdir().expect("home");
    let (code, _, err) = run(&hub, home.path(), &["--model", "no-such-model-1b"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown model `no-such-model-1b`"), "{err}");
    assert!(
        err.contains("Hugging Face Hub id (ORG/NAME or ORG/NAME@REVISION)"),
        "{err}"
    );
    assert_eq!(hub.requests().len(), 0);
}

#[test]
fn a_revision_is_read_where_main_is_and_cached_apart() {
    let repo = "acme/tiny-rev";
    let v2 = CONFIG.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 4");
    assert_ne!(v2, CONFIG);
    let at = |rev: &str, name: &str, bytes: &str| Route {
        path: format!("/{repo}/resolve/{rev}/{name}"),
        answer: Answer::File(bytes.as_bytes().to_vec()),
        token: None,
    };
    let hub = standin(
        vec![
            at("main", "config.json", CONFIG),
            at("v2", "config.json", &v2),
            // A pull request's branch, its `/` escaped in the path as huggingface_hub does.
            at("refs%2Fpr%2F7", "config.json", &v2),
            Route {
                path: format!("/{repo}/resolve/nope/config.json"),
                answer: Answer::Status(404, "RevisionNotFound"),
                token: None,
            },
        ],
        true,
    );
    // Two more layers than main: the parameters of one layer, from the tensors without biases.
    let layer: u64 = tensors()
        .iter()
        .filter(|(n, _)| n.starts_with("model.layers.0.") && !n.ends_with(".bias"))
        .map(|(_, s)| s.iter().product::<u64>())
        .sum();
    let home = tempfile::tempdir().expect("home");
    let params = |args: &[&str], env: &[(&str, &str)]| {
        let (code, json, err) = run(
            &hub,
            home.path(),
            &[args, &["--output-format", "json"]].concat(),
            env,
        );
        assert_eq!(code, 0, "{err}");
        let e: Value = serde_json::from_str(&json).expect("json");
        let from = e[0]["inputs"]["parameters"]["from"]
            .as_str()
            .unwrap_or("")
            .to_string();
        (e[0]["parameters"].as_u64().unwrap_or(0), from)
    };

    let (n, from) = params(&["--model", "acme/tiny-rev@v2"], &[]);
    assert_eq!(n, SHAPE_COUNT + 2 * layer);
    assert!(
        from.contains(&format!("at revision v2 (commit {})", &COMMIT[..12])),
        "{from}"
    );
    let paths: Vec<String> = hub.requests().iter().map(|s| s.path.clone()).collect();
    assert!(!paths.is_empty());
    assert!(
        paths
            .iter()
            .all(|p| p.starts_with("/acme/tiny-rev/resolve/v2/")),
        "{paths:?}"
    );

    // Main is its own entry of the cache: fetched, not taken from v2's.
    hub.clear();
    let (n, from) = params(&["--model", repo], &[]);
    assert_eq!(n, SHAPE_COUNT);
    assert!(!from.contains("revision"), "{from}");
    assert!(hub
        .requests()
        .iter()
        .all(|s| s.path.starts_with("/acme/tiny-rev/resolve/main/")));

    // Offline, each revision comes from its own entry, with no request; one never read is not
    // in the cache.
    hub.clear();
    let offline = [("HF_HUB_OFFLINE", "1")];
    assert_eq!(
        params(&["--model", "acme/tiny-rev@v2"], &offline).0,
        n + 2 * layer
    );
    assert_eq!(params(&["--model", repo], &offline).0, n);
    assert_eq!(hub.requests().len(), 0);
    let (code, _, err) = run(
        &hub,
        home.path(),
        &["--model", "acme/tiny-rev@v3"],
        &offline,
    );
    assert_error(code, &err, &["`acme/tiny-rev@v3` is not in the cache"]);

    // A branch with `/` in its name.
    hub.clear();
    let (n, _) = params(&["--model", "acme/tiny-rev@refs/pr/7"], &[]);
    assert_eq!(n, SHAPE_COUNT + 2 * layer);
    assert_eq!(
        hub.requests()[0].path,
        "/acme/tiny-rev/resolve/refs%2Fpr%2F7/config.json"
    );

    // A revision the model does not have, and one that cannot be a revision.
    let (code, out, err) = run(&hub, home.path(), &["--model", "acme/tiny-rev@nope"], &[]);
    assert!(out.is_empty(), "{out}");
    assert_error(
        code,
        &err,
        &["`acme/tiny-rev`", "has no revision `nope`", "HTTP 404"],
    );
    hub.clear();
    let (code, _, err) = run(&hub, home.path(), &["--model", "acme/tiny-rev@a..b"], &[]);
    assert_error(code, &err, &["unknown model `acme/tiny-rev@a..b`"]);
    assert_eq!(hub.requests().len(), 0);
}
