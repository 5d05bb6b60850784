//! `memlint server` driven over stdio as an editor drives it: the messages are framed JSON-RPC,
//! written to the server's stdin and read from its stdout.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

const TRAIN: &str = "\
import torch

model = build_model()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
gpu_memory_gb = 80
model_size_gb = 14
headroom_gb = gpu_memory_gb - model_size_gb * 2
accum_steps = 4
for step, (inputs, labels) in enumerate(loader):
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
";

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    incoming: Receiver<Value>,
    /// Notifications read while waiting for something else.
    seen: Vec<Value>,
    next_id: i64,
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
}

impl Client {
    fn start(capabilities: Value, options: Value) -> Client {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let mut child = Command::new(env!("CARGO_BIN_EXE_memlint"))
            .arg("server")
            .current_dir(&root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn memlint server");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut length = None;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(n) = line.strip_prefix("Content-Length: ") {
                        length = n.parse::<usize>().ok();
                    }
                }
                let mut body = vec![0; length.expect("Content-Length")];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let msg: Value = serde_json::from_slice(&body).expect("JSON from the server");
                if tx.send(msg).is_err() {
                    return;
                }
            }
        });
        let mut client = Client {
            child,
            stdin,
            incoming: rx,
            seen: Vec::new(),
            next_id: 0,
            _dir: dir,
            root,
        };
        let root_uri = client.uri("");
        let result = client.request(
            "initialize",
            json!({
                "processId": null,
                "rootUri": root_uri,
                "capabilities": capabilities,
                "initializationOptions": options,
            }),
        );
        assert!(result["capabilities"]["codeActionProvider"].is_object());
        client.notify("initialized", json!({}));
        client
    }

    fn uri(&self, name: &str) -> String {
        format!("file://{}/{name}", self.root.display())
            .trim_end_matches('/')
            .to_string()
    }

    fn write(&mut self, msg: Value) {
        let body = msg.to_string();
        let stdin = self.stdin.as_mut().expect("stdin open");
        write!(stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).expect("write");
        stdin.flush().expect("flush");
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.write(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn send_request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn recv(&mut self, deadline: Instant) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        self.incoming
            .recv_timeout(left)
            .expect("the server answered in time")
    }

    /// The whole response (`result` or `error`) to request `id`.
    fn response(&mut self, id: i64) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let msg = self.recv(deadline);
            if msg["id"] == json!(id) && msg.get("method").is_none() {
                return msg;
            }
            if msg.get("id").is_some() && msg.get("method").is_some() {
                // A request from the server (client/registerCapability): accept it.
                let id = msg["id"].clone();
                self.write(json!({"jsonrpc": "2.0", "id": id, "result": null}));
                continue;
            }
            self.seen.push(msg);
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        let msg = self.response(id);
        assert!(msg.get("error").is_none(), "{method} failed: {msg}");
        msg["result"].clone()
    }

    /// The next diagnostics published for `uri` that satisfy `ok`.
    fn diagnostics_where(&mut self, uri: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        let matches = |m: &Value| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri
                && ok(m["params"]["diagnostics"].as_array().map_or(&[], |v| v))
        };
        if let Some(i) = self.seen.iter().position(matches) {
            let m = self.seen.remove(i);
            self.seen.retain(|m| m["params"]["uri"] != uri);
            return m["params"]["diagnostics"]
                .as_array()
                .cloned()
                .unwrap_or_default();
        }
        self.seen.retain(|m| m["params"]["uri"] != uri);
        loop {
            let msg = self.recv(deadline);
            if matches(&msg) {
                return msg["params"]["diagnostics"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
            }
            if msg.get("id").is_some() && msg.get("method").is_some() {
                let id = msg["id"].clone();
                self.write(json!({"jsonrpc": "2.0", "id": id, "result": null}));
            }
        }
    }

    fn open(&mut self, name: &str, text: &str) -> String {
        let uri = self.uri(name);
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}),
        );
        uri
    }

    fn change(&mut self, uri: &str, version: i32, text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
        );
    }

    fn actions(&mut self, uri: &str, range: &Value, only: Option<&[&str]>) -> Vec<Value> {
        let mut context = json!({"diagnostics": []});
        if let Some(only) = only {
            context["only"] = json!(only);
        }
        let result = self.request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": range, "context": context}),
        );
        result.as_array().cloned().unwrap_or_default()
    }

    /// `shutdown`, `exit`, and the process's exit code.
    fn shutdown(mut self) -> i32 {
        let result = self.request("shutdown", Value::Null);
        assert_eq!(result, Value::Null);
        self.notify("exit", Value::Null);
        drop(self.stdin.take());
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn utf16() -> Value {
    json!({"workspace": {"didChangeWatchedFiles": {"dynamicRegistration": true}}})
}

fn by_code<'a>(diags: &'a [Value], code: &str) -> &'a Value {
    diags
        .iter()
        .find(|d| d["code"] == code)
        .unwrap_or_else(|| panic!("no {code} in {diags:?}"))
}

fn codes(diags: &[Value]) -> Vec<String> {
    let mut c: Vec<String> = diags
        .iter()
        .map(|d| d["code"].as_str().unwrap_or("").to_string())
        .collect();
    c.sort();
    c
}

/// The byte offset of an LSP position counted in UTF-16 units.
fn offset(text: &str, pos: &Value) -> usize {
    let line = pos["line"].as_u64().expect("line") as usize;
    let character = pos["character"].as_u64().expect("character") as usize;
    let start: usize = text.split_inclusive('\n').take(line).map(str::len).sum();
    let mut units = 0;
    for (i, c) in text[start..].char_indices() {
        if units >= character || c == '\n' {
            return start + i;
        }
        units += c.len_utf16();
    }
    text.len()
}

/// `text` with the edits of a workspace edit for `uri` applied.
fn apply(text: &str, edit: &Value, uri: &str) -> String {
    let mut edits: Vec<(usize, usize, String)> = edit["changes"][uri]
        .as_array()
        .expect("edits for the document")
        .iter()
        .map(|e| {
            (
                offset(text, &e["range"]["start"]),
                offset(text, &e["range"]["end"]),
                e["newText"].as_str().expect("newText").to_string(),
            )
        })
        .collect();
    edits.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut out = text.to_string();
    for (s, e, new) in edits {
        out.replace_range(s..e, &new);
    }
    out
}

fn titled<'a>(actions: &'a [Value], start: &str) -> &'a Value {
    actions
        .iter()
        .find(|a| a["title"].as_str().is_some_and(|t| t.starts_with(start)))
        .unwrap_or_else(|| panic!("no action `{start}...` in {actions:#?}"))
}

#[test]
fn diagnostics_fix_and_clear_then_exit_zero() {
    let mut c = Client::start(utf16(), json!({}));
    let uri = c.open("train.py", TRAIN);
    let diags = c.diagnostics_where(&uri, |d| d.len() == 2);
    assert_eq!(codes(&diags), ["GA001", "MEM001"]);
    let ga = by_code(&diags, "GA001").clone();
    assert_eq!(ga["source"], "memlint");
    assert_eq!(ga["severity"], 1);
    assert_eq!(ga["range"]["start"], json!({"line": 10, "character": 4}));
    assert!(ga["codeDescription"]["href"]
        .as_str()
        .is_some_and(|h| h.ends_with("rules/GA001.toml")));

    let actions = c.actions(&uri, &ga["range"], None);
    let fix = titled(&actions, "Fix GA001");
    assert_eq!(fix["kind"], "quickfix");
    let fixed = apply(TRAIN, &fix["edit"], &uri);
    assert!(
        fixed.contains("    (loss / accum_steps).backward()\n"),
        "{fixed}"
    );
    c.change(&uri, 2, &fixed);
    let diags = c.diagnostics_where(&uri, |d| d.len() == 1);
    assert_eq!(codes(&diags), ["MEM001"]);

    // MEM001's fix rests on an assumption: its title says so.
    let mem = by_code(&diags, "MEM001").clone();
    let actions = c.actions(&uri, &mem["range"], Some(&["quickfix"]));
    let fix = titled(&actions, "Fix MEM001 (unsafe fix)");
    let fixed = apply(&fixed, &fix["edit"], &uri);
    assert!(fixed.contains("model_size_gb * 4"), "{fixed}");
    c.change(&uri, 3, &fixed);
    let diags = c.diagnostics_where(&uri, |d| d.is_empty());
    assert!(diags.is_empty());
    assert_eq!(c.shutdown(), 0);
}

#[test]
fn positions_count_utf16_units_unless_the_client_offers_utf8() {
    let text = TRAIN.replace(
        "headroom_gb = gpu_memory_gb",
        "note = \"é😀\"; headroom_gb = gpu_memory_gb",
    );
    let line = text
        .lines()
        .position(|l| l.contains("headroom_gb"))
        .expect("line");
    let row = text.lines().nth(line).expect("row");
    let at = row.find("2").expect("multiplier");
    let mut characters = Vec::new();
    for caps in [
        utf16(),
        json!({"general": {"positionEncodings": ["utf-8", "utf-16"]}}),
    ] {
        let mut c = Client::start(caps, json!({}));
        let uri = c.open("train.py", &text);
        let diags = c.diagnostics_where(&uri, |d| d.len() == 2);
        let mem = by_code(&diags, "MEM001");
        assert_eq!(mem["range"]["start"]["line"], line as u64);
        characters.push(mem["range"]["end"]["character"].as_u64().expect("char"));
        assert_eq!(c.shutdown(), 0);
    }
    let utf16_end = row[..at].encode_utf16().count() as u64 + 1;
    let utf8_end = at as u64 + 1;
    assert_eq!(characters, [utf16_end, utf8_end]);
}

#[test]
fn hover_fix_all_and_ignore() {
    let mut c = Client::start(utf16(), json!({}));
    let uri = c.open("train.py", TRAIN);
    let diags = c.diagnostics_where(&uri, |d| d.len() == 2);
    let ga = by_code(&diags, "GA001").clone();

    let hover = c.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": uri}, "position": ga["range"]["start"]}),
    );
    let md = hover["contents"]["value"].as_str().expect("markdown");
    assert_eq!(hover["contents"]["kind"], "markdown");
    assert!(md.contains("**GA001**") && md.contains("unscaled-accumulation-loss"));
    assert!(md.contains("**Fix:**"));
    let nothing = c.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}}),
    );
    assert_eq!(nothing, Value::Null);

    // Fix all applies the safe fixes only (GA001's), not MEM001's unsafe one.
    let whole = json!({"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}});
    let actions = c.actions(&uri, &whole, Some(&["source.fixAll"]));
    assert_eq!(actions.len(), 1, "{actions:#?}");
    assert_eq!(actions[0]["kind"], "source.fixAll.memlint");
    let fixed = apply(TRAIN, &actions[0]["edit"], &uri);
    assert!(fixed.contains("(loss / accum_steps).backward()"));
    assert!(fixed.contains("model_size_gb * 2"));

    let actions = c.actions(&uri, &ga["range"], None);
    let ignore = titled(&actions, "Ignore GA001 on this line");
    let ignored = apply(TRAIN, &ignore["edit"], &uri);
    assert!(ignored.contains("    loss.backward()  # memlint: ignore[GA001]\n"));
    c.change(&uri, 2, &ignored);
    let diags = c.diagnostics_where(&uri, |d| d.len() == 1);
    assert_eq!(codes(&diags), ["MEM001"]);
    assert_eq!(c.shutdown(), 0);
}

#[test]
fn settings_from_initialization_options_and_config_files() {
    let mut c = Client::start(utf16(), json!({"ignore": ["MEM001"], "unsafe-fixes": true}));
    let uri = c.open("train.py", TRAIN);
    let diags = c.diagnostics_where(&uri, |d| d.len() == 1);
    assert_eq!(codes(&diags), ["GA001"]);
    // A configuration file written on disk is read again when the client reports it.
    std::fs::write(c.root.join(".memlint.toml"), "ignore = [\"GA001\"]\n").expect("write");
    let config = c.uri(".memlint.toml");
    c.notify(
        "workspace/didChangeWatchedFiles",
        json!({"changes": [{"uri": config, "type": 1}]}),
    );
    let diags = c.diagnostics_where(&uri, |d| d.is_empty());
    assert!(diags.is_empty());
    assert_eq!(c.shutdown(), 0);
}

#[test]
fn an_open_launcher_reaches_the_script_it_runs() {
    let mut c = Client::start(utf16(), json!({}));
    let script = "\
import torch
from transformers import TrainingArguments

args = TrainingArguments(output_dir=\"out\", per_device_train_batch_size=4,
                         gradient_accumulation_steps=2, deepspeed=\"ds.json\")
";
    std::fs::write(c.root.join("train.py"), script).expect("write");
    std::fs::write(
        c.root.join("ds.json"),
        "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2}\n",
    )
    .expect("write");
    let ds = c.uri("ds.json");
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": ds, "languageId": "json", "version": 1,
               "text": "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2}\n"}}),
    );
    // Launched on 8 GPUs: 4 x 2 x 8 = 64, consistent.
    let launcher = c.uri("launch.sh");
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": launcher, "languageId": "shellscript", "version": 1,
               "text": "#!/bin/bash\ndeepspeed --num_gpus 8 train.py --deepspeed ds.json\n"}}),
    );
    let _ = c.diagnostics_where(&ds, |d| d.is_empty());
    // The unsaved launcher now starts 4 GPUs: the config's triple no longer holds.
    c.change(
        &launcher,
        2,
        "#!/bin/bash\ndeepspeed --num_gpus 4 train.py --deepspeed ds.json\n",
    );
    let diags = c.diagnostics_where(&ds, |d| !d.is_empty());
    assert!(diags.iter().any(|d| d["code"] == "BS001"), "{diags:#?}");
    assert_eq!(c.shutdown(), 0);
}

#[test]
fn hostile_buffers_do_not_stop_the_server() {
    let mut c = Client::start(utf16(), json!({}));
    let nul = c.open("nul.py", "x = 1\0\0\0(((\n");
    let _ = c.diagnostics_where(&nul, |d| d.is_empty());
    let brackets = c.open("brackets.py", &"(([{".repeat(20_000));
    let _ = c.diagnostics_where(&brackets, |d| d.is_empty());
    let mut big = "headroom_gb = gpu_memory_gb - model_size_gb * 2\n".repeat(230_000);
    big.push_str(&"x".repeat(100));
    let big_uri = c.open("big.py", &big);
    let _ = c.diagnostics_where(&big_uri, |d| d.is_empty());
    // Garbage parameters are an error for that request, not the end of the server.
    let id = c.send_request("textDocument/hover", json!({"nonsense": true}));
    assert!(c.response(id).get("error").is_some());
    let id = c.send_request("memlint/unknown", json!({}));
    assert_eq!(c.response(id)["error"]["code"], -32601);
    // A cancelled request is answered with an error, or with its result if it was done first.
    let id = c.send_request(
        "textDocument/hover",
        json!({"textDocument": {"uri": nul}, "position": {"line": 0, "character": 0}}),
    );
    c.notify("$/cancelRequest", json!({"id": id}));
    let answer = c.response(id);
    assert!(answer.get("result").is_some() || answer["error"]["code"] == -32800);
    let uri = c.open("train.py", TRAIN);
    let diags = c.diagnostics_where(&uri, |d| d.len() == 2);
    assert_eq!(codes(&diags), ["GA001", "MEM001"]);
    assert_eq!(c.shutdown(), 0);
}

#[test]
fn notebook_cells_get_their_own_diagnostics() {
    let mut c = Client::start(utf16(), json!({}));
    let nb = c.uri("finetune.ipynb");
    let cell = |i: usize| format!("vscode-notebook-cell://{}/finetune.ipynb#cell{i}", "x");
    let sources = [
        "# Fine-tuning\n",
        "import torch\nmodel = build_model()\noptimizer = torch.optim.AdamW(model.parameters())\n",
        "gpu_memory_gb = 80\nmodel_size_gb = 14\nheadroom_gb = gpu_memory_gb - model_size_gb * 2\n",
        "accum_steps = 4\nfor step, batch in enumerate(loader):\n    loss = model(batch).loss\n    loss.backward()\n    if (step + 1) % accum_steps == 0:\n        optimizer.step()\n        optimizer.zero_grad()\n",
    ];
    let cells: Vec<Value> = (0..4)
        .map(|i| json!({"kind": if i == 0 { 1 } else { 2 }, "document": cell(i)}))
        .collect();
    let docs: Vec<Value> = (0..4)
        .map(|i| {
            json!({"uri": cell(i), "languageId": if i == 0 { "markdown" } else { "python" },
                   "version": 1, "text": sources[i]})
        })
        .collect();
    c.notify(
        "notebookDocument/didOpen",
        json!({"notebookDocument": {"uri": nb, "notebookType": "jupyter-notebook", "version": 1,
               "cells": cells}, "cellTextDocuments": docs}),
    );
    let mem = c.diagnostics_where(&cell(2), |d| d.len() == 1);
    assert_eq!(codes(&mem), ["MEM001"]);
    assert_eq!(mem[0]["range"]["start"]["line"], 2);
    let ga = c.diagnostics_where(&cell(3), |d| d.len() == 1);
    assert_eq!(codes(&ga), ["GA001"]);
    assert_eq!(ga[0]["range"]["start"], json!({"line": 3, "character": 4}));

    // The quick fix edits the cell; the cell's change clears its diagnostic.
    let actions = c.actions(&cell(3), &ga[0]["range"], Some(&["quickfix"]));
    let fix = titled(&actions, "Fix GA001");
    let fixed = apply(sources[3], &fix["edit"], &cell(3));
    assert!(fixed.contains("(loss / accum_steps).backward()"), "{fixed}");
    c.notify(
        "notebookDocument/didChange",
        json!({"notebookDocument": {"uri": nb, "version": 2}, "change": {"cells": {
            "textContent": [{"document": {"uri": cell(3), "version": 2},
                             "changes": [{"text": fixed}]}]}}}),
    );
    let ga = c.diagnostics_where(&cell(3), |d| d.is_empty());
    assert!(ga.is_empty());
    let hover = c.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": cell(2)}, "position": mem[0]["range"]["start"]}),
    );
    assert!(hover["contents"]["value"]
        .as_str()
        .is_some_and(|v| v.contains("MEM001")));
    assert_eq!(c.shutdown(), 0);
}

#[test]
fn a_notebook_open_as_json_text_gets_positions_in_the_json() {
    let raw = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/notebook/finetune.ipynb"),
    )
    .expect("fixture");
    let mut c = Client::start(utf16(), json!({}));
    let uri = c.uri("finetune.ipynb");
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "json", "version": 1, "text": raw}}),
    );
    let diags = c.diagnostics_where(&uri, |d| d.iter().any(|d| d["code"] == "GA001"));
    let ga = by_code(&diags, "GA001");
    let line = ga["range"]["start"]["line"].as_u64().expect("line") as usize;
    assert!(
        raw.lines()
            .nth(line)
            .is_some_and(|l| l.contains("    loss.backward()")),
        "GA001 on JSON line {line}"
    );
    let actions = c.actions(&uri, &ga["range"], Some(&["quickfix"]));
    let fix = titled(&actions, "Fix GA001");
    let fixed = apply(&raw, &fix["edit"], &uri);
    assert!(
        fixed.contains("\"    (loss / accum_steps).backward()\\n\""),
        "{fixed}"
    );
    assert_eq!(c.shutdown(), 0);
}

#[test]
fn a_notebook_sent_as_python_text_is_linted_as_python() {
    let mut c = Client::start(utf16(), json!({}));
    let uri = c.uri(".virtual_documents/finetune.ipynb");
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": TRAIN}}),
    );
    let diags = c.diagnostics_where(&uri, |d| d.len() == 2);
    assert_eq!(codes(&diags), ["GA001", "MEM001"]);
    assert_eq!(c.shutdown(), 0);
}
