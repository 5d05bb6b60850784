//! Model shapes from the Hugging Face Hub, for a `--model ORG/NAME` the table does not hold.
//!
//! `config.json` gives the shape (read as a local one is, by [`shapes::from_config_text`]); the
//! safetensors files give the exact parameter count and the stored dtypes, read from their headers
//! by range requests (the 8-byte header length, then the header), never the weights. A sharded
//! checkpoint lists its files in `model.safetensors.index.json`. The environment is read as
//! `huggingface_hub` reads it: `HF_ENDPOINT`, `HF_HOME`, `HF_TOKEN` (or the token file
//! `huggingface-cli login` writes) and `HF_HUB_OFFLINE`. `ORG/NAME@REVISION` reads a branch,
//! tag or commit instead of `main`, as `huggingface_hub`'s `revision=` does. What a run reads is
//! cached under `$HF_HOME/memlint/models--ORG--NAME/` (`models--ORG--NAME@REVISION/` for another
//! revision), and a run that finds it there makes no request.

use super::shapes::{self, Shape};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The largest header the safetensors format allows.
const MAX_HEADER: u64 = 100_000_000;
/// The largest `config.json` or index read.
const MAX_JSON: u64 = 16 * 1024 * 1024;
/// Shards whose headers are read at once.
const PARALLEL: usize = 8;

/// Where and how the Hub is reached.
#[derive(Clone, Debug, PartialEq)]
pub struct Hub {
    /// `HF_ENDPOINT`, without a trailing `/`.
    pub endpoint: String,
    /// memlint's cache folder inside `HF_HOME`; `None` without a home folder.
    pub cache: Option<PathBuf>,
    pub token: Option<String>,
    /// `HF_HUB_OFFLINE`: the cache only, no request.
    pub offline: bool,
}

/// A model read from the Hub: its shape, and where its shape and count came from.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub shape: Shape,
    pub source: String,
    /// What went wrong without stopping the estimate (a cache that cannot be written).
    pub warnings: Vec<String>,
}

/// What the cache keeps beside `config.json`: where it came from and the count of the weights.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Record {
    endpoint: String,
    /// The revision asked for, when it is not `main`.
    revision: Option<String>,
    commit: Option<String>,
    config_etag: Option<String>,
    count: Option<Count>,
    /// Why there is no count (no safetensors files, or headers that could not be read).
    no_count: Option<String>,
}

/// Elements stored in the safetensors files, by dtype.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Count {
    files: Vec<String>,
    by_dtype: BTreeMap<String, u64>,
    /// Set when the count is the index's `total_size` over the bytes of `torch_dtype`.
    approximate_from: Option<String>,
}

impl Count {
    fn total(&self) -> u64 {
        self.by_dtype.values().sum()
    }
}

/// Why a request gave nothing.
#[derive(Debug)]
enum Fail {
    /// An HTTP status outside 2xx, with the Hub's `X-Error-Code` when it sent one.
    Status(u16, Option<String>),
    Network(String),
    Bad(String),
}

/// The revision read when none is given.
const DEFAULT_REVISION: &str = "main";

/// Whether `s` is a Hub model id, `ORG/NAME`, with or without `@REVISION`.
pub fn is_repo_id(s: &str) -> bool {
    split_revision(s).is_some()
}

/// `ORG/NAME@REVISION` as the repository and the revision (a branch, tag or commit; `None`
/// without `@`), or `None` when `s` is not a Hub model id.
pub fn split_revision(s: &str) -> Option<(&str, Option<&str>)> {
    let (repo, revision) = match s.split_once('@') {
        Some((repo, rev)) => (repo, Some(rev)),
        None => (s, None),
    };
    let mut parts = repo.split('/');
    let (Some(org), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let ok = part(org) && part(name) && !name.to_ascii_lowercase().ends_with(".json");
    (ok && revision.is_none_or(is_revision)).then_some((repo, revision))
}

/// A branch, tag or commit as git allows it to be named (`main`, `v1.0`, `refs/pr/3`, a hash):
/// no empty part, no `..`, no space or control character.
fn is_revision(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 256
        && !r.contains("..")
        && r.split('/').all(|p| !p.is_empty() && p != ".")
        && r.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// A revision as one path segment: `/` escaped, as `huggingface_hub` quotes it in its URLs
/// (`refs/pr/3` is `refs%2Fpr%2F3`), and in the cache folder's name.
fn revision_segment(r: &str) -> String {
    r.replace('/', "%2F")
}

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_uppercase().as_str(),
        "1" | "ON" | "YES" | "TRUE"
    )
}

impl Hub {
    /// The Hub as the environment sets it.
    pub fn from_env() -> Hub {
        Hub::from_vars(|k| std::env::var(k).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Hub {
        let set = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        let endpoint = set("HF_ENDPOINT")
            .map(|e| e.trim().trim_end_matches('/').to_string())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let home = set("HF_HOME").map(PathBuf::from).or_else(|| {
            set("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| {
                    set("HOME")
                        .or_else(|| set("USERPROFILE"))
                        .map(|h| Path::new(&h).join(".cache"))
                })
                .map(|c| c.join("huggingface"))
        });
        let token_file = set("HF_TOKEN_PATH")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join("token")));
        let token = set("HF_TOKEN")
            .or_else(|| set("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| token_file.and_then(|f| std::fs::read_to_string(f).ok()))
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        Hub {
            endpoint,
            cache: home.map(|h| h.join("memlint")),
            token,
            offline: set("HF_HUB_OFFLINE").is_some_and(|v| truthy(&v)),
        }
    }

    /// The shape of `repo` (`ORG/NAME`) at `revision` (`main` when `None`), from the cache or
    /// the Hub. Each revision has its own cache entry.
    pub fn shape(&self, repo: &str, revision: Option<&str>) -> Result<Fetched, String> {
        let revision = revision.unwrap_or(DEFAULT_REVISION);
        let key = match revision {
            DEFAULT_REVISION => format!("models--{}", repo.replace('/', "--")),
            r => format!(
                "models--{}@{}",
                repo.replace('/', "--"),
                revision_segment(r)
            ),
        };
        let dir = self.cache.as_ref().map(|c| c.join(key));
        if let Some(dir) = &dir {
            let config = std::fs::read_to_string(dir.join("config.json")).ok();
            let record = std::fs::read_to_string(dir.join("memlint.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Record>(&t).ok());
            match (config, record) {
                (Some(c), Some(r)) => return finish(repo, &c, &r, Vec::new()),
                (Some(c), None) if self.offline => {
                    let r = Record {
                        endpoint: self.endpoint.clone(),
                        revision: named(revision),
                        no_count: Some("no count of the weights in the cache".into()),
                        ..Record::default()
                    };
                    return finish(repo, &c, &r, Vec::new());
                }
                _ => {}
            }
        }
        if self.offline {
            let place = match &dir {
                Some(d) => format!("not in the cache ({})", d.display()),
                None => "not cached (no cache folder: set HF_HOME)".to_string(),
            };
            let name = match named(revision) {
                Some(r) => format!("{repo}@{r}"),
                None => repo.to_string(),
            };
            return Err(format!(
                "`{name}` is {place} and HF_HUB_OFFLINE is set: run once without HF_HUB_OFFLINE \
                 to cache its config, or give a local config.json (--model PATH/config.json) or \
                 --params N"
            ));
        }
        let client = Client::new(self, repo, revision);
        let (config, meta) = client
            .text("config.json")
            .map_err(|f| client.explain("config.json", f))?;
        // A config without the keys the estimate needs stops here, before any other request.
        shape_from(repo, &config)?;
        let mut record = Record {
            endpoint: self.endpoint.clone(),
            revision: named(revision),
            commit: meta.commit,
            config_etag: meta.etag,
            ..Record::default()
        };
        let mut complete = true;
        match client.count(&config) {
            Ok(Some(c)) => {
                // An approximate count is tried again for the exact one on the next run.
                complete = c.approximate_from.is_none();
                record.count = Some(c);
            }
            Ok(None) => record.no_count = Some("no safetensors files on the Hub".into()),
            Err(f) => {
                // A count that failed is tried again on the next run.
                complete = false;
                record.no_count = Some(format!(
                    "the safetensors headers could not be read: {}",
                    brief(&f)
                ));
            }
        }
        let mut warnings = Vec::new();
        if let Some(dir) = &dir {
            if let Err(e) = store(dir, &config, complete.then_some(&record)) {
                warnings.push(format!("cannot write the cache {}: {e}", dir.display()));
            }
        }
        finish(repo, &config, &record, warnings)
    }
}

/// The revision as the record keeps it: `None` for `main`.
fn named(revision: &str) -> Option<String> {
    (revision != DEFAULT_REVISION).then(|| revision.to_string())
}

fn shape_from(repo: &str, config: &str) -> Result<Shape, String> {
    shapes::from_config_text(config, repo).map_err(|e| {
        format!(
            "{e}, in its config.json from the Hub: the estimate needs the hidden size, layer \
             count, attention heads and vocabulary size; give a config.json with these keys \
             (--model PATH/config.json) or the parameter count (--params N)"
        )
    })
}

/// The shape of `config`, with the exact count of the weights when there is one.
fn finish(
    repo: &str,
    config: &str,
    record: &Record,
    warnings: Vec<String>,
) -> Result<Fetched, String> {
    let mut shape = shape_from(repo, config)?;
    let at = match (&record.revision, &record.commit) {
        (Some(r), Some(c)) => format!(" at revision {r} (commit {})", c.get(..12).unwrap_or(c)),
        (Some(r), None) => format!(" at revision {r}"),
        (None, Some(c)) => format!(" at commit {}", c.get(..12).unwrap_or(c)),
        (None, None) => String::new(),
    };
    let mut source = format!("config.json from {}{at}", record.endpoint);
    let usable = record.count.as_ref().map(|c| (c, packed(c)));
    match usable {
        Some((c, None)) if c.total() > 0 => {
            let files = match c.files.as_slice() {
                [one] => one.clone(),
                many => format!("{} files", many.len()),
            };
            let stored = match c.by_dtype.len() {
                1 => c.by_dtype.keys().cloned().collect::<String>(),
                _ => c
                    .by_dtype
                    .iter()
                    .map(|(d, n)| format!("{d} ({})", grouped(*n)))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            shape.params = c.total() as f64;
            shape.params_source = match &c.approximate_from {
                Some(how) => format!("{} parameters from {how}", grouped(c.total())),
                None => format!(
                    "exact count from the safetensors headers ({files}): {} parameters, stored as {stored}",
                    grouped(c.total())
                ),
            };
        }
        Some((_, Some(why))) => {
            shape.params_source = format!("computed from the shape: {why}");
        }
        _ => {
            let why = record
                .no_count
                .as_deref()
                .unwrap_or("no count of the weights");
            shape.params_source = format!("computed from the shape ({why})");
        }
    }
    source.push_str("; ");
    source.push_str(&shape.params_source);
    shape.source = source.clone();
    Ok(Fetched {
        shape,
        source,
        warnings,
    })
}

/// Why stored elements are not parameters: integer tensors holding packed (quantized) weights.
fn packed(c: &Count) -> Option<String> {
    let float = |d: &str| {
        matches!(
            d,
            "F64" | "F32" | "F16" | "BF16" | "F8_E4M3" | "F8_E5M2" | "F8_E4M3FN" | "F8_E5M2FNUZ"
        )
    };
    let ints: u64 = c
        .by_dtype
        .iter()
        .filter(|(d, _)| !float(d))
        .map(|(_, n)| *n)
        .sum();
    (ints * 100 > c.total()).then(|| {
        let names: Vec<&str> = c
            .by_dtype
            .keys()
            .filter(|d| !float(d))
            .map(String::as_str)
            .collect();
        format!(
            "the safetensors files store {} tensors, packed quantized weights whose elements are not parameters",
            names.join(" and ")
        )
    })
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn brief(f: &Fail) -> String {
    match f {
        Fail::Status(s, Some(code)) => format!("HTTP {s} ({code})"),
        Fail::Status(s, None) => format!("HTTP {s}"),
        Fail::Network(e) | Fail::Bad(e) => e.clone(),
    }
}

/// Write the cache: `config.json`, then the record (its presence marks the entry complete).
fn store(dir: &Path, config: &str, record: Option<&Record>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let write = |name: &str, text: &str| -> std::io::Result<()> {
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(text.as_bytes())?;
        tmp.persist(dir.join(name)).map_err(|e| e.error)?;
        Ok(())
    };
    write("config.json", config)?;
    if let Some(r) = record {
        let text = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
        write("memlint.json", &text)?;
    }
    Ok(())
}

/// What a response says of the file.
#[derive(Default)]
struct Meta {
    commit: Option<String>,
    etag: Option<String>,
    size: Option<u64>,
}

struct Client<'h> {
    hub: &'h Hub,
    repo: &'h str,
    revision: &'h str,
    agent: ureq::Agent,
}

impl<'h> Client<'h> {
    fn new(hub: &'h Hub, repo: &'h str, revision: &'h str) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(60)))
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::SameHost)
            .user_agent(concat!("memlint/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Client {
            hub,
            repo,
            revision,
            agent,
        }
    }

    fn url(&self, file: &str) -> String {
        format!(
            "{}/{}/resolve/{}/{file}",
            self.hub.endpoint,
            self.repo,
            revision_segment(self.revision)
        )
    }

    fn send(
        &self,
        req: ureq::RequestBuilder<ureq::typestate::WithoutBody>,
    ) -> Result<ureq::http::Response<ureq::Body>, Fail> {
        let req = match &self.hub.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
        };
        let resp = req.call().map_err(|e| Fail::Network(e.to_string()))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(Fail::Status(status, header(&resp, "x-error-code")));
        }
        Ok(resp)
    }

    /// A small file whole (`config.json`, the index).
    fn text(&self, file: &str) -> Result<(String, Meta), Fail> {
        let mut resp = self.send(self.agent.get(self.url(file)))?;
        let meta = meta(&resp);
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_JSON)
            .read_to_vec()
            .map_err(|e| Fail::Network(format!("reading {file}: {e}")))?;
        let text =
            String::from_utf8(bytes).map_err(|_| Fail::Bad(format!("{file} is not UTF-8")))?;
        Ok((text, meta))
    }

    /// `len` bytes of `file` from `start`, by a range request. A server that ignores the range
    /// sends the file from its start: the bytes before `start` are skipped and the rest is never
    /// read.
    fn range(&self, file: &str, start: u64, len: u64) -> Result<Vec<u8>, Fail> {
        let last = start + len - 1;
        let resp = self.send(
            self.agent
                .get(self.url(file))
                .header("Range", format!("bytes={start}-{last}")),
        )?;
        let partial = resp.status().as_u16() == 206;
        let mut reader = resp.into_body().into_reader();
        if !partial {
            std::io::copy(&mut (&mut reader).take(start), &mut std::io::sink())
                .map_err(|e| Fail::Network(format!("reading {file}: {e}")))?;
        }
        let mut out = Vec::new();
        reader
            .take(len)
            .read_to_end(&mut out)
            .map_err(|e| Fail::Network(format!("reading {file}: {e}")))?;
        if out.len() as u64 != len {
            return Err(Fail::Bad(format!(
                "{file} ended at byte {} of the {len} asked for",
                out.len()
            )));
        }
        Ok(out)
    }

    /// The elements of every tensor a safetensors file holds, from its header.
    fn header(&self, file: &str, size: Option<u64>) -> Result<BTreeMap<String, u64>, Fail> {
        let first = self.range(file, 0, 8)?;
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(&first);
        let n = u64::from_le_bytes(len_bytes);
        if !(2..=MAX_HEADER).contains(&n) || size.is_some_and(|s| n + 8 > s) {
            return Err(Fail::Bad(format!(
                "{file}: a header of {n} bytes is not a safetensors header"
            )));
        }
        let header = self.range(file, 8, n)?;
        elements(&header).map_err(|e| Fail::Bad(format!("{file}: {e}")))
    }

    /// The count of the weights: the index's shards, or `model.safetensors`; `None` when the
    /// repository has neither.
    fn count(&self, config: &str) -> Result<Option<Count>, Fail> {
        match self.text("model.safetensors.index.json") {
            Ok((index, _)) => self.count_shards(&index, config).map(Some),
            Err(Fail::Status(404, _)) => {
                let file = "model.safetensors";
                let meta = match self.send(self.agent.head(self.url(file))) {
                    Ok(resp) => meta(&resp),
                    Err(Fail::Status(404, _)) => return Ok(None),
                    Err(f) => return Err(f),
                };
                let by_dtype = self.header(file, meta.size)?;
                Ok(Some(Count {
                    files: vec![file.to_string()],
                    by_dtype,
                    approximate_from: None,
                }))
            }
            Err(f) => Err(f),
        }
    }

    fn count_shards(&self, index: &str, config: &str) -> Result<Count, Fail> {
        let json: serde_json::Value = serde_json::from_str(index)
            .map_err(|e| Fail::Bad(format!("model.safetensors.index.json: {e}")))?;
        let mut files: Vec<String> = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .map(|m| {
                m.values()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files.dedup();
        if files.is_empty() || files.iter().any(|f| !is_file_name(f)) {
            return Err(Fail::Bad(
                "model.safetensors.index.json: no usable weight_map".into(),
            ));
        }
        let mut by_dtype = BTreeMap::new();
        let mut failed = None;
        for chunk in files.chunks(PARALLEL) {
            let results: Vec<Result<BTreeMap<String, u64>, Fail>> = std::thread::scope(|s| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|f| s.spawn(move || self.header(f, None)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(Fail::Bad("a header read failed".into())))
                    })
                    .collect()
            });
            for r in results {
                match r {
                    Ok(counts) => {
                        for (d, n) in counts {
                            *by_dtype.entry(d).or_insert(0u64) += n;
                        }
                    }
                    Err(f) => failed = Some(f),
                }
            }
            if failed.is_some() {
                break;
            }
        }
        match failed {
            None => Ok(Count {
                files,
                by_dtype,
                approximate_from: None,
            }),
            // The index's total size over the bytes of the config's dtype, when the headers
            // could not be read.
            Some(f) => approximate(&json, config, files).ok_or(f),
        }
    }

    /// The error a user reads when `file` could not be had.
    fn explain(&self, file: &str, f: Fail) -> String {
        let repo = self.repo;
        let at = &self.hub.endpoint;
        let login = "set HF_TOKEN to a token that can read it, or run `huggingface-cli login`";
        let other = "give a local config.json (--model PATH/config.json) or the parameter count (--params N)";
        match f {
            Fail::Status(s @ (401 | 403), code) => match code.as_deref() {
                Some("RepoNotFound") => format!(
                    "`{repo}` is not on {at}, or is private (HTTP {s}): check the id as the model's \
                     page spells it; for a private model {login}"
                ),
                Some("GatedRepo") => format!(
                    "`{repo}` is gated on {at} (HTTP {s}): accept its conditions on the model's \
                     page, then {login}"
                ),
                _ if self.hub.token.is_some() => format!(
                    "`{repo}` on {at} refused the token given (HTTP {s}): the model is gated or \
                     private and the token cannot read it; accept a gated model's conditions on \
                     its page, or {login}"
                ),
                _ => format!("`{repo}` is gated or private on {at} (HTTP {s}): {login}"),
            },
            Fail::Status(404, Some(code)) if code == "RevisionNotFound" => format!(
                "`{repo}` on {at} has no revision `{}` (HTTP 404): give a branch, tag or commit \
                 the model has (ORG/NAME@REVISION), or leave out @REVISION for main",
                self.revision
            ),
            Fail::Status(404, Some(code)) if code == "EntryNotFound" => format!(
                "`{repo}` on {at} has no {file}, which memlint reads the shape from: {other}"
            ),
            Fail::Status(404, _) => format!(
                "`{repo}` is not on {at} (HTTP 404): check the id (ORG/NAME, as on the model's \
                 page), or {other}"
            ),
            Fail::Status(s, _) => format!(
                "{at} answered HTTP {s} for {file} of `{repo}`: try again later, or {other}"
            ),
            Fail::Network(e) => format!(
                "cannot reach {at} for `{repo}`: {e}: check the network connection and \
                 HF_ENDPOINT, or {other}"
            ),
            Fail::Bad(e) => format!("`{repo}`: {e}"),
        }
    }
}

fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}

fn meta(resp: &ureq::http::Response<ureq::Body>) -> Meta {
    Meta {
        commit: header(resp, "x-repo-commit"),
        etag: header(resp, "x-linked-etag").or_else(|| header(resp, "etag")),
        size: header(resp, "x-linked-size")
            .or_else(|| header(resp, "content-length"))
            .and_then(|s| s.parse().ok())
            .filter(|s| *s > 0),
    }
}

/// A shard name of an index: a relative path of plain parts.
fn is_file_name(f: &str) -> bool {
    !f.is_empty()
        && !f.starts_with('/')
        && f.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
        && f.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// Elements by dtype of the tensors a safetensors header describes.
fn elements(header: &[u8]) -> Result<BTreeMap<String, u64>, String> {
    let json: serde_json::Value =
        serde_json::from_slice(header).map_err(|e| format!("the header is not JSON: {e}"))?;
    let tensors = json.as_object().ok_or("the header is not a JSON object")?;
    let mut out = BTreeMap::new();
    for (name, t) in tensors {
        if name == "__metadata__" {
            continue;
        }
        let dtype = t
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| format!("tensor `{name}` has no dtype"))?;
        let dims = t
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| format!("tensor `{name}` has no shape"))?;
        let mut n: u64 = 1;
        for d in dims {
            let d = d
                .as_u64()
                .ok_or_else(|| format!("tensor `{name}` has a shape that is not counts"))?;
            n = n
                .checked_mul(d)
                .ok_or_else(|| format!("tensor `{name}` is too large to count"))?;
        }
        let slot = out.entry(dtype.to_string()).or_insert(0u64);
        *slot = slot
            .checked_add(n)
            .ok_or_else(|| "too many elements to count".to_string())?;
    }
    Ok(out)
}

/// The count the index's `metadata.total_size` gives at the bytes of the config's `torch_dtype`.
fn approximate(index: &serde_json::Value, config: &str, files: Vec<String>) -> Option<Count> {
    let total = index.get("metadata")?.get("total_size")?.as_u64()?;
    let config: serde_json::Value = serde_json::from_str(config).ok()?;
    let dtype = config
        .get("torch_dtype")
        .or_else(|| config.get("dtype"))?
        .as_str()?;
    let (name, bytes) = match dtype {
        "float32" => ("F32", 4),
        "bfloat16" => ("BF16", 2),
        "float16" => ("F16", 2),
        _ => return None,
    };
    let mut by_dtype = BTreeMap::new();
    by_dtype.insert(name.to_string(), total / bytes);
    Some(Count {
        files,
        by_dtype,
        approximate_from: Some(format!(
            "the index's total_size of {} bytes at {bytes} bytes each ({dtype}); the headers could not be read",
            grouped(total)
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        for ok in ["meta-llama/Llama-3.1-8B", "google/gemma-2-9b", "a/b.c_d-e"] {
            assert!(is_repo_id(ok), "{ok}");
            assert_eq!(split_revision(ok), Some((ok, None)));
        }
        assert_eq!(
            split_revision("a/b@refs/pr/3"),
            Some(("a/b", Some("refs/pr/3")))
        );
        assert_eq!(split_revision("a/b@v1.0"), Some(("a/b", Some("v1.0"))));
        assert_eq!(revision_segment("refs/pr/3"), "refs%2Fpr%2F3");
        for not in [
            "a/b@", "a/b@../x", "a/b@x y", "a/b@x//y", "a/b@x@y", "a@b/c",
        ] {
            assert!(!is_repo_id(not), "{not}");
        }
        for not in [
            "llama-7b",
            "a/b/c",
            "./config.json",
            "org/config.json",
            "../x",
            "a/",
            "a b/c",
        ] {
            assert!(!is_repo_id(not), "{not}");
        }
    }

    #[test]
    fn the_environment_as_huggingface_hub_reads_it() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let hub = Hub::from_vars(vars(&[
            ("HOME", "/home/u"),
            ("HF_TOKEN_PATH", "/nonexistent"),
        ]));
        assert_eq!(hub.endpoint, "https://huggingface.co");
        assert_eq!(
            hub.cache,
            Some(PathBuf::from("/home/u/.cache/huggingface/memlint"))
        );
        assert_eq!(hub.token, None);
        assert!(!hub.offline);
        let hub = Hub::from_vars(vars(&[
            ("HF_ENDPOINT", "http://mirror.example/"),
            ("HF_HOME", "/data/hf"),
            ("HF_TOKEN", " hf_abc \n"),
            ("HF_HUB_OFFLINE", "true"),
        ]));
        assert_eq!(hub.endpoint, "http://mirror.example");
        assert_eq!(hub.cache, Some(PathBuf::from("/data/hf/memlint")));
        assert_eq!(hub.token.as_deref(), Some("hf_abc"));
        assert!(hub.offline);
        let hub = Hub::from_vars(vars(&[("XDG_CACHE_HOME", "/x"), ("HF_HUB_OFFLINE", "0")]));
        assert_eq!(hub.cache, Some(PathBuf::from("/x/huggingface/memlint")));
        assert!(!hub.offline);
    }

    #[test]
    fn header_elements_by_dtype() {
        let header = br#"{"__metadata__": {"format": "pt"},
            "a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]},
            "b": {"dtype": "F32", "shape": [3], "data_offsets": [64, 76]},
            "c": {"dtype": "BF16", "shape": [], "data_offsets": [76, 78]}}"#;
        let got = elements(header).expect("header");
        assert_eq!(got.get("BF16"), Some(&33));
        assert_eq!(got.get("F32"), Some(&3));
        assert!(elements(br#"{"a": {"dtype": "F32", "shape": [-1]}}"#).is_err());
        assert!(elements(b"[1]").is_err());
        let huge = br#"{"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296]}}"#;
        assert!(elements(huge).is_err());
    }

    #[test]
    fn packed_integers_are_not_parameters() {
        let mut c = Count::default();
        c.by_dtype.insert("BF16".into(), 1000);
        assert!(packed(&c).is_none());
        c.by_dtype.insert("I32".into(), 500);
        assert!(packed(&c).is_some_and(|w| w.contains("I32")));
    }

    #[test]
    fn counts_grouped() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(8_030_261_248), "8,030,261,248");
    }
}
