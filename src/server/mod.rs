//! `memlint server`: a Language Server over stdio. Open buffers are linted from their text, with
//! the project around them read from disk as on the command line (the open buffers win over the
//! files on disk), and every open document is linted again when any of them changes, so a launcher
//! or config edited in the editor reaches the scripts it runs.
//!
//! - `documents.rs`: open text documents and notebooks, URIs, positions in the negotiated encoding;
//! - `actions.rs`: diagnostics as LSP sends them, code actions (fixes, fix all, ignore), hover.
//!
//! One thread handles the protocol; a lint runs when changes have been quiet for [`DEBOUNCE`],
//! or at once before a request that needs fresh results. Every handler runs under
//! `catch_unwind`: a panic answers the request with an error and the server goes on.

// `lsp_types::Uri` hashes and compares by its text; clippy cannot see that through its caches.
#![allow(clippy::mutable_key_type)]

mod actions;
mod documents;

use crate::lint::{candidates_with, lint_in_context, FileResult, LintOptions, Run};
use crate::settings::{CliOverrides, Resolver};
use crate::source::Language;
use documents::{uri_to_path, Cell, Documents, Encoding, NotebookDoc, TextDoc};
use lsp_server::{Connection, ErrorCode, Message, Notification, Request, RequestId, Response};
use lsp_types::notification::Notification as _;
use lsp_types::request::Request as _;
use lsp_types::{notification as note, request as req};
use lsp_types::{Diagnostic as LspDiagnostic, Uri};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long edits must pause before the open documents are linted again.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// Files next to an open document read as the project around it (launchers and configs), at most.
const MAX_NEIGHBOURS: usize = 256;

/// Neighbours larger than this are not read (data files, not configs).
const MAX_NEIGHBOUR_BYTES: u64 = 2 * 1024 * 1024;

/// Run the server on stdin/stdout until `exit`; the process's exit code.
pub fn main() -> i32 {
    let (connection, io_threads) = Connection::stdio();
    let code = match serve(&connection) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("memlint server: {e}");
            1
        }
    };
    drop(connection);
    let _ = io_threads.join();
    code
}

/// What `initializationOptions` may set.
#[derive(Default, Clone, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct InitOptions {
    #[serde(alias = "select")]
    select: Option<Vec<String>>,
    #[serde(default)]
    ignore: Vec<String>,
    #[serde(default, alias = "extendSelect")]
    extend_select: Vec<String>,
    #[serde(default, alias = "unsafeFixes")]
    unsafe_fixes: bool,
}

fn serve(conn: &Connection) -> Result<i32, String> {
    let (id, params) = conn.initialize_start().map_err(|e| e.to_string())?;
    let init: lsp_types::InitializeParams = serde_json::from_value(params).unwrap_or_default();
    let offered = init
        .capabilities
        .general
        .as_ref()
        .and_then(|g| g.position_encodings.clone())
        .unwrap_or_default();
    let enc = if offered.contains(&lsp_types::PositionEncodingKind::UTF8) {
        Encoding::Utf8
    } else {
        Encoding::Utf16
    };
    let options: InitOptions = init
        .initialization_options
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    #[allow(deprecated)]
    let root = init
        .workspace_folders
        .as_ref()
        .and_then(|f| f.first().map(|f| f.uri.clone()))
        .or_else(|| init.root_uri.clone())
        .map(|u| uri_to_path(&u, Path::new("/"), None))
        .filter(|p| p.is_dir())
        .unwrap_or_else(crate::discover::cwd);
    // Paths in messages are shown relative to the workspace, as the command line shows them.
    let _ = std::env::set_current_dir(&root);
    let watch = init
        .capabilities
        .workspace
        .as_ref()
        .and_then(|w| w.did_change_watched_files.as_ref())
        .and_then(|w| w.dynamic_registration)
        .unwrap_or(false);
    let result = serde_json::json!({
        "capabilities": actions::capabilities(enc),
        "serverInfo": {"name": "memlint", "version": env!("CARGO_PKG_VERSION")},
    });
    conn.initialize_finish(id, result)
        .map_err(|e| e.to_string())?;
    let mut server = Server::new(conn, enc, root, options);
    if watch {
        server.register_watchers();
    }
    server.run()
}

struct Server<'c> {
    conn: &'c Connection,
    enc: Encoding,
    root: PathBuf,
    options: InitOptions,
    resolver: Resolver,
    docs: Documents,
    /// The last lint's results, by absolute path.
    results: HashMap<PathBuf, FileResult>,
    /// What was last published to each document.
    published: HashMap<Uri, Vec<LspDiagnostic>>,
    /// Documents changed since the last lint.
    stale: bool,
    lint_at: Option<Instant>,
    queue: VecDeque<Message>,
    cancelled: HashSet<RequestId>,
    shown: HashSet<String>,
    shutdown: bool,
    next_id: i32,
}

enum Next {
    Message(Message),
    Lint,
    Closed,
}

impl<'c> Server<'c> {
    fn new(conn: &'c Connection, enc: Encoding, root: PathBuf, options: InitOptions) -> Self {
        let mut server = Server {
            conn,
            enc,
            root,
            resolver: fallback_resolver(),
            options,
            docs: Documents::default(),
            results: HashMap::new(),
            published: HashMap::new(),
            stale: false,
            lint_at: None,
            queue: VecDeque::new(),
            cancelled: HashSet::new(),
            shown: HashSet::new(),
            shutdown: false,
            next_id: 0,
        };
        server.resolver = server.make_resolver();
        server
    }

    /// The settings as on the command line: configuration files found from each file, the
    /// selection of `initializationOptions` over them.
    fn make_resolver(&mut self) -> Resolver {
        let overrides = CliOverrides {
            select: self.options.select.clone(),
            ignore: self.options.ignore.clone(),
            extend_select: self.options.extend_select.clone(),
            extend_exclude: Vec::new(),
        };
        match Resolver::new(overrides, None, false, self.root.clone()) {
            Ok(r) => r,
            Err(e) => {
                self.show(lsp_types::MessageType::ERROR, format!("memlint: {e}"));
                fallback_resolver()
            }
        }
    }

    fn run(&mut self) -> Result<i32, String> {
        loop {
            let msg = match self.next() {
                Next::Message(m) => m,
                Next::Lint => {
                    self.lint_now();
                    continue;
                }
                Next::Closed => return Ok(1),
            };
            match msg {
                Message::Request(r) => self.on_request(r),
                Message::Notification(n) => {
                    if n.method == note::Exit::METHOD {
                        return Ok(if self.shutdown { 0 } else { 1 });
                    }
                    let method = n.method.clone();
                    if catch_unwind(AssertUnwindSafe(|| self.on_notification(n))).is_err() {
                        self.log(format!("memlint: internal error handling {method}"));
                    }
                }
                Message::Response(_) => {}
            }
        }
    }

    fn next(&mut self) -> Next {
        if let Some(m) = self.queue.pop_front() {
            return Next::Message(m);
        }
        match self.lint_at {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                match self.conn.receiver.recv_timeout(wait) {
                    Ok(m) => Next::Message(m),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => Next::Lint,
                    Err(_) => Next::Closed,
                }
            }
            None => match self.conn.receiver.recv() {
                Ok(m) => Next::Message(m),
                Err(_) => Next::Closed,
            },
        }
    }

    /// Read what has arrived without waiting, so a cancellation sent after a request is seen
    /// before the request is answered.
    fn drain(&mut self) {
        while let Ok(m) = self.conn.receiver.try_recv() {
            match m {
                Message::Notification(n) if n.method == note::Cancel::METHOD => self.on_cancel(n),
                m => self.queue.push_back(m),
            }
        }
    }

    fn on_cancel(&mut self, n: Notification) {
        if let Some(p) = params_of::<note::Cancel>(n.params) {
            self.cancelled.insert(match p.id {
                lsp_types::NumberOrString::Number(n) => RequestId::from(n),
                lsp_types::NumberOrString::String(s) => RequestId::from(s),
            });
        }
    }

    fn on_request(&mut self, r: Request) {
        self.drain();
        if self.cancelled.remove(&r.id) {
            self.respond_err(r.id, ErrorCode::RequestCanceled, "cancelled".into());
            return;
        }
        if self.shutdown {
            self.respond_err(r.id, ErrorCode::InvalidRequest, "shutting down".into());
            return;
        }
        let id = r.id.clone();
        let outcome = catch_unwind(AssertUnwindSafe(|| self.answer(r)));
        match outcome {
            Ok(Ok(value)) => self.send(Response::new_ok(id, value).into()),
            Ok(Err((code, message))) => self.respond_err(id, code, message),
            Err(_) => self.respond_err(id, ErrorCode::InternalError, "internal error".into()),
        }
    }

    fn answer(&mut self, r: Request) -> Result<Value, (ErrorCode, String)> {
        let bad = |e: serde_json::Error| (ErrorCode::InvalidParams, e.to_string());
        match r.method.as_str() {
            req::Shutdown::METHOD => {
                self.shutdown = true;
                Ok(Value::Null)
            }
            req::CodeActionRequest::METHOD => {
                let p = serde_json::from_value(r.params).map_err(bad)?;
                self.fresh();
                Ok(actions::code_actions(self, &p))
            }
            req::HoverRequest::METHOD => {
                let p = serde_json::from_value(r.params).map_err(bad)?;
                self.fresh();
                Ok(actions::hover(self, &p))
            }
            _ => Err((
                ErrorCode::MethodNotFound,
                format!("unknown method {}", r.method),
            )),
        }
    }

    fn on_notification(&mut self, n: Notification) {
        let params = n.params;
        match n.method.as_str() {
            note::Cancel::METHOD => self.on_cancel(Notification::new(n.method, params)),
            note::DidOpenTextDocument::METHOD => {
                let Some(p) = params_of::<note::DidOpenTextDocument>(params) else {
                    return;
                };
                let d = p.text_document;
                let mut path = uri_to_path(&d.uri, &self.root, Some(&d.language_id));
                // A notebook sent as one Python document of its cells (jupyterlab-lsp's virtual
                // documents keep the `.ipynb` name): linted as the Python it is.
                if d.language_id == "python"
                    && Language::from_path(&path) == Some(Language::Notebook)
                {
                    path.as_mut_os_string().push(".py");
                }
                self.docs.texts.insert(
                    d.uri,
                    TextDoc {
                        path,
                        version: d.version,
                        text: d.text,
                    },
                );
                self.changed(Duration::ZERO);
            }
            note::DidChangeTextDocument::METHOD => {
                let Some(p) = params_of::<note::DidChangeTextDocument>(params) else {
                    return;
                };
                self.apply_changes(
                    &p.text_document.uri,
                    p.text_document.version,
                    p.content_changes,
                );
                self.changed(DEBOUNCE);
            }
            note::DidSaveTextDocument::METHOD => self.changed(Duration::ZERO),
            note::DidCloseTextDocument::METHOD => {
                let Some(p) = params_of::<note::DidCloseTextDocument>(params) else {
                    return;
                };
                self.close(&p.text_document.uri);
                self.changed(Duration::ZERO);
            }
            note::DidOpenNotebookDocument::METHOD => {
                let Some(p) = params_of::<note::DidOpenNotebookDocument>(params) else {
                    return;
                };
                self.open_notebook(p);
                self.changed(Duration::ZERO);
            }
            note::DidChangeNotebookDocument::METHOD => {
                let Some(p) = params_of::<note::DidChangeNotebookDocument>(params) else {
                    return;
                };
                self.change_notebook(p);
                self.changed(DEBOUNCE);
            }
            note::DidSaveNotebookDocument::METHOD => self.changed(Duration::ZERO),
            note::DidCloseNotebookDocument::METHOD => {
                let Some(p) = params_of::<note::DidCloseNotebookDocument>(params) else {
                    return;
                };
                let uri = p.notebook_document.uri;
                if let Some(nb) = self.docs.notebooks.remove(&uri) {
                    for c in nb.cells {
                        self.close(&c.uri);
                    }
                }
                for c in p.cell_text_documents {
                    self.close(&c.uri);
                }
                self.changed(Duration::ZERO);
            }
            note::DidChangeWatchedFiles::METHOD => {
                // A configuration, a launcher or a config a run names changed on disk.
                self.resolver = self.make_resolver();
                self.changed(Duration::ZERO);
            }
            note::DidChangeConfiguration::METHOD => {}
            _ => {}
        }
    }

    fn changed(&mut self, after: Duration) {
        self.stale = true;
        self.lint_at = Some(Instant::now() + after);
    }

    /// Lint now if anything changed since the last lint.
    fn fresh(&mut self) {
        if self.stale {
            self.lint_now();
        }
    }

    fn apply_changes(
        &mut self,
        uri: &Uri,
        version: i32,
        changes: Vec<lsp_types::TextDocumentContentChangeEvent>,
    ) {
        let enc = self.enc;
        let Some(doc) = self.docs.texts.get_mut(uri) else {
            return;
        };
        for c in changes {
            match c.range {
                None => doc.text = c.text,
                Some(range) => {
                    let lines = documents::Lines::new(&doc.text);
                    let start = lines.offset(range.start, enc);
                    let end = lines.offset(range.end, enc).max(start);
                    doc.text.replace_range(start..end, &c.text);
                }
            }
        }
        doc.version = version;
    }

    fn close(&mut self, uri: &Uri) {
        self.docs.texts.remove(uri);
        self.docs.cell_of.remove(uri);
        if self.published.remove(uri).is_some_and(|d| !d.is_empty()) {
            self.publish(uri.clone(), Vec::new(), None);
        }
    }

    fn open_notebook(&mut self, p: lsp_types::DidOpenNotebookDocumentParams) {
        let nb = p.notebook_document;
        let path = uri_to_path(&nb.uri, &self.root, None);
        for item in p.cell_text_documents {
            self.docs.cell_of.insert(item.uri.clone(), nb.uri.clone());
            self.docs.texts.insert(
                item.uri,
                TextDoc {
                    path: path.clone(),
                    version: item.version,
                    text: item.text,
                },
            );
        }
        let cells = nb.cells.into_iter().map(cell).collect();
        self.docs.notebooks.insert(
            nb.uri,
            NotebookDoc {
                path,
                version: nb.version,
                cells,
            },
        );
    }

    fn change_notebook(&mut self, p: lsp_types::DidChangeNotebookDocumentParams) {
        let uri = p.notebook_document.uri;
        let Some(path) = self.docs.notebooks.get(&uri).map(|n| n.path.clone()) else {
            return;
        };
        let Some(change) = p.change.cells else {
            if let Some(nb) = self.docs.notebooks.get_mut(&uri) {
                nb.version = p.notebook_document.version;
            }
            return;
        };
        if let Some(s) = change.structure {
            for item in s.did_open.unwrap_or_default() {
                self.docs.cell_of.insert(item.uri.clone(), uri.clone());
                self.docs.texts.insert(
                    item.uri,
                    TextDoc {
                        path: path.clone(),
                        version: item.version,
                        text: item.text,
                    },
                );
            }
            for gone in s.did_close.unwrap_or_default() {
                self.close(&gone.uri);
            }
            if let Some(nb) = self.docs.notebooks.get_mut(&uri) {
                let start = (s.array.start as usize).min(nb.cells.len());
                let end = (start + s.array.delete_count as usize).min(nb.cells.len());
                let new: Vec<Cell> = s
                    .array
                    .cells
                    .unwrap_or_default()
                    .into_iter()
                    .map(cell)
                    .collect();
                nb.cells.splice(start..end, new);
            }
        }
        if let Some(nb) = self.docs.notebooks.get_mut(&uri) {
            for data in change.data.unwrap_or_default() {
                if let Some(c) = nb.cells.iter_mut().find(|c| c.uri == data.document) {
                    c.code = data.kind == lsp_types::NotebookCellKind::Code;
                }
            }
            nb.version = p.notebook_document.version;
        }
        for t in change.text_content.unwrap_or_default() {
            self.apply_changes(&t.document.uri, t.document.version, t.changes);
        }
    }

    /// The launchers and configs next to the open files and in the folders above them up to the
    /// workspace root (the project a run is joined from): read for context, never reported on.
    fn around_open(&self) -> Vec<PathBuf> {
        let paths: Vec<PathBuf> = self.docs.overlay().into_keys().collect();
        let mut folders: Vec<PathBuf> = Vec::new();
        for p in &paths {
            for dir in p.ancestors().skip(1) {
                if !folders.iter().any(|f| f == dir) {
                    folders.push(dir.to_path_buf());
                }
                if dir == self.root || !dir.starts_with(&self.root) {
                    break;
                }
            }
        }
        let mut neighbours = Vec::new();
        for dir in folders {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                let launcher_or_config = matches!(
                    Language::from_path(&path),
                    Some(Language::Shell | Language::Yaml | Language::Json | Language::Toml)
                );
                let small = e
                    .metadata()
                    .is_ok_and(|m| m.is_file() && m.len() <= MAX_NEIGHBOUR_BYTES);
                if launcher_or_config && small && !paths.contains(&path) {
                    neighbours.push(path);
                }
            }
        }
        neighbours.sort();
        neighbours.truncate(MAX_NEIGHBOURS);
        neighbours
    }

    fn lint_now(&mut self) {
        self.stale = false;
        self.lint_at = None;
        let overlay = self.docs.overlay();
        let open: Vec<PathBuf> = overlay.keys().cloned().collect();
        let around = self.around_open();
        let resolver = &self.resolver;
        let run = catch_unwind(AssertUnwindSafe(|| {
            let opts = LintOptions::default();
            let (candidates, errors) = candidates_with(&open, resolver, opts, &overlay);
            lint_in_context(candidates, errors, &around, resolver, opts, &overlay)
        }));
        let run: Run = match run {
            Ok(run) => run,
            Err(_) => {
                self.log("memlint: internal error while linting; diagnostics not updated".into());
                return;
            }
        };
        for e in &run.errors {
            if overlay.contains_key(&crate::settings::absolute(Path::new(&e.path), &self.root))
                || !e.message.contains("cannot read")
            {
                self.show(
                    lsp_types::MessageType::ERROR,
                    format!("memlint: {}: {}", e.path, e.message),
                );
            }
        }
        // Only the open files' reasons: a neighbour that is not a config (a tsconfig.json with
        // comments) is no news, and would be logged at every keystroke.
        for s in &run.skipped {
            if overlay.contains_key(&crate::settings::absolute(Path::new(&s.path), &self.root)) {
                self.log(format!("memlint: {}: skipped: {}", s.path, s.reason));
            }
        }
        self.results = run
            .results
            .into_iter()
            .map(|r| (crate::settings::absolute(&r.file.path, &self.root), r))
            .collect();
        let mut out: HashMap<Uri, Vec<LspDiagnostic>> = self
            .docs
            .targets()
            .into_iter()
            .map(|(u, _)| (u, Vec::new()))
            .collect();
        for (uri, diags) in actions::all_diagnostics(self) {
            out.entry(uri).or_default().extend(diags);
        }
        let mut uris: Vec<Uri> = out.keys().cloned().collect();
        uris.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        for uri in uris {
            let diags = out.remove(&uri).unwrap_or_default();
            if self.published.get(&uri) == Some(&diags) {
                continue;
            }
            let version = self.docs.texts.get(&uri).map(|d| d.version);
            self.published.insert(uri.clone(), diags.clone());
            self.publish(uri, diags, version);
        }
    }

    fn publish(&self, uri: Uri, diagnostics: Vec<LspDiagnostic>, version: Option<i32>) {
        let params = lsp_types::PublishDiagnosticsParams {
            uri,
            diagnostics,
            version,
        };
        self.notify(note::PublishDiagnostics::METHOD, params);
    }

    fn register_watchers(&mut self) {
        let watchers: Vec<Value> = [
            "**/.memlint.toml",
            "**/memlint.toml",
            "**/pyproject.toml",
            "**/*.{sh,bash,slurm,sbatch,yaml,yml,json,toml,py}",
        ]
        .iter()
        .map(|g| serde_json::json!({"globPattern": g}))
        .collect();
        let params = serde_json::json!({"registrations": [{
            "id": "memlint-watch",
            "method": note::DidChangeWatchedFiles::METHOD,
            "registerOptions": {"watchers": watchers},
        }]});
        self.next_id += 1;
        let id = RequestId::from(format!("memlint-{}", self.next_id));
        let r = Request::new(id, req::RegisterCapability::METHOD.to_string(), params);
        self.send(r.into());
    }

    fn send(&self, m: Message) {
        let _ = self.conn.sender.send(m);
    }

    fn notify(&self, method: &str, params: impl serde::Serialize) {
        self.send(Notification::new(method.to_string(), params).into());
    }

    fn respond_err(&self, id: RequestId, code: ErrorCode, message: String) {
        self.send(Response::new_err(id, code as i32, message).into());
    }

    fn log(&self, message: String) {
        let p = lsp_types::LogMessageParams {
            typ: lsp_types::MessageType::LOG,
            message,
        };
        self.notify(note::LogMessage::METHOD, p);
    }

    /// A message shown to the user, once per text.
    fn show(&mut self, typ: lsp_types::MessageType, message: String) {
        if self.shown.insert(message.clone()) {
            self.notify(
                note::ShowMessage::METHOD,
                lsp_types::ShowMessageParams { typ, message },
            );
        }
    }
}

fn cell(c: lsp_types::NotebookCell) -> Cell {
    Cell {
        uri: c.document,
        code: c.kind == lsp_types::NotebookCellKind::Code,
    }
}

/// Settings with no configuration file, when the configured ones cannot be read.
fn fallback_resolver() -> Resolver {
    Resolver::new(CliOverrides::default(), None, true, crate::discover::cwd())
        .expect("the default settings resolve")
}

/// A notification's parameters, typed by the notification: `None` when they do not read.
fn params_of<N: lsp_types::notification::Notification>(
    value: serde_json::Value,
) -> Option<N::Params> {
    serde_json::from_value(value).ok()
}
