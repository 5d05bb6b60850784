//! Memory formulas (MEM001, MEM002's assignments, MEM005's constants, MEM006) need a name whose
//! role is a model size or a parameter count; MEM005 also reads a parameter count from a model
//! name in a config written in Python.

use super::scan::{assigned_at, finder, has, identifier_at, is_ident, Scan, Word};
use crate::config::parse_number;
use crate::expr::{
    counts_parameters, is_memory_name, may_count_by_use, names_a_count, role_of, sizes_memory, Role,
};
use crate::frontend::python_config::{BATCH_KEY_NAMES, BATCH_KEY_PARTS};
use crate::project::{params_from_name, MODEL_KEYS};
use aho_corasick::AhoCorasick;
use std::sync::OnceLock;

/// How far from a derived parameter count memory arithmetic is looked for.
const NEAR: usize = 1500;

/// Something only memory arithmetic writes: a capacity source, a byte unit in a name or a
/// message, or a divisor that converts bytes. One pass finds them all.
fn memory_marks() -> Option<&'static AhoCorasick> {
    const MARKS: &[&str] = &[
        "total_memory",
        "mem_get_info",
        "memory_allocated",
        "memory_reserved",
        "max_memory",
        "nvidia-smi",
        "gpu_mem",
        "vram",
        "free_mem",
        "mem_free",
        "memory_gb",
        "device_memory",
        "bytes",
        "gib",
        "_gb",
        "gb_",
        " gb",
        "'gb",
        "\"gb",
        "gb'",
        "gb\"",
        "e9",
        "e+9",
        "**30",
        "** 30",
        "<<30",
        "<< 30",
        "1073741824",
        "1024**3",
        "1024 ** 3",
        "1000**3",
        "1000 ** 3",
        "1024 * 1024",
        "1024*1024",
        "**20",
        "** 20",
        "<<20",
        "<< 20",
        "1048576",
        "mib",
    ];
    static MATCHER: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    MATCHER
        .get_or_init(|| AhoCorasick::new(MARKS).ok())
        .as_ref()
}

/// Whether memory is counted in `window` (lowercase): one of [`memory_marks`].
fn counts_memory(window: &[u8]) -> bool {
    memory_marks().is_none_or(|m| {
        m.find_iter(window).any(|found| {
            // The library bitsandbytes counts no memory.
            if window[..found.start()].ends_with(b"bitsand") {
                return false;
            }
            // `1e9` and `2.5e+9` are numbers; `e9` inside a word or a hash is not.
            window[found.start()] != b'e'
                || found
                    .start()
                    .checked_sub(1)
                    .is_some_and(|i| window[i].is_ascii_digit() || window[i] == b'.')
        })
    })
}

/// Parts of a name that may hold a model size or a parameter count.
const SIZED: &[&str] = &["model", "param", "weight"];

impl Scan<'_> {
    /// Memory formulas (MEM001, MEM002's assignments, MEM005's constants, MEM006) are recorded
    /// only with a term whose role is a model size or a parameter count, and a term's role is
    /// [`role_of`] of an identifier written in the file. A parameter count matters only where
    /// [`Scan::counts_parameters`] says, or, for the memory rules of the second wave
    /// (`scaled`), where [`Scan::scaled_count`] says: one scan serves both.
    pub(super) fn sized_name(&self, scaled: bool) -> bool {
        self.part_sized_by_dtype()
            || SIZED.iter().any(|word| {
                let mut read_to = 0;
                memchr::memmem::find_iter(self.lower, word.as_bytes()).any(|at| {
                    // A name is read whole at its first word.
                    if at < read_to {
                        return false;
                    }
                    let (reading, end) = sized_name_at(self.text, at);
                    read_to = end;
                    match reading {
                        Reading::Sized => true,
                        Reading::Count(start, end) => {
                            self.counts_parameters(start, end)
                                || (scaled && self.scaled_count(start, end))
                        }
                        Reading::Neither => false,
                    }
                })
            })
    }

    /// A value sized by the model whatever it is called: a parameter count from `numel()` sums
    /// or `num_parameters()` (the sources the frontend reads), or a name for billions of
    /// parameters (`PARAMS_B`, `n_params_billion`), in a file that counts memory at all
    /// ([`Scan::counts_memory`]): library code counts parameters for many other reasons.
    pub(super) fn derived_size(&self) -> bool {
        self.derived_sizes().any(|at| self.counts_memory_near(at))
            || (self.model_count_entry() && counts_memory(self.lower))
    }

    /// An entry of a table from models' names to their parameter counts (`"Llama-3-8B":
    /// 8.03e9`): looked up by a key known only at run time, the table gives a count (the
    /// frontend asks the same of every entry). The lookup may sit anywhere in the file.
    fn model_count_entry(&self) -> bool {
        let bytes = self.bytes;
        let entry = |colon: usize| {
            let quote = bytes[colon - 1];
            let Some(open) = bytes[..colon - 1].iter().rposition(|b| *b == quote) else {
                return false;
            };
            let value = self.text[colon + 1..].trim_start_matches([' ', '\t']);
            let len = value
                .bytes()
                .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'e' | b'+'))
                .count();
            let (Some(count), Some(key)) = (
                parse_number(&value[..len]),
                self.text.get(open + 1..colon - 1),
            ) else {
                return false;
            };
            count >= 1e6
                && params_from_name(key).is_some_and(|named| (0.5..=2.0).contains(&(count / named)))
        };
        [finder!(b"\":"), finder!(b"':")]
            .iter()
            .any(|f| f.find_iter(bytes).any(|at| entry(at + 1)))
    }

    /// Whether memory is counted within [`NEAR`] bytes of `at`: a large library file that
    /// counts parameters in one function and bytes in another has no memory formula.
    pub(super) fn counts_memory_near(&self, at: usize) -> bool {
        let lower = self.lower;
        let start = at.saturating_sub(NEAR);
        let end = lower.len().min(at + NEAR);
        counts_memory(&lower[start..end])
    }

    /// A function named for memory whose parameter has a count's name (`def train_mem_gb(P,
    /// bpp=2):`): the frontend reads that parameter as a parameter count (see
    /// [`counts_parameters`]). Near memory arithmetic only, as derived counts are.
    pub(super) fn memory_function(&self) -> bool {
        self.count_parameters(true)
    }

    /// Where a function (named for memory, when `named`) has a parameter with a count's name.
    fn count_parameters(&self, named: bool) -> bool {
        const PARAMS_MAX: usize = 400;
        let lower = self.lower;
        finder!(b"def ").find_iter(lower).any(|at| {
            let rest = &lower[at + 4..];
            let skip = rest.iter().take_while(|b| **b == b' ').count();
            let (start, end) = identifier_at(lower, at + 4 + skip, false);
            // The name is ASCII: its lowercase is `lower`'s (`sizes_memory` reads it so).
            let def = start == at + 4 + skip
                && (!named || may_size_memory(&lower[start..end]))
                && (!named || self.text.get(start..end).is_some_and(sizes_memory))
                && lower.get(end) == Some(&b'(');
            if !def {
                return false;
            }
            let stop = crate::source::floor_char_boundary(self.text, end + 1 + PARAMS_MAX);
            let tail = self.text.get(end + 1..stop).unwrap_or("");
            let params = tail.split(')').next().unwrap_or("");
            params.split(',').any(|p| {
                let name = p.split([':', '=']).next().unwrap_or("");
                let name = name.trim().trim_start_matches('*');
                may_count_parameters(name) && counts_parameters(name)
            }) && (!named || self.counts_memory_near(at))
        })
    }

    /// A count's name given a number of parameters (`P = 7e9`, `params = 13 * 10**9`,
    /// `n = 6_738_415_616`): the frontend reads the name as a parameter count. Near memory
    /// arithmetic only.
    pub(super) fn count_constant(&self) -> bool {
        self.assigned_count() || self.count_argument()
    }

    /// A number of parameters given as a call's positional argument (`parts(13e9, world=16)`):
    /// the frontend binds it to the parameter of a helper of the file, which it reads as a
    /// count by that parameter's name. Near memory arithmetic only.
    fn count_argument(&self) -> bool {
        let lower = self.lower;
        let argument = |at: usize| {
            let after = &lower[at + 1..];
            let start = after.iter().take_while(|b| **b == b' ').count();
            if !after.get(start).is_some_and(u8::is_ascii_digit) {
                return false;
            }
            let len = after[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'e' | b'+'))
                .count();
            let value = std::str::from_utf8(&after[start..start + len]).unwrap_or("");
            parse_number(value).is_some_and(|v| v >= 1e6) && self.counts_memory_near(at)
        };
        // The helper's parameter first: it reads only the definitions, the argument every `(`
        // and `,`.
        self.count_parameters(false) && memchr::memchr2_iter(b'(', b',', lower).any(argument)
    }

    /// A count's name assigned a number of parameters.
    fn assigned_count(&self) -> bool {
        let lower = self.lower;
        memchr::memchr_iter(b'=', lower).any(|eq| {
            let before = lower[..eq].last().copied().unwrap_or(b' ');
            let after = &lower[eq + 1..];
            // A number follows, not a comparison or an augmented assignment.
            let value_start = after.iter().take_while(|b| **b == b' ').count();
            if !after.get(value_start).is_some_and(u8::is_ascii_digit)
                || b"=<>!+-*/%&|^:".contains(&before)
            {
                return false;
            }
            // The name first: a count's name is rarer than a number.
            let name_end = lower[..eq]
                .iter()
                .rposition(|b| *b != b' ')
                .map_or(0, |i| i + 1);
            let (start, end) = identifier_at(lower, name_end, false);
            let mut name = self.text.get(start..end).unwrap_or("");
            if end != name_end {
                return false;
            }
            // `total: int = 3_000_000_000`: the name before the annotation.
            // On the same line: a `:` ending the line before opens a block.
            let annotated = lower[..start]
                .trim_ascii_end()
                .strip_suffix(b":")
                .filter(|b| !lower[b.len()..start].contains(&b'\n'));
            if let Some(before) = annotated {
                let (s, e) = identifier_at(lower, before.trim_ascii_end().len(), false);
                name = self.text.get(s..e).unwrap_or("");
            }
            // `cfg["n_params"] = 7e9`: an item is read under its key.
            if start == end {
                if let Some(key) = quoted_item_key(self.text, start) {
                    name = key;
                }
            }
            // `N, GPU_GB = 13e9, 80`: one of the names an unpacking sets (`f(x, n=7e9)` is a
            // keyword, read below).
            if lower[..start].trim_ascii_end().ends_with(b",")
                && self.unpacked_count(eq)
                && self.counts_memory_near(eq)
            {
                return true;
            }
            // A keyword's value ends at the next argument (`Planner(n=7_241_732_096, gpu=80)`).
            let end = after
                .iter()
                .position(|b| matches!(b, b'\n' | b'#' | b';' | b',' | b')'))
                .unwrap_or(after.len());
            let value = std::str::from_utf8(&after[value_start..end]).unwrap_or("");
            let value = value.trim_end();
            let literal = value.bytes().all(|c| {
                c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'*' | b' ' | b'e' | b'+')
            });
            // The number first: nearly every number assigned is small, and the name's role
            // costs more to ask. A count is at least 1e6 by its name, more by its use.
            let may_be_large =
                value.contains('*') || parse_number(value).is_some_and(|v| v >= COUNT_NUMBER_MIN);
            if !literal || !may_be_large {
                return false;
            }
            // A count's name, or any name whose number a use may show counts parameters
            // (`N_BASE = 3_212_749_824` ... `N_BASE * 8`).
            // A flag's default (`add_argument("--params", default=7e9)`): what the parsed
            // arguments hold under a flag named for a count is one (the frontend's `count_flag`).
            let by_name = name == "default" || (may_name_a_count(name) && names_a_count(name));
            if !by_name && !may_count_by_use(name, COUNT_SIZED) {
                return false;
            }
            // A product of literals is a count by its use only if its value may be one (a
            // unit's power, `1024 * 1024`, never is): the frontend asks the same of it.
            let large = match (by_name, literal_product(value)) {
                (false, Some(v)) => may_count_by_use(name, v),
                _ => {
                    value.contains('*')
                        || parse_number(value).is_some_and(|v| match by_name {
                            true => v >= 1e6,
                            false => may_count_by_use(name, v),
                        })
                }
            };
            if !literal || !large {
                return false;
            }
            // A count known by its use only: the name must be multiplied somewhere (the
            // frontend reads the number as a count where it is, `N_BASE * 8`).
            let used = by_name || (!name.is_empty() && self.multiplied(name));
            used && (!by_name || role_of(name) == Role::Unknown) && self.counts_memory_near(eq)
        })
    }

    /// Whether `name` is written as a factor of a product (`name * 8`, `8 * (name)`, `name *=
    /// 2`), not of a power.
    fn multiplied(&self, name: &str) -> bool {
        let bytes = self.bytes;
        memchr::memmem::find_iter(bytes, name.as_bytes()).any(|at| {
            let end = at + name.len();
            let ident =
                |i: Option<usize>| i.and_then(|i| bytes.get(i)).is_some_and(|b| is_ident(*b));
            let whole = !ident(at.checked_sub(1)) && !ident(Some(end));
            let star = |b: &[u8]| b.first() == Some(&b'*') && b.get(1) != Some(&b'*');
            let after = bytes[end..]
                .iter()
                .position(|b| !matches!(b, b' ' | b'\t' | b')'))
                .map_or(&[][..], |i| &bytes[end + i..]);
            let before: Vec<u8> = bytes[..at]
                .iter()
                .rev()
                .skip_while(|b| matches!(b, b' ' | b'\t' | b'('))
                .take(2)
                .copied()
                .collect();
            whole && (star(after) || star(&before))
        })
    }

    /// Whether the unpacking assignment whose `=` is at `eq` gives a count's name a number of
    /// parameters (`PARAMS, GPU_GB = 13e9, 80`).
    fn unpacked_count(&self, eq: usize) -> bool {
        let text = self.text;
        let line_start = text[..eq].rfind('\n').map_or(0, |i| i + 1);
        let line_end =
            memchr::memchr3(b'\n', b'#', b';', &self.bytes[eq..]).map_or(text.len(), |i| eq + i);
        let targets = text[line_start..eq].split(',').map(str::trim);
        let values = text[eq + 1..line_end].split(',').map(str::trim);
        targets.zip(values).any(|(name, value)| {
            names_a_count(name)
                && matches!(role_of(name), Role::Unknown | Role::Model)
                && parse_number(value).is_some_and(|v| v >= crate::expr::PARAM_COUNT_MIN)
        })
    }

    /// Where a parameter count is derived: `numel()` (counted over a model's parameters),
    /// `num_parameters()` and the like, or a name for billions of parameters.
    fn derived_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        let lower = self.lower;
        let numel = has!(lower, b"parameters()");
        // `numel()` of a parameter: the receiver names one, or the lines around iterate a
        // module's parameters (`n += p.numel()` under `for p in model.parameters():`).
        let numels = numel
            .then(|| finder!(b"numel").find_iter(lower))
            .into_iter()
            .flatten()
            .filter(move |&at| {
                let (start, _) = identifier_at(lower, at.saturating_sub(2), false);
                let receiver = &lower[start..at];
                let lines = lines_before(lower, at, 3);
                receiver.windows(5).any(|w| w == b"param")
                    || finder!(b"parameters(").find(lines).is_some()
            });
        // The words that derive a count: `num_parameters`, `get_num_params`, `num_params(`,
        // `get_nb_trainable`, `get_memory_footprint`, `billion`, `7b params`. The first three are found
        // through `num_param` and `billion` through `illion`, one pass for each group.
        let starts = |at: usize, word: &[u8]| lower[at..].starts_with(word);
        let num_param = finder!(b"num_param").find_iter(lower).flat_map(move |at| {
            let parameters = starts(at, b"num_parameters").then_some(at);
            let get = (at >= 4 && starts(at - 4, b"get_num_params")).then(|| at - 4);
            let call = starts(at, b"num_params(").then_some(at);
            [parameters, get, call].into_iter().flatten()
        });
        let named = num_param
            .chain(finder!(b"get_nb_trainable").find_iter(lower))
            // A comment giving a number in billions: `nb = 1.3  # 1.3B params`.
            .chain(finder!(b"b param").find_iter(lower))
            .chain(finder!(b"get_memory_footprint").find_iter(lower));
        // A name ending in `_b`, `_bn`, `_m`, `_mn` or `illion` whose words count parameters
        // in billions or millions (`count_scale`), or that its use may show counts them in
        // billions (`billions_suffix`); `billion` anywhere is a word above.
        let count_scale_at = move |at: usize, end: usize| {
            !lower.get(end).is_some_and(|b| is_ident(*b)) && {
                let (start, end) = identifier_at(lower, at, false);
                self.text.get(start..end).is_some_and(|n| {
                    crate::expr::count_scale(n).is_some() || crate::expr::billions_suffix(n)
                })
            }
        };
        let suffixes = |word: &'static memchr::memmem::Finder<'static>| {
            // `_b` and `_bn` (`_m` and `_mn`) in one pass.
            word.find_iter(lower).flat_map(move |at| {
                let short = count_scale_at(at, at + 2).then_some(at);
                let long =
                    (lower.get(at + 2) == Some(&b'n') && count_scale_at(at, at + 3)).then_some(at);
                [short, long].into_iter().flatten()
            })
        };
        let illion = finder!(b"illion").find_iter(lower).flat_map(move |at| {
            let billion = (at >= 1 && lower[at - 1] == b'b').then(|| at - 1);
            let scaled = count_scale_at(at, at + 6).then_some(at);
            [billion, scaled].into_iter().flatten()
        });
        numels
            .chain(named)
            .chain(illion)
            .chain(suffixes(finder!(b"_b")))
            .chain(suffixes(finder!(b"_m")))
    }

    /// MEM007-MEM010 read bytes per parameter: a parameter count multiplied or divided
    /// (`4 * total_params + 16 * total_params / total_gpus`), or bound to a name that is
    /// (`x = n_params`).
    fn scaled_count(&self, start: usize, end: usize) -> bool {
        let before = self.text[..start].trim_end_matches([' ', '\t', '(']);
        let after = self.text[end..].trim_start_matches([' ', '\t', ')']);
        let assigned = before
            .strip_suffix('=')
            .is_some_and(|b| !b.ends_with(['=', '!', '<', '>']));
        before.ends_with(['*', '/']) || after.starts_with(['*', '/']) || assigned
    }

    /// Gradient checkpointing misattributed (MEM011) needs a test of checkpointing and a memory
    /// name ([`is_memory_name`]) assigned (`=`, `*=`, an annotation) under it.
    pub(super) fn checkpointed_memory(&self) -> bool {
        // Every test of checkpointing (see `Topics::of`) has a word that starts with one of
        // these, its words split at every byte that is not a letter or a digit (`use_ckpt`, not
        // `precomputed`).
        let tests = ["checkpoint", "ckpt", "recompute", "remat"]
            .iter()
            .any(|w| {
                memchr::memmem::find_iter(self.lower, w.as_bytes())
                    .any(|at| at == 0 || !self.lower[at - 1].is_ascii_alphanumeric())
            });
        if !tests {
            return false;
        }
        // A memory name has a unit segment: `mem...` starts a name or follows `_`.
        let lower = &self.lower;
        ["mem", "_gb", "_gib", "_mb", "_mib", "bytes", "footprint"]
            .iter()
            .any(|unit| {
                memchr::memmem::find_iter(lower, unit.as_bytes()).any(|at| {
                    let starts_segment = *unit != "mem"
                        || at == 0
                        || lower
                            .get(at - 1)
                            .is_some_and(|b| *b == b'_' || !is_ident(*b));
                    starts_segment && {
                        let (start, end) = identifier_at(lower, at, false);
                        // A name, or a dict item's key (`parts["act_gb"] = 0`).
                        let rest = &lower[end..];
                        let rest = match rest {
                            [b'"' | b'\'', b']', tail @ ..] => tail,
                            _ => rest,
                        };
                        assigned_at(rest) && self.text.get(start..end).is_some_and(is_memory_name)
                    }
                })
            })
    }

    /// `weights = n_b * 2  # bf16`: a part of the model assigned on a line whose comment names
    /// a dtype makes the name it multiplies a model size (see the Python frontend).
    fn part_sized_by_dtype(&self) -> bool {
        const PARTS: &[&str] = &[
            "weights",
            "params",
            "parameters",
            "model",
            "grads",
            "gradients",
        ];
        const DTYPES: &[&str] = &["bf16", "fp16", "fp32", "float16", "float32", "half"];
        // One pass over the comments: the first `#` of each line, after code that assigns a
        // part of the model.
        let lower = self.lower;
        memchr::memchr_iter(b'#', lower).any(|hash| {
            let line_start = memchr::memrchr(b'\n', &lower[..hash]).map_or(0, |i| i + 1);
            let code = &lower[line_start..hash];
            if memchr::memchr(b'#', code).is_some() {
                return false;
            }
            let assigns_part = memchr::memchr(b'=', code).is_some_and(|eq| {
                let target = std::str::from_utf8(&code[..eq]).unwrap_or("").trim_end();
                let last = target.rsplit(['.', ' ']).next().unwrap_or("");
                PARTS.contains(&last) && code.get(eq + 1) != Some(&b'=')
            });
            let line_end = memchr::memchr(b'\n', &lower[hash..]).map_or(lower.len(), |e| hash + e);
            let comment = &lower[hash..line_end];
            assigns_part
                && DTYPES
                    .iter()
                    .any(|d| comment.windows(d.len()).any(|w| w == d.as_bytes()))
        })
    }

    /// A parameter count never makes MEM001 or MEM006 (they judge model sizes); it matters as a
    /// constant (MEM005: `n_params = 7e9`, `"num_params": 7e9`, `--num_params`) or multiplied
    /// into a `*byte*` assignment (MEM002: `optimizer_bytes = n_params * 8`).
    fn counts_parameters(&self, start: usize, end: usize) -> bool {
        let text = self.text;
        let before = &text[..start];
        let after = text[end..].trim_start_matches([' ', '\t']);
        // A quoted key or flag: `"num_params": 7e9`, `"--num-params"`.
        let quote = before.trim_end_matches('-');
        if quote.ends_with(['"', '\'']) {
            let flag = quote.len() < before.len();
            let closed = after.starts_with(&quote[quote.len() - 1..]);
            return closed && (flag || after[1..].trim_start_matches([' ', '\t']).starts_with(':'));
        }
        // Multiplied, or the whole value, on the way to a `*byte*` optimizer-state name.
        let left = before.trim_end_matches([' ', '\t', '(']);
        // One of the names an unpacking assigns (`N_PARAMS, GPU_GB = 13e9, 80`).
        if after.starts_with(',') || left.ends_with(',') {
            return unpacking_target(text, start);
        }
        let assigned_to = left
            .strip_suffix('=')
            .filter(|t| !t.ends_with(['=', '!', '<', '>']));
        if after.starts_with('*') || left.ends_with('*') || assigned_to.is_some() {
            return self.assigns_state_bytes();
        }
        // Assigned: an annotation, or `=` and a value that may be a constant.
        if after.starts_with(':') {
            return true;
        }
        let Some(value) = after.strip_prefix('=').filter(|v| !v.starts_with('=')) else {
            return false;
        };
        constant_from(value.trim_start_matches([' ', '\t']))
    }

    /// MEM005 reads a parameter count from a model name in a config (`"model_name_or_path":
    /// "meta-llama/Llama-2-7b-hf"`, `--model_name`, `default="opt-350m"`); a config written in
    /// Python is kept only with a batch key.
    pub(super) fn names_a_sized_model(&self) -> bool {
        let lower = &self.lower;
        if !self.names_a_batch_key() {
            return false;
        }
        let keys = finder!(b"model")
            .find_iter(lower)
            .chain(finder!(b"_component_").find_iter(lower));
        keys.into_iter().any(|at| {
            // torchtune names its model by `_component_` under `model`.
            self.config_key(at, at + 1, |k| {
                MODEL_KEYS.contains(&k) || k == "_component_"
            })
            .is_some_and(|value| self.value_names_a_size(value))
        })
    }

    /// A batch key's part (or its flag, with `-`) or a batch key's name is written.
    fn names_a_batch_key(&self) -> bool {
        // The parts and their flags, searched for with kept searchers; the commonest (and
        // shared with other checks) first.
        static WORDS: OnceLock<Vec<memchr::memmem::Finder<'static>>> = OnceLock::new();
        let words = WORDS.get_or_init(|| {
            let flag = |w: &str| w.replace('_', "-").into_bytes();
            BATCH_KEY_PARTS
                .iter()
                .flat_map(|w| [w.as_bytes().to_vec(), flag(w)])
                .chain(BATCH_KEY_NAMES.iter().map(|w| w.as_bytes().to_vec()))
                // Searched below as shared words.
                .filter(|w| {
                    !matches!(
                        w.as_slice(),
                        b"batch_size" | b"batch-size" | b"accumulate_grad_batches"
                    )
                })
                .map(|w| memchr::memmem::Finder::new(&w).into_owned())
                .collect()
        });
        self.has(Word::BatchSize)
            || self.has(Word::BatchDash)
            || self.has(Word::AccumulateGradBatches)
            || words.iter().any(|w| w.find(self.lower).is_some())
    }

    /// Whether a string in the value after a key ending at `from` (up to the end of its line,
    /// entry or call, at most 4 KB) gives a parameter count.
    fn value_names_a_size(&self, from: usize) -> bool {
        let bytes = self.bytes;
        let limit = (from + 4096).min(bytes.len());
        let mut depth = 0i32;
        let mut i = from;
        while i < limit {
            match bytes[i] {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth < 0 {
                        return false;
                    }
                }
                b'\n' if depth == 0 => return false,
                quote @ (b'"' | b'\'') => {
                    let Some(len) = memchr::memchr(quote, &bytes[i + 1..limit]) else {
                        return false;
                    };
                    let s = std::str::from_utf8(&bytes[i + 1..i + 1 + len]).unwrap_or("");
                    if params_from_name(s).is_some() {
                        return true;
                    }
                    i += len + 1;
                }
                _ => {}
            }
            i += 1;
        }
        false
    }

    /// A name holding `byte` whose role is the optimizer's is assigned (`optimizer_bytes = ...`),
    /// or a function so named is defined (`def optimizer_bytes(n):` returns the count).
    fn assigns_state_bytes(&self) -> bool {
        // Asked for every count multiplied in the file: answered once.
        *self.state_bytes.get_or_init(|| self.find_state_bytes())
    }

    fn find_state_bytes(&self) -> bool {
        let lower = &self.lower;
        finder!(b"byte").find_iter(lower).any(|at| {
            let (start, end) = identifier_at(lower, at, false);
            let rest = self.text[end..].trim_start_matches([' ', '\t']);
            let defined = self.text[..start]
                .trim_end_matches([' ', '\t'])
                .ends_with("def");
            ((rest.starts_with('=') && !rest.starts_with("=="))
                || (defined && rest.starts_with('(')))
                && role_of(&self.text[start..end]) == Role::Optimizer
        })
    }
}

/// A gate for [`counts_parameters`], true wherever it is, without allocating: it runs for
/// every parameter of every function.
fn may_count_parameters(name: &str) -> bool {
    let n = name.as_bytes();
    [
        "n",
        "p",
        "psi",
        "num",
        "count",
        "params",
        "parameters",
        "nparams",
    ]
    .iter()
    .any(|w| n.eq_ignore_ascii_case(w.as_bytes()))
        || n.windows(5).any(|w| w.eq_ignore_ascii_case(b"param"))
}

/// A gate for [`sizes_memory`] on a lowercase ASCII name, true wherever it is, without
/// allocating: it runs for every function's name.
fn may_size_memory(lower_name: &[u8]) -> bool {
    lower_name.split(|b| *b == b'_').any(|w| {
        matches!(
            w,
            b"bytes"
                | b"mem"
                | b"memory"
                | b"gb"
                | b"gib"
                | b"mb"
                | b"mib"
                | b"vram"
                | b"footprint"
                | b"budget"
        )
    })
}

/// A number [`may_count_by_use`] accepts, to ask it about a name alone.
const COUNT_SIZED: f64 = 7e9 + 1.0;

/// The least number a count's name is given as a count (`>= 1e6`), below the least a use shows
/// one ([`may_count_by_use`]'s minimum, 5e7).
const COUNT_NUMBER_MIN: f64 = 1e6;

/// A gate for [`names_a_count`], true wherever it is, without allocating.
fn may_name_a_count(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    [
        "n",
        "p",
        "psi",
        "params",
        "parameters",
        "nparams",
        "num_param",
        "n_param",
    ]
    .iter()
    .any(|w| last.eq_ignore_ascii_case(w))
}

/// Whether an assigned value may fold to a parameter count: not a call (`sum(...)`,
/// `model.num_parameters()`), and not a lone number below a million (`total = 0`).
fn constant_from(value: &str) -> bool {
    let line = value
        .split(['\n', '#', ';'])
        .next()
        .unwrap_or("")
        .trim_end();
    if value.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        let name_end = value
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(value.len());
        return !value[name_end..]
            .trim_start_matches([' ', '\t'])
            .starts_with('(');
    }
    match parse_number(line) {
        Some(v) => v >= 1e6,
        None => true,
    }
}

/// Whether the name at `at` stands in the targets of an unpacking assignment on its line
/// (`N_PARAMS, GPU_GB = 13e9, 80`): names, commas and brackets before one `=` and a value.
fn unpacking_target(text: &str, at: usize) -> bool {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line = &text[line_start..line_end];
    let Some(eq) = line.find('=') else {
        return false;
    };
    let (targets, value) = (&line[..eq], &line[eq + 1..]);
    !value.starts_with('=')
        && !value.trim().is_empty()
        && targets.contains(',')
        && targets.chars().all(|c| {
            c.is_alphanumeric() || matches!(c, '_' | ',' | ' ' | '\t' | '(' | ')' | '[' | ']')
        })
}

/// The text from the start of the `n`th line before the one holding `at`, to the end of that
/// line.
fn lines_before(lower: &[u8], at: usize, n: usize) -> &[u8] {
    let mut start = at;
    for _ in 0..=n {
        match memchr::memrchr(b'\n', &lower[..start]) {
            Some(i) => start = i,
            None => {
                start = 0;
                break;
            }
        }
    }
    let end = memchr::memchr(b'\n', &lower[at..]).map_or(lower.len(), |e| at + e);
    &lower[start..end]
}

/// What the name around a word may be read as.
enum Reading {
    Sized,
    /// A parameter count only, read plainly from these bounds.
    Count(usize, usize),
    Neither,
}

/// How the name around `at` may be read, and where the name ends. A reading through
/// non-ASCII letters or after a number (`2model_gb`, where recovery splits the literal from a
/// name) counts in full.
fn sized_name_at(text: &str, at: usize) -> (Reading, usize) {
    let bytes = text.as_bytes();
    let ascii = identifier_at(bytes, at, false);
    // A name reaches past its ASCII bounds only through a non-ASCII byte beside them.
    let non_ascii_beside =
        |i: Option<usize>| i.and_then(|i| bytes.get(i)).is_some_and(|b| *b >= 0x80);
    let wide = match non_ascii_beside(ascii.0.checked_sub(1)) || non_ascii_beside(Some(ascii.1)) {
        true => identifier_at(bytes, at, true),
        false => ascii,
    };
    let role = |(s, e): (usize, usize)| text.get(s..e).map_or(Role::Unknown, role_of);
    let end = wide.1;
    // Read once: most names hold `model` and are read as nothing.
    let ascii_role = role(ascii);
    match ascii_role {
        Role::Model => return (Reading::Sized, end),
        Role::ParamCount if wide == ascii => return (Reading::Count(ascii.0, ascii.1), end),
        _ => {}
    }
    if wide != ascii && sized_name(&text[wide.0..wide.1]) {
        return (Reading::Sized, end);
    }
    // A flag spelled with dashes (`"--num-params"`) names what its underscores would.
    if ascii.0 > 0 && bytes[ascii.0 - 1] == b'-' {
        let mut s = ascii.0;
        while s > 0 && (is_ident(bytes[s - 1]) || bytes[s - 1] == b'-') {
            s -= 1;
        }
        let token = &text[s..ascii.1];
        let name = token.trim_start_matches('-');
        if token.starts_with("--") && role_of(&name.replace('-', "_")) == Role::ParamCount {
            return (Reading::Count(ascii.1 - name.len(), ascii.1), end);
        }
    }
    let (start, name_end) = ascii;
    // `cfg["model"]["size_gb"]`, `cfg.model.size_gb`: a size in the model's section (see
    // `role_of`).
    let rest = &bytes[name_end..bytes.len().min(name_end + 4)];
    let gap = [&b"\"][\""[..], b"']['", b"\"].", b"'].", b"."]
        .iter()
        .find(|g| rest.starts_with(g))
        .map(|g| g.len());
    if let Some(gap) = gap.filter(|_| start < name_end) {
        let key = identifier_at(bytes, name_end + gap, false);
        let section = format!("{}.{}", &text[start..name_end], &text[key.0..key.1]);
        if key.0 == name_end + gap && key.0 < key.1 && role_of(&section) == Role::Model {
            return (Reading::Sized, end);
        }
    }
    let after_number = bytes[start].is_ascii_digit()
        && (start + 1..=at).any(|k| {
            (bytes[k].is_ascii_alphabetic() || bytes[k] == b'_') && sized_name_in(text, k, name_end)
        });
    if after_number || matches!(ascii_role, Role::ParamCount) {
        return (Reading::Sized, end);
    }
    (Reading::Neither, end)
}

fn sized_name_in(text: &str, start: usize, end: usize) -> bool {
    text.get(start..end).is_some_and(sized_name)
}

fn sized_name(name: &str) -> bool {
    matches!(role_of(name), Role::Model | Role::ParamCount)
}

/// The quoted key of the item whose `]` ends at `end` (`cfg["n_params"]`).
fn quoted_item_key(text: &str, end: usize) -> Option<&str> {
    let inner = text.get(..end)?.strip_suffix(']')?;
    let quote = inner.chars().last().filter(|c| matches!(c, '"' | '\''))?;
    let inner = &inner[..inner.len() - 1];
    let open = inner.rfind(quote)?;
    let key = &inner[open + 1..];
    (inner[..open].ends_with('[') && !key.is_empty() && key.bytes().all(is_ident)).then_some(key)
}

/// The value of a product of number literals (`2 * 1024 ** 3`, `7_000_000_000`), `None` for
/// anything else.
fn literal_product(value: &str) -> Option<f64> {
    let powers = value.replace("**", "^");
    powers.split('*').try_fold(1.0, |product, factor| {
        // `a ^ b ^ c` is `a ^ (b ^ c)`.
        let power = factor
            .rsplit('^')
            .try_fold(None::<f64>, |exponent, base| {
                let base = parse_number(base.trim())?;
                Some(Some(exponent.map_or(base, |e| base.powf(e))))
            })??;
        Some(product * power).filter(|p| p.is_finite())
    })
}

#[cfg(test)]
mod tests {
    use super::{literal_product, COUNT_NUMBER_MIN};
    use crate::expr::may_count_by_use;

    /// The scan rules out an assigned number below `COUNT_NUMBER_MIN` before asking about its
    /// name: no name may count parameters by its use with a smaller one.
    #[test]
    fn no_use_counts_a_number_below_the_least_count() {
        for name in ["N_BASE", "total", "x", "big_number"] {
            assert!(!may_count_by_use(name, COUNT_NUMBER_MIN - 1.0));
            assert!(!may_count_by_use(name, 999_999.0));
        }
        assert!(may_count_by_use("N_BASE", 3_212_749_824.0));
    }

    #[test]
    fn a_product_of_literals_is_valued_with_its_powers() {
        assert_eq!(literal_product("1024 * 1024"), Some(1048576.0));
        assert_eq!(literal_product("2 * 1024 ** 3"), Some(2147483648.0));
        assert_eq!(literal_product("2**2**3"), Some(256.0));
        assert_eq!(literal_product("7_000_000_000"), Some(7e9));
        assert_eq!(literal_product("13e9"), Some(13e9));
        assert_eq!(literal_product("n * 4"), None);
        assert_eq!(literal_product("4 *"), None);
    }
}
