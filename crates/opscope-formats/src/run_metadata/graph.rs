//! TensorFlow `GraphDef`, binary (`graph.pb`) or protobuf text (`graph.pbtxt`): the op
//! type and device of each graph node, which RunMetadata's step stats name but do not
//! type. Only `node { name op device }` and the `data_format` attribute are read;
//! everything else is skipped.

use std::collections::HashMap;

use crate::error::ImportError;

/// The `GraphDef` messages, generated with the rest of TensorFlow's protos (see
/// `run_metadata::proto`).
pub mod proto {
    pub use super::super::proto::{GraphDef, NodeDef};
}

/// One graph node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphNode {
    pub op: String,
    pub device: String,
    /// Its `data_format` attribute (`NHWC`, `NCHW`), which tfprof's advise checks.
    pub data_format: Option<String>,
}

/// The nodes of a graph by name.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub nodes: HashMap<String, GraphNode>,
}

impl Graph {
    pub fn op_type(&self, node: &str) -> Option<&str> {
        self.nodes
            .get(node)
            .map(|n| n.op.as_str())
            .filter(|op| !op.is_empty())
    }

    pub fn data_format(&self, node: &str) -> Option<&str> {
        self.nodes.get(node)?.data_format.as_deref()
    }

    pub fn add_binary(&mut self, graph: &proto::GraphDef) {
        for node in &graph.node {
            self.nodes
                .entry(String::from_utf8_lossy(&node.name).into_owned())
                .or_insert_with(|| GraphNode {
                    op: String::from_utf8_lossy(&node.op).into_owned(),
                    device: String::from_utf8_lossy(&node.device).into_owned(),
                    data_format: node
                        .attr
                        .iter()
                        .find(|a| a.key == b"data_format")
                        .and_then(|a| a.value.as_ref())
                        .map(|v| String::from_utf8_lossy(&v.s).into_owned()),
                });
        }
    }
}

/// Whether `path` names a GraphDef file opscope pairs with a RunMetadata.
pub fn is_graph_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    name.ends_with(".pbtxt") || name == "graph.pb" || name.ends_with(".graphdef")
}

/// Reads a GraphDef, text when it looks like text.
pub fn parse(bytes: &[u8], path: &str) -> Result<Graph, ImportError> {
    let head = &bytes[..bytes.len().min(64)];
    let looks_textual = std::str::from_utf8(head).is_ok_and(|h| {
        h.trim_start()
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '#')
    });
    if looks_textual {
        parse_text(bytes, path)
    } else {
        use prost::Message;
        let graph = proto::GraphDef::decode(bytes).map_err(|e| ImportError::Syntax {
            path: path.to_string(),
            offset: 0,
            message: format!("not a binary GraphDef ({e})"),
        })?;
        let mut g = Graph::default();
        g.add_binary(&graph);
        Ok(g)
    }
}

/// Reads the protobuf text format of a GraphDef.
pub fn parse_text(bytes: &[u8], path: &str) -> Result<Graph, ImportError> {
    let mut lexer = Lexer {
        bytes,
        pos: 0,
        path,
    };
    let mut graph = Graph::default();
    while let Some(token) = lexer.next()? {
        match token {
            Token::Ident(field) => {
                let at = lexer.pos;
                match lexer.next()? {
                    Some(Token::Colon) => {
                        // A scalar (or `field: { … }`) at the top level: skipped.
                        let at_value = lexer.pos;
                        match lexer.next()? {
                            Some(Token::Open) => lexer.skip_block()?,
                            Some(Token::Ident(_) | Token::Str(_)) => {}
                            _ => return Err(lexer.error(at_value, "a value after ':'")),
                        }
                    }
                    Some(Token::Open) if field == "node" => {
                        let (name, node) = lexer.node()?;
                        graph.nodes.entry(name).or_insert(node);
                    }
                    Some(Token::Open) => lexer.skip_block()?,
                    _ => return Err(lexer.error(at, "'{' or ':' after a field name")),
                }
            }
            _ => return Err(lexer.error(lexer.pos, "a field name")),
        }
    }
    Ok(graph)
}

#[derive(Debug, PartialEq)]
enum Token {
    /// A field name, enum value or number.
    Ident(String),
    Str(String),
    Colon,
    Open,
    Close,
}

struct Lexer<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a str,
}

impl Lexer<'_> {
    fn error(&self, at: usize, expected: &str) -> ImportError {
        ImportError::Syntax {
            path: self.path.to_string(),
            offset: at as u64,
            message: format!("expected {expected} in a GraphDef text file"),
        }
    }

    fn next(&mut self) -> Result<Option<Token>, ImportError> {
        let b = self.bytes;
        loop {
            while self.pos < b.len() && (b[self.pos].is_ascii_whitespace() || b[self.pos] == b',') {
                self.pos += 1;
            }
            if self.pos < b.len() && b[self.pos] == b'#' {
                while self.pos < b.len() && b[self.pos] != b'\n' {
                    self.pos += 1;
                }
                continue;
            }
            break;
        }
        let Some(&c) = b.get(self.pos) else {
            return Ok(None);
        };
        let start = self.pos;
        self.pos += 1;
        Ok(Some(match c {
            b':' => Token::Colon,
            b'{' | b'<' => Token::Open,
            b'}' | b'>' => Token::Close,
            b'"' | b'\'' => Token::Str(self.string(c, start)?),
            c if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'+') => {
                while self.pos < b.len()
                    && (b[self.pos].is_ascii_alphanumeric()
                        || matches!(b[self.pos], b'_' | b'-' | b'.' | b'+'))
                {
                    self.pos += 1;
                }
                Token::Ident(String::from_utf8_lossy(&b[start..self.pos]).into_owned())
            }
            _ => return Err(self.error(start, "a token")),
        }))
    }

    /// A quoted string with C escapes (octal, hex and the usual letters).
    fn string(&mut self, quote: u8, start: usize) -> Result<String, ImportError> {
        let b = self.bytes;
        let mut out = Vec::new();
        loop {
            let Some(&c) = b.get(self.pos) else {
                return Err(self.error(start, "the end of a quoted string"));
            };
            self.pos += 1;
            match c {
                c if c == quote => break,
                b'\\' => {
                    let Some(&e) = b.get(self.pos) else {
                        return Err(self.error(start, "the end of a quoted string"));
                    };
                    self.pos += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'0'..=b'7' => {
                            let mut v = u32::from(e - b'0');
                            for _ in 0..2 {
                                match b.get(self.pos) {
                                    Some(&d @ b'0'..=b'7') => {
                                        v = v * 8 + u32::from(d - b'0');
                                        self.pos += 1;
                                    }
                                    _ => break,
                                }
                            }
                            out.push(v as u8);
                        }
                        b'x' => {
                            let mut v = 0u32;
                            while let Some(d) =
                                b.get(self.pos).and_then(|d| (*d as char).to_digit(16))
                            {
                                v = v * 16 + d;
                                self.pos += 1;
                            }
                            out.push(v as u8);
                        }
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Skips to the `}` closing a block whose `{` was just read.
    fn skip_block(&mut self) -> Result<(), ImportError> {
        let start = self.pos;
        let mut depth = 1usize;
        while depth > 0 {
            match self.next()? {
                Some(Token::Open) => depth += 1,
                Some(Token::Close) => depth -= 1,
                Some(_) => {}
                None => return Err(self.error(start, "the '}' closing a block")),
            }
        }
        Ok(())
    }

    /// An `attr { key: … value { s: … } }` block whose `{` was just read: the value of
    /// a `data_format` attribute, or `None` for any other.
    fn data_format(&mut self) -> Result<Option<String>, ImportError> {
        let start = self.pos;
        let (mut key, mut s) = (None, None);
        loop {
            match self.next()? {
                Some(Token::Close) => break,
                Some(Token::Ident(field)) => match (field.as_str(), self.next()?) {
                    ("key", Some(Token::Colon)) => {
                        if let Some(Token::Str(k)) = self.next()? {
                            key = Some(k);
                        }
                    }
                    ("value", Some(Token::Open)) => {
                        // `value { s: "NHWC" }`, or any other kind of value.
                        loop {
                            match self.next()? {
                                Some(Token::Close) => break,
                                Some(Token::Ident(f)) if f == "s" => {
                                    if let (Some(Token::Colon), Some(Token::Str(v))) =
                                        (self.next()?, self.next()?)
                                    {
                                        s = Some(v);
                                    }
                                }
                                Some(Token::Open) => self.skip_block()?,
                                Some(_) => {}
                                None => return Err(self.error(start, "the '}' closing an attr")),
                            }
                        }
                    }
                    (_, Some(Token::Open)) => self.skip_block()?,
                    (_, Some(Token::Colon)) => {
                        if let Some(Token::Open) = self.next()? {
                            self.skip_block()?;
                        }
                    }
                    _ => return Err(self.error(self.pos, "a field of an attr")),
                },
                None => return Err(self.error(start, "the '}' closing an attr")),
                Some(_) => return Err(self.error(self.pos, "a field name")),
            }
        }
        Ok(s.filter(|_| key.as_deref() == Some("data_format")))
    }

    /// The fields of a `node { … }` block whose `{` was just read.
    fn node(&mut self) -> Result<(String, GraphNode), ImportError> {
        let start = self.pos;
        let (mut name, mut node) = (String::new(), GraphNode::default());
        loop {
            match self.next()? {
                Some(Token::Close) => return Ok((name, node)),
                Some(Token::Ident(field)) => {
                    let at = self.pos;
                    match self.next()? {
                        Some(Token::Colon) => match self.next()? {
                            Some(Token::Str(value)) => match field.as_str() {
                                "name" => name = value,
                                "op" => node.op = value,
                                "device" => node.device = value,
                                _ => {}
                            },
                            Some(Token::Ident(_)) => {}
                            Some(Token::Open) => self.skip_block()?,
                            _ => return Err(self.error(at, "a value after ':'")),
                        },
                        Some(Token::Open) if field == "attr" => {
                            if let Some(format) = self.data_format()? {
                                node.data_format = Some(format);
                            }
                        }
                        Some(Token::Open) => self.skip_block()?,
                        _ => return Err(self.error(at, "'{' or ':' after a field name")),
                    }
                }
                None => return Err(self.error(start, "the '}' closing a node")),
                Some(_) => return Err(self.error(self.pos, "a field name")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_graph_nodes_with_nested_attrs() {
        let text = br#"
# a comment
node {
  name: "a/b"
  op: "Const"
  device: "/device:CPU:0"
  attr { key: "value" value { tensor { tensor_content: "\020\003\000\"}" } } }
  input: "^x"
}
node < name: 'c' op: "MatMul" >
versions { producer: 1 }
"#;
        let g = parse(text, "g.pbtxt").unwrap();
        assert_eq!(g.nodes.len(), 2);
        assert_eq!(g.op_type("a/b"), Some("Const"));
        assert_eq!(g.nodes["a/b"].device, "/device:CPU:0");
        assert_eq!(g.op_type("c"), Some("MatMul"));
        assert_eq!(g.op_type("x"), None);
    }

    #[test]
    fn broken_text_names_the_offset() {
        let err = parse(b"node {\n  name: \"a\"\n", "g.pbtxt").unwrap_err();
        assert!(err.to_string().contains("g.pbtxt: byte 6"), "{err}");
        let err = parse(b"node { name: \"open", "g.pbtxt").unwrap_err();
        assert!(err.to_string().contains("quoted string"), "{err}");
    }

    #[test]
    fn binary_graph() {
        use prost::Message;
        let graph = proto::GraphDef {
            node: vec![proto::NodeDef {
                name: b"n".to_vec(),
                op: b"Relu".to_vec(),
                device: Vec::new(),
                attr: Vec::new(),
            }],
        };
        let mut bytes = graph.encode_to_vec();
        assert_eq!(
            parse(&bytes, "graph.pb").unwrap().op_type("n"),
            Some("Relu")
        );
        // A node with `attr` as TensorFlow writes its map<string, AttrValue>: field 5,
        // each entry a message of key (1) and value (2), the value's `s` field 2.
        let value = [&[0x12, 4][..], b"NHWC"].concat();
        let entry = [
            &[0x0a, 11][..],
            b"data_format",
            &[0x12, value.len() as u8],
            &value,
        ]
        .concat();
        let node = [
            &[0x0a, 1, b'c', 0x12, 6][..],
            b"Conv2D",
            &[0x2a, entry.len() as u8],
            &entry,
        ]
        .concat();
        bytes.extend_from_slice(&[0x0a, node.len() as u8]);
        bytes.extend_from_slice(&node);
        let g = parse(&bytes, "graph.pb").unwrap();
        assert_eq!(g.op_type("c"), Some("Conv2D"));
        assert_eq!(g.data_format("c"), Some("NHWC"));
        assert_eq!(g.data_format("n"), None);
    }

    /// The `data_format` attribute of a text GraphDef, beside attributes of other kinds.
    #[test]
    fn text_data_format() {
        let text = br#"node { name: "c" op: "Conv2D"
            attr { key: "T" value { type: DT_FLOAT } }
            attr { key: "data_format" value { s: "NCHW" } }
            attr { key: "strides" value { list { i: 1 i: 1 } } } }
            node { name: "r" op: "Relu" attr { key: "T" value { type: DT_FLOAT } } }"#;
        let g = parse(text, "g.pbtxt").unwrap();
        assert_eq!(g.data_format("c"), Some("NCHW"));
        assert_eq!(g.data_format("r"), None);
        assert_eq!(g.op_type("r"), Some("Relu"));
    }
}
