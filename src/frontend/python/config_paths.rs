//! Config files a script names by a literal path (`json.load(open("ds_zero2.json"))`,
//! `args_file="train_args.json"`): a run of the script reads them. A path handed to a dataset
//! loader names records, not a config.

use super::*;
use crate::frontend::fields::PyField;

/// Calls that read a file of records (Hugging Face datasets, pandas).
const DATA_LOADERS: &[&str] = &["load_dataset", "read_json"];

impl Walker<'_> {
    /// A string that names a config file by a literal path: a run of this script reads it.
    pub(super) fn note_config_path(&mut self, node: Node) {
        let text = self.text(node);
        if text.len() > 200 || text.starts_with(['f', 'F']) {
            return;
        }
        let path = text.trim_matches(['"', '\'']);
        let config = [".json", ".yaml", ".yml", ".toml"]
            .iter()
            .any(|e| path.ends_with(e));
        if config && !path.contains(['{', '%', '*', ' ']) && path.len() > 5 && !self.data_file(node)
        {
            self.facts
                .opened_paths
                .push((path.to_string(), node.byte_range()));
        }
    }

    /// Whether the string is handed to a dataset loader as a file of records (`load_dataset("json",
    /// data_files={"eval": "val.json"})`, `pd.read_json("x.json")`): data, which such loaders read
    /// as JSON Lines too, not a config of the run.
    fn data_file(&self, node: Node) -> bool {
        let mut at = node.parent();
        while let Some(n) = at {
            match n.ty() {
                "keyword_argument" => {
                    let name = n.field("name").map(|k| self.text(k));
                    if name == Some("data_files") {
                        return true;
                    }
                }
                "call" => {
                    let callee = n.field("function").map_or("", |f| self.text(f));
                    return DATA_LOADERS.contains(&last_segment(callee));
                }
                "argument_list" | "dictionary" | "pair" | "list" | "tuple" => {}
                _ => return false,
            }
            at = n.parent();
        }
        false
    }
}
