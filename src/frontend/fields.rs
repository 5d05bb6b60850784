//! Fields by name, without the grammar's search: `child_by_field_name` compares the name with
//! every field name of the grammar on each call, and the walks ask at almost every node.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::num::NonZeroU16;
use std::sync::LazyLock;
use tree_sitter::{Language, Node};

/// The field ids of one grammar by name. `child_by_field_name` searches the grammar's field
/// names on every call, and the walks ask for fields by name at almost every node.
pub struct Fields(HashMap<&'static str, NonZeroU16, BuildHasherDefault<Fnv>>);

impl Fields {
    pub fn of(language: &Language) -> Fields {
        let count = u16::try_from(language.field_count()).unwrap_or(u16::MAX);
        let ids = (1..=count)
            .filter_map(|id| Some((language.field_name_for_id(id)?, NonZeroU16::new(id)?)));
        Fields(ids.collect())
    }

    /// The child of `node` in the field `name`, as `child_by_field_name`.
    pub fn child<'t>(&self, node: &Node<'t>, name: &str) -> Option<Node<'t>> {
        node.child_by_field_id(self.0.get(name)?.get())
    }
}

/// FNV-1a, for the grammar's own field names: short fixed keys, looked up at almost every node,
/// where SipHash's defence against crafted keys only costs time.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Fields of the Python grammar.
pub trait PyField<'t> {
    /// The child in the field `name` (`child_by_field_name`, with the id looked up once).
    fn field(&self, name: &str) -> Option<Node<'t>>;
}

impl<'t> PyField<'t> for Node<'t> {
    fn field(&self, name: &str) -> Option<Node<'t>> {
        static FIELDS: LazyLock<Fields> =
            LazyLock::new(|| Fields::of(&tree_sitter_python::LANGUAGE.into()));
        FIELDS.child(self, name)
    }
}

/// Fields of the Bash grammar.
pub trait ShField<'t> {
    /// The child in the field `name` (`child_by_field_name`, with the id looked up once).
    fn field(&self, name: &str) -> Option<Node<'t>>;
}

impl<'t> ShField<'t> for Node<'t> {
    fn field(&self, name: &str) -> Option<Node<'t>> {
        static FIELDS: LazyLock<Fields> =
            LazyLock::new(|| Fields::of(&tree_sitter_bash::LANGUAGE.into()));
        FIELDS.child(self, name)
    }
}

/// Node kinds of the Python grammar by id: `Node::kind` measures and validates the grammar's C
/// string on every call, and the walks ask at every node.
pub trait PyKind {
    /// The node's kind, as `Node::kind`.
    fn ty(&self) -> &'static str;
}

impl PyKind for Node<'_> {
    fn ty(&self) -> &'static str {
        static KINDS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
            let language: Language = tree_sitter_python::LANGUAGE.into();
            let count = u16::try_from(language.node_kind_count()).unwrap_or(u16::MAX);
            (0..count)
                .map(|id| language.node_kind_for_id(id).unwrap_or(""))
                .collect()
        });
        // The error kinds have ids past the grammar's own.
        match KINDS.get(usize::from(self.kind_id())) {
            Some(kind) => kind,
            None => self.kind(),
        }
    }
}
