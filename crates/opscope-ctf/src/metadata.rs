//! TSDL metadata: unpacking the packetized form, a lexer, and a recursive-descent parser
//! that resolves type aliases and named types into the type tree of [`crate::ctf::types`].
//!
//! Errors carry the byte offset in the metadata *text* (after unpacking packets).

use std::collections::HashMap;

use crate::types::{
    ByteOrder, ClockClass, EnumTy, EventClass, FloatTy, IntTy, Metadata, StreamClass, StructTy, Ty,
    VariantTy,
};

/// A metadata problem at a byte offset of the text (or of the file, for packet
/// framing problems).
#[derive(Debug, Clone, PartialEq)]
pub struct MetaError {
    pub offset: u64,
    pub message: String,
}

fn err<T>(offset: usize, message: impl Into<String>) -> Result<T, MetaError> {
    Err(MetaError {
        offset: offset as u64,
        message: message.into(),
    })
}

const PACKET_MAGIC: u32 = 0x75D1_1D57;
const PACKET_HEADER_BYTES: usize = 37;

/// What kind of metadata a file holds.
#[derive(Debug, PartialEq, Eq)]
pub enum MetadataKind {
    Text,
    Packetized,
    /// CTF 2: a JSON text sequence (records start with 0x1E).
    Ctf2,
}

pub fn metadata_kind(bytes: &[u8]) -> MetadataKind {
    if bytes.len() >= 4 {
        let le = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let be = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if le == PACKET_MAGIC || be == PACKET_MAGIC {
            return MetadataKind::Packetized;
        }
    }
    if bytes.first() == Some(&0x1E) {
        return MetadataKind::Ctf2;
    }
    MetadataKind::Text
}

/// The TSDL text of a metadata file: packets are unpacked (either byte order), text is
/// returned as is. Offsets of errors are file offsets.
pub fn metadata_text(bytes: &[u8]) -> Result<String, MetaError> {
    if metadata_kind(bytes) != MetadataKind::Packetized {
        return Ok(String::from_utf8_lossy(bytes).into_owned());
    }
    let mut text = Vec::with_capacity(bytes.len());
    let mut pos = 0usize;
    while pos < bytes.len() {
        let Some(head) = bytes.get(pos..pos + PACKET_HEADER_BYTES) else {
            return err(pos, "metadata packet header cut off by the end of the file");
        };
        let raw = [head[0], head[1], head[2], head[3]];
        let le = if u32::from_le_bytes(raw) == PACKET_MAGIC {
            true
        } else if u32::from_be_bytes(raw) == PACKET_MAGIC {
            false
        } else {
            return err(pos, "metadata packet without the 0x75D11D57 magic");
        };
        let u32_at = |o: usize| {
            let b = [head[o], head[o + 1], head[o + 2], head[o + 3]];
            if le {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            }
        };
        let content_bits = u32_at(24) as usize;
        let packet_bits = u32_at(28) as usize;
        if head[32] != 0 || head[33] != 0 {
            return err(
                pos,
                "compressed or encrypted metadata packets are not supported",
            );
        }
        let content = content_bits / 8;
        let packet = packet_bits / 8;
        if content < PACKET_HEADER_BYTES || packet < content {
            return err(
                pos,
                format!("metadata packet with content size {content_bits} bits and packet size {packet_bits} bits"),
            );
        }
        let Some(body) = bytes.get(pos + PACKET_HEADER_BYTES..pos + content) else {
            return err(pos, "metadata packet cut off by the end of the file");
        };
        text.extend_from_slice(body);
        pos += packet;
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

// ---------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Int(i128),
    Str(String),
    Punct(&'static str),
    Eof,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    offset: usize,
}

const PUNCTS: [&str; 17] = [
    ":=", "...", "->", "{", "}", "[", "]", "(", ")", ";", ":", "=", ",", ".", "<", ">", "*",
];

fn lex(text: &str) -> Result<Vec<Token>, MetaError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if b[i..].starts_with(b"/*") {
            match text[i + 2..].find("*/") {
                Some(end) => i += 2 + end + 2,
                None => return err(i, "comment that does not end"),
            }
            continue;
        }
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(text[start..i].to_string()),
                offset: start,
            });
            continue;
        }
        if c.is_ascii_digit() {
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let mut lit = &text[start..i];
            while let Some(s) = lit.strip_suffix(['u', 'U', 'l', 'L']) {
                lit = s;
            }
            let value = if let Some(hex) = lit.strip_prefix("0x").or(lit.strip_prefix("0X")) {
                i128::from_str_radix(hex, 16)
            } else if lit.len() > 1 && lit.starts_with('0') {
                i128::from_str_radix(&lit[1..], 8)
            } else {
                lit.parse::<i128>()
            };
            match value {
                Ok(v) => out.push(Token {
                    tok: Tok::Int(v),
                    offset: start,
                }),
                Err(_) => return err(start, format!("bad number `{}`", &text[start..i])),
            }
            continue;
        }
        if c == b'"' || c == b'\'' {
            let quote = c;
            i += 1;
            let mut s = Vec::new();
            loop {
                let Some(&ch) = b.get(i) else {
                    return err(start, "string that does not end");
                };
                i += 1;
                if ch == quote {
                    break;
                }
                if ch == b'\\' {
                    let Some(&e) = b.get(i) else {
                        return err(start, "string that does not end");
                    };
                    i += 1;
                    s.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'0' => 0,
                        b'a' => 7,
                        b'b' => 8,
                        b'f' => 12,
                        b'v' => 11,
                        other => other,
                    });
                } else {
                    s.push(ch);
                }
            }
            let s = String::from_utf8_lossy(&s).into_owned();
            out.push(Token {
                tok: if quote == b'"' {
                    Tok::Str(s)
                } else {
                    Tok::Int(s.chars().next().map_or(0, |c| c as i128))
                },
                offset: start,
            });
            continue;
        }
        match PUNCTS.iter().find(|p| b[i..].starts_with(p.as_bytes())) {
            Some(p) => {
                out.push(Token {
                    tok: Tok::Punct(p),
                    offset: start,
                });
                i += p.len();
            }
            None if c == b'-' || c == b'+' => {
                out.push(Token {
                    tok: Tok::Punct(if c == b'-' { "-" } else { "+" }),
                    offset: start,
                });
                i += 1;
            }
            None => return err(i, format!("unexpected character `{}`", c as char)),
        }
    }
    out.push(Token {
        tok: Tok::Eof,
        offset: b.len(),
    });
    Ok(out)
}

// ---------------------------------------------------------------------------------
// Parser

/// A value on the right of `key = value;`.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Int(i128),
    Str(String),
    /// An identifier or dotted path (`le`, `clock.monotonic.value`, `TRUE`).
    Path(Vec<String>),
}

/// Statements of a block (`trace`, `stream`, attributes of `integer`, …).
#[derive(Debug, Default)]
struct Block {
    values: Vec<(String, Value, usize)>,
    types: Vec<(String, Ty, usize)>,
}

impl Block {
    fn get(&self, key: &str) -> Option<&Value> {
        self.values.iter().rev().find(|v| v.0 == key).map(|v| &v.1)
    }
    fn int(&self, key: &str) -> Option<i128> {
        match self.get(key)? {
            Value::Int(v) => Some(*v),
            Value::Str(s) => s.trim().parse().ok(),
            Value::Path(_) => None,
        }
    }
    fn text(&self, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::Int(v) => Some(v.to_string()),
            Value::Str(s) => Some(s.clone()),
            Value::Path(p) => Some(p.join(".")),
        }
    }
    fn ty(&self, key: &str) -> Option<Ty> {
        self.types
            .iter()
            .rev()
            .find(|t| t.0 == key)
            .map(|t| t.1.clone())
    }
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    aliases: HashMap<String, Ty>,
    structs: HashMap<String, Ty>,
    enums: HashMap<String, Ty>,
    variants: HashMap<String, Ty>,
    depth: usize,
}

/// Most array dimensions of one declarator (`x[1][2]…`).
const MAX_DIMS: usize = 16;
/// Deepest type an alias or named type may hold: aliases nest types without the
/// parser recursing.
const MAX_ALIAS_DEPTH: usize = 200;

const MAX_DEPTH: usize = 64;

fn strip_underscore(name: &str) -> String {
    name.strip_prefix('_').unwrap_or(name).to_string()
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }
    fn peek_at(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }
    fn offset(&self) -> usize {
        self.toks[self.pos].offset
    }
    fn next(&mut self) -> Tok {
        let t = self.toks[self.pos].tok.clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }
    fn eat(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.next();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, p: &str) -> Result<(), MetaError> {
        if self.eat(p) {
            Ok(())
        } else {
            err(
                self.offset(),
                format!("expected `{p}`, found {}", describe(self.peek())),
            )
        }
    }
    fn ident(&mut self) -> Result<String, MetaError> {
        match self.next() {
            Tok::Ident(s) => Ok(s),
            other => err(
                self.toks[self.pos.saturating_sub(1)].offset,
                format!("expected a name, found {}", describe(&other)),
            ),
        }
    }
    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Ident(i) if i == s)
    }

    fn enter(&mut self) -> Result<(), MetaError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err(self.offset(), "types nested too deeply");
        }
        Ok(())
    }

    fn parse(mut self) -> Result<Metadata, MetaError> {
        let mut meta = Metadata::default();
        let mut trace_block: Option<Block> = None;
        let mut raw_streams = Vec::new();
        let mut raw_events = Vec::new();
        let mut raw_clocks = Vec::new();
        while *self.peek() != Tok::Eof {
            let at = self.offset();
            if self.eat(";") {
                continue;
            }
            match self.peek().clone() {
                Tok::Ident(kw)
                    if matches!(
                        kw.as_str(),
                        "trace" | "env" | "clock" | "stream" | "event" | "callsite"
                    ) && matches!(self.peek_at(1), Tok::Punct("{")) =>
                {
                    self.next();
                    let block = self.block()?;
                    self.eat(";");
                    match kw.as_str() {
                        "trace" => trace_block = Some(block),
                        "env" => {
                            for (k, v, _) in block.values {
                                meta.env.push((
                                    k,
                                    match v {
                                        Value::Int(i) => crate::types::EnvValue::Int(i as i64),
                                        Value::Str(s) => crate::types::EnvValue::Str(s),
                                        Value::Path(p) => crate::types::EnvValue::Str(p.join(".")),
                                    },
                                ));
                            }
                        }
                        "clock" => raw_clocks.push((block, at)),
                        "stream" => raw_streams.push((block, at)),
                        "event" => raw_events.push((block, at)),
                        _ => {}
                    }
                }
                Tok::Ident(kw) if kw == "typealias" => self.typealias()?,
                Tok::Ident(kw) if kw == "typedef" => self.typedef()?,
                _ => {
                    // A named type declaration: `struct x { … };`, `enum y : … { … };`.
                    self.type_spec()?;
                    if !self.eat(";") {
                        return err(
                            self.offset(),
                            format!("expected `;`, found {}", describe(self.peek())),
                        );
                    }
                }
            }
        }
        let Some(trace) = trace_block else {
            return err(0, "no `trace` block in the metadata");
        };
        meta.major = trace.int("major").unwrap_or(1) as u32;
        meta.minor = trace.int("minor").unwrap_or(8) as u32;
        meta.byte_order = match trace.text("byte_order").as_deref() {
            Some("be" | "network" | "big_endian") => ByteOrder::Be,
            Some("le" | "little_endian") => ByteOrder::Le,
            _ => ByteOrder::Le,
        };
        meta.uuid = trace.text("uuid").and_then(|u| parse_uuid(&u));
        meta.packet_header = trace.ty("packet.header");
        for (block, at) in raw_clocks {
            let name = block.text("name").unwrap_or_else(|| "default".into());
            let freq = block.int("freq").unwrap_or(1_000_000_000);
            if freq <= 0 || freq > u64::MAX as i128 {
                return err(at, format!("clock `{name}` has frequency {freq}"));
            }
            meta.clocks.push(ClockClass {
                name,
                freq: freq as u64,
                offset_s: block
                    .int("offset_s")
                    .unwrap_or(0)
                    .clamp(i64::MIN as i128, i64::MAX as i128) as i64,
                offset: block
                    .int("offset")
                    .unwrap_or(0)
                    .clamp(i64::MIN as i128, i64::MAX as i128) as i64,
                description: block.text("description"),
                uuid: block.text("uuid"),
            });
        }
        for (block, _) in raw_streams {
            meta.streams.push(StreamClass {
                id: block.int("id").unwrap_or(0) as u64,
                packet_context: block.ty("packet.context"),
                event_header: block.ty("event.header"),
                event_context: block.ty("event.context"),
            });
        }
        for (block, at) in raw_events {
            let Some(name) = block.text("name") else {
                return err(at, "an event without a name");
            };
            meta.events.push(EventClass {
                name,
                id: block.int("id").map(|i| i as u64),
                stream_id: block.int("stream_id").map(|i| i as u64),
                loglevel: block.int("loglevel").map(|i| i as i64),
                context: block.ty("context"),
                fields: block.ty("fields"),
            });
        }
        Ok(meta)
    }

    /// `{ key = value; key := type; typealias …; }`
    fn block(&mut self) -> Result<Block, MetaError> {
        self.expect("{")?;
        let mut block = Block::default();
        loop {
            if self.eat("}") {
                return Ok(block);
            }
            if self.eat(";") {
                continue;
            }
            let at = self.offset();
            if self.is_ident("typealias") {
                self.typealias()?;
                continue;
            }
            if self.is_ident("typedef") {
                self.typedef()?;
                continue;
            }
            if *self.peek() == Tok::Eof {
                return err(at, "block that does not end");
            }
            // key path
            let mut key = match self.next() {
                Tok::Ident(s) => s,
                other => {
                    return err(
                        at,
                        format!("expected an attribute, found {}", describe(&other)),
                    )
                }
            };
            while self.eat(".") {
                key.push('.');
                key.push_str(&self.ident()?);
            }
            if self.eat(":=") {
                let ty = self.type_spec()?;
                // `name := struct {…} x` is not valid, but a trailing declarator-less
                // `align(n)` is handled by type_spec.
                block.types.push((key, ty, at));
            } else if self.eat("=") {
                let value = self.value()?;
                block.values.push((key, value, at));
            } else {
                return err(
                    self.offset(),
                    format!(
                        "expected `=` or `:=` after `{key}`, found {}",
                        describe(self.peek())
                    ),
                );
            }
            self.expect(";")?;
        }
    }

    fn value(&mut self) -> Result<Value, MetaError> {
        let at = self.offset();
        match self.next() {
            Tok::Punct("-") => match self.next() {
                Tok::Int(v) => Ok(Value::Int(-v)),
                other => err(
                    at,
                    format!("expected a number after `-`, found {}", describe(&other)),
                ),
            },
            Tok::Punct("+") => match self.next() {
                Tok::Int(v) => Ok(Value::Int(v)),
                other => err(
                    at,
                    format!("expected a number after `+`, found {}", describe(&other)),
                ),
            },
            Tok::Int(v) => Ok(Value::Int(v)),
            Tok::Str(s) => Ok(Value::Str(s)),
            Tok::Ident(s) => {
                let mut path = vec![s];
                while self.eat(".") {
                    path.push(self.ident()?);
                }
                Ok(Value::Path(path))
            }
            other => err(at, format!("expected a value, found {}", describe(&other))),
        }
    }

    /// `typealias TYPE [declarator suffix] := NAME…;`
    fn typealias(&mut self) -> Result<(), MetaError> {
        self.next();
        let ty = self.type_spec()?;
        // An abstract declarator may follow (`typealias integer {...} [3] := x;` is rare).
        let ty = self.dims(ty)?;
        self.expect(":=")?;
        let mut names = Vec::new();
        while let Tok::Ident(s) = self.peek().clone() {
            self.next();
            names.push(s);
        }
        while self.eat("*") {}
        if names.is_empty() {
            return err(self.offset(), "typealias without a name");
        }
        let ty = self.dims(ty)?;
        self.expect(";")?;
        self.check_depth(&ty)?;
        self.aliases.insert(names.join(" "), ty);
        Ok(())
    }

    /// `typedef TYPE name[dims], …;`
    fn typedef(&mut self) -> Result<(), MetaError> {
        self.next();
        let (ty, names) = self.type_and_declarators()?;
        for (name, dims) in names {
            let t = self.apply_dims(ty.clone(), dims);
            self.check_depth(&t)?;
            self.aliases.insert(name, t);
        }
        self.expect(";")?;
        Ok(())
    }

    fn dim_list(&mut self) -> Result<Vec<Dim>, MetaError> {
        let mut dims = Vec::new();
        while self.is_punct("[") {
            if dims.len() == MAX_DIMS {
                return err(self.offset(), "too many array dimensions");
            }
            dims.push(self.dim()?);
        }
        Ok(dims)
    }

    /// Records a named type or alias, refusing types nested too deeply.
    fn check_depth(&self, ty: &Ty) -> Result<(), MetaError> {
        if crate::types::too_deep(ty, MAX_ALIAS_DEPTH) {
            return err(self.offset(), "types nested too deeply (through aliases)");
        }
        Ok(())
    }

    fn dims(&mut self, mut ty: Ty) -> Result<Ty, MetaError> {
        let dims = self.dim_list()?;
        if !dims.is_empty() {
            ty = self.apply_dims(ty, dims);
        }
        Ok(ty)
    }

    fn dim(&mut self) -> Result<Dim, MetaError> {
        self.expect("[")?;
        let at = self.offset();
        let d = match self.next() {
            Tok::Int(n) if n >= 0 => Dim::Fixed(n as u64),
            Tok::Ident(s) => {
                let mut path = vec![s];
                while self.eat(".") {
                    path.push(self.ident()?);
                }
                Dim::Dyn(path)
            }
            other => return err(at, format!("expected a length, found {}", describe(&other))),
        };
        self.expect("]")?;
        Ok(d)
    }

    fn apply_dims(&self, ty: Ty, dims: Vec<Dim>) -> Ty {
        // `x[2][3]`: an array of 2 arrays of 3.
        dims.into_iter().rev().fold(ty, |inner, d| match d {
            Dim::Fixed(n) => Ty::Array(Box::new(inner), n),
            Dim::Dyn(path) => Ty::Sequence(Box::new(inner), path),
        })
    }

    /// A type followed by one or more declarators, as in a field or a typedef. A type
    /// named by identifiers ends before the last identifier (the declarator).
    #[allow(clippy::type_complexity)]
    fn type_and_declarators(&mut self) -> Result<(Ty, Vec<(String, Vec<Dim>)>), MetaError> {
        let at = self.offset();
        let ty = if let Tok::Ident(first) = self.peek().clone() {
            if is_keyword_type(&first) {
                self.type_spec()?
            } else {
                let mut names = Vec::new();
                while let Tok::Ident(s) = self.peek().clone() {
                    names.push(s);
                    self.next();
                }
                if names.len() < 2 {
                    return err(
                        at,
                        format!("expected a type and a field name at `{}`", names.join(" ")),
                    );
                }
                // Put the declarator back.
                self.pos -= 1;
                names.pop();
                let name = names.join(" ");
                self.named(&name, at)?
            }
        } else {
            return err(
                at,
                format!("expected a type, found {}", describe(self.peek())),
            );
        };
        let mut decls = Vec::new();
        loop {
            while self.eat("*") {}
            let name = self.ident()?;
            let dims = self.dim_list()?;
            decls.push((name, dims));
            if !self.eat(",") {
                break;
            }
        }
        Ok((ty, decls))
    }

    fn named(&self, name: &str, at: usize) -> Result<Ty, MetaError> {
        if let Some(t) = self.aliases.get(name) {
            return Ok(t.clone());
        }
        // C names that TSDL producers use without declaring them.
        let builtin = match name {
            "int" | "signed int" | "signed" => Some((32, true)),
            "unsigned int" | "unsigned" => Some((32, false)),
            "char" | "signed char" => Some((8, true)),
            "unsigned char" => Some((8, false)),
            "short" | "signed short" => Some((16, true)),
            "unsigned short" => Some((16, false)),
            "long" | "signed long" | "long long" => Some((64, true)),
            "unsigned long" | "unsigned long long" => Some((64, false)),
            _ => None,
        };
        match builtin {
            Some((size, signed)) => Ok(Ty::Int(IntTy {
                size,
                align: 8,
                signed,
                ..IntTy::default()
            })),
            None => err(at, format!("unknown type `{name}`")),
        }
    }

    fn type_spec(&mut self) -> Result<Ty, MetaError> {
        self.enter()?;
        let r = self.type_spec_inner();
        self.depth -= 1;
        r
    }

    fn type_spec_inner(&mut self) -> Result<Ty, MetaError> {
        let at = self.offset();
        let Tok::Ident(kw) = self.peek().clone() else {
            return err(
                at,
                format!("expected a type, found {}", describe(self.peek())),
            );
        };
        match kw.as_str() {
            "integer" => {
                self.next();
                let b = self.block()?;
                Ok(Ty::Int(int_from_block(&b, at)?))
            }
            "floating_point" => {
                self.next();
                let b = self.block()?;
                let exp = b.int("exp_dig").unwrap_or(8);
                let mant = b.int("mant_dig").unwrap_or(24);
                let size = exp + mant;
                if size != 32 && size != 64 {
                    return err(
                        at,
                        format!("floating point of {size} bits is not supported"),
                    );
                }
                Ok(Ty::Float(FloatTy {
                    size: size as u32,
                    align: b.int("align").map_or(8, |a| a as u32),
                    byte_order: byte_order(&b),
                }))
            }
            "string" => {
                self.next();
                if self.is_punct("{") {
                    self.block()?;
                }
                Ok(Ty::Str)
            }
            "struct" => {
                self.next();
                let name = match self.peek().clone() {
                    Tok::Ident(n) if n != "align" => {
                        self.next();
                        Some(n)
                    }
                    _ => None,
                };
                let ty = if self.is_punct("{") {
                    let fields = self.fields()?;
                    let mut align = 1;
                    if self.is_ident("align") {
                        align = self.align_attr()?;
                    }
                    let t = Ty::Struct(std::sync::Arc::new(StructTy {
                        depth: crate::types::depth_of(&fields),
                        fields,
                        min_align: align,
                    }));
                    if let Some(n) = &name {
                        self.check_depth(&t)?;
                        self.structs.insert(n.clone(), t.clone());
                    }
                    t
                } else {
                    let Some(n) = name else {
                        return err(at, "`struct` without a name or a body");
                    };
                    match self.structs.get(&n) {
                        Some(t) => t.clone(),
                        None => return err(at, format!("unknown struct `{n}`")),
                    }
                };
                if self.is_ident("align") {
                    let a = self.align_attr()?;
                    if let Ty::Struct(s) = &ty {
                        let mut s2 = (**s).clone();
                        s2.min_align = s2.min_align.max(a);
                        return Ok(Ty::Struct(std::sync::Arc::new(s2)));
                    }
                }
                Ok(ty)
            }
            "enum" => {
                self.next();
                let name = match self.peek().clone() {
                    Tok::Ident(n) => {
                        self.next();
                        Some(n)
                    }
                    _ => None,
                };
                let container = if self.eat(":") {
                    let cat = self.offset();
                    if self.is_ident("integer") {
                        match self.type_spec()? {
                            Ty::Int(i) => Some(i),
                            _ => return err(cat, "an enum's container must be an integer"),
                        }
                    } else {
                        let mut names = Vec::new();
                        while let Tok::Ident(s) = self.peek().clone() {
                            names.push(s);
                            self.next();
                        }
                        match self.named(&names.join(" "), cat)? {
                            Ty::Int(i) => Some(i),
                            _ => return err(cat, "an enum's container must be an integer"),
                        }
                    }
                } else {
                    None
                };
                if !self.is_punct("{") {
                    let Some(n) = name else {
                        return err(at, "`enum` without a name or a body");
                    };
                    return match self.enums.get(&n) {
                        Some(t) => Ok(t.clone()),
                        None => err(at, format!("unknown enum `{n}`")),
                    };
                }
                let int = match container {
                    Some(i) => i,
                    None => match self.aliases.get("int") {
                        Some(Ty::Int(i)) => i.clone(),
                        _ => IntTy {
                            size: 32,
                            align: 8,
                            signed: true,
                            ..IntTy::default()
                        },
                    },
                };
                let entries = self.enumerators()?;
                let t = Ty::Enum(std::sync::Arc::new(EnumTy { int, entries }));
                if let Some(n) = name {
                    self.enums.insert(n, t.clone());
                }
                Ok(t)
            }
            "variant" => {
                self.next();
                let name = match self.peek().clone() {
                    Tok::Ident(n) => {
                        self.next();
                        Some(n)
                    }
                    _ => None,
                };
                let tag = if self.eat("<") {
                    let mut path = vec![self.ident()?];
                    while self.eat(".") {
                        path.push(self.ident()?);
                    }
                    self.expect(">")?;
                    Some(path)
                } else {
                    None
                };
                if self.is_punct("{") {
                    let options = self.fields()?;
                    let t = Ty::Variant(std::sync::Arc::new(VariantTy {
                        depth: crate::types::depth_of(&options),
                        tag,
                        options,
                    }));
                    if let Some(n) = name {
                        self.check_depth(&t)?;
                        self.variants.insert(n, t.clone());
                    }
                    Ok(t)
                } else {
                    let Some(n) = name else {
                        return err(at, "`variant` without a name or a body");
                    };
                    match self.variants.get(&n) {
                        Some(Ty::Variant(v)) => {
                            let mut v2 = (**v).clone();
                            if tag.is_some() {
                                v2.tag = tag;
                            }
                            Ok(Ty::Variant(std::sync::Arc::new(v2)))
                        }
                        _ => err(at, format!("unknown variant `{n}`")),
                    }
                }
            }
            _ => {
                let mut names = Vec::new();
                while let Tok::Ident(s) = self.peek().clone() {
                    names.push(s);
                    self.next();
                }
                self.named(&names.join(" "), at)
            }
        }
    }

    fn align_attr(&mut self) -> Result<u32, MetaError> {
        self.next();
        self.expect("(")?;
        let at = self.offset();
        let a = match self.next() {
            Tok::Int(a) if a > 0 && a <= 1 << 20 && (a & (a - 1)) == 0 => a as u32,
            other => return err(at, format!("bad alignment {}", describe(&other))),
        };
        self.expect(")")?;
        Ok(a)
    }

    /// `{ type name; … }` of a struct or variant.
    fn fields(&mut self) -> Result<Vec<(String, Ty)>, MetaError> {
        self.expect("{")?;
        let mut fields = Vec::new();
        loop {
            if self.eat("}") {
                return Ok(fields);
            }
            if self.eat(";") {
                continue;
            }
            if *self.peek() == Tok::Eof {
                return err(self.offset(), "a struct that does not end");
            }
            if self.is_ident("typealias") {
                self.typealias()?;
                continue;
            }
            if self.is_ident("typedef") {
                self.typedef()?;
                continue;
            }
            // A named type declared inside (`struct x {…};`).
            if matches!(self.peek(), Tok::Ident(k) if k == "struct" || k == "enum" || k == "variant")
            {
                let save = self.pos;
                let ty = self.type_spec()?;
                if self.eat(";") {
                    continue;
                }
                let _ = save;
                let mut decls = Vec::new();
                loop {
                    let name = self.ident()?;
                    let dims = self.dim_list()?;
                    decls.push((name, dims));
                    if !self.eat(",") {
                        break;
                    }
                }
                self.expect(";")?;
                for (name, dims) in decls {
                    fields.push((strip_underscore(&name), self.apply_dims(ty.clone(), dims)));
                }
                continue;
            }
            let (ty, decls) = self.type_and_declarators()?;
            self.expect(";")?;
            for (name, dims) in decls {
                fields.push((strip_underscore(&name), self.apply_dims(ty.clone(), dims)));
            }
        }
    }

    fn enumerators(&mut self) -> Result<Vec<(String, i128, i128)>, MetaError> {
        self.expect("{")?;
        let mut entries = Vec::new();
        let mut next = 0i128;
        loop {
            if self.eat("}") {
                return Ok(entries);
            }
            let at = self.offset();
            let label = match self.next() {
                Tok::Ident(s) | Tok::Str(s) => s,
                other => {
                    return err(
                        at,
                        format!("expected an enum label, found {}", describe(&other)),
                    )
                }
            };
            let (lo, hi) = if self.eat("=") {
                let lo = self.signed_int()?;
                let hi = if self.eat("...") {
                    self.signed_int()?
                } else {
                    lo
                };
                (lo, hi)
            } else {
                (next, next)
            };
            next = hi.saturating_add(1);
            entries.push((label, lo.min(hi), lo.max(hi)));
            if !self.eat(",") {
                self.expect("}")?;
                return Ok(entries);
            }
        }
    }

    fn signed_int(&mut self) -> Result<i128, MetaError> {
        let at = self.offset();
        match self.value()? {
            Value::Int(v) => Ok(v),
            _ => err(at, "expected a number"),
        }
    }
}

#[derive(Debug, Clone)]
enum Dim {
    Fixed(u64),
    Dyn(Vec<String>),
}

fn is_keyword_type(s: &str) -> bool {
    matches!(
        s,
        "integer" | "floating_point" | "string" | "struct" | "enum" | "variant"
    )
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Int(v) => format!("`{v}`"),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::Punct(p) => format!("`{p}`"),
        Tok::Eof => "the end of the metadata".into(),
    }
}

fn byte_order(b: &Block) -> ByteOrder {
    match b.text("byte_order").as_deref() {
        Some("be" | "network" | "big_endian") => ByteOrder::Be,
        Some("le" | "little_endian") => ByteOrder::Le,
        _ => ByteOrder::Native,
    }
}

fn int_from_block(b: &Block, at: usize) -> Result<IntTy, MetaError> {
    let size = match b.int("size") {
        Some(s) if (1..=64).contains(&s) => s as u32,
        Some(s) => {
            return err(
                at,
                format!("integer of {s} bits is not supported (1 to 64)"),
            )
        }
        None => return err(at, "integer without a size"),
    };
    let align = match b.int("align") {
        Some(a) if a > 0 && a <= 1 << 20 && (a & (a - 1)) == 0 => a as u32,
        Some(a) => return err(at, format!("bad alignment {a}")),
        None => {
            if size % 8 == 0 {
                8
            } else {
                1
            }
        }
    };
    let signed = match b.get("signed") {
        Some(Value::Int(v)) => *v != 0,
        Some(Value::Path(p)) => matches!(p[0].as_str(), "true" | "TRUE" | "True"),
        Some(Value::Str(s)) => matches!(s.as_str(), "true" | "TRUE" | "1"),
        None => false,
    };
    let base = match b.get("base") {
        Some(Value::Int(v)) => *v as u32,
        Some(Value::Path(p)) => match p[0].as_str() {
            "hexadecimal" | "hex" | "x" | "X" | "p" => 16,
            "octal" | "oct" | "o" => 8,
            "binary" | "b" => 2,
            _ => 10,
        },
        _ => 10,
    };
    let encoded = match b.get("encoding") {
        Some(Value::Path(p)) => matches!(p[0].as_str(), "UTF8" | "ASCII" | "utf8" | "ascii"),
        Some(Value::Str(s)) => matches!(s.as_str(), "UTF8" | "ASCII"),
        _ => false,
    };
    let map_clock = match b.get("map") {
        Some(Value::Path(p)) if p.len() >= 2 && p[0] == "clock" => Some(p[1].clone()),
        _ => None,
    };
    Ok(IntTy {
        size,
        align,
        signed,
        byte_order: byte_order(b),
        base,
        encoded,
        map_clock,
    })
}

fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Parses TSDL text.
pub fn parse(text: &str) -> Result<Metadata, MetaError> {
    let toks = lex(text)?;
    Parser {
        toks,
        pos: 0,
        aliases: HashMap::new(),
        structs: HashMap::new(),
        enums: HashMap::new(),
        variants: HashMap::new(),
        depth: 0,
    }
    .parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexes_numbers_strings_and_punctuation() {
        let t = lex("a := 0x1F; b = 010u; c = \"x\\\"y\"; 0 ... 30 /* c */ // d\n").unwrap();
        let toks: Vec<Tok> = t.into_iter().map(|t| t.tok).collect();
        assert_eq!(toks[1], Tok::Punct(":="));
        assert_eq!(toks[2], Tok::Int(31));
        assert_eq!(toks[6], Tok::Int(8));
        assert_eq!(toks[10], Tok::Str("x\"y".into()));
        assert_eq!(toks[12], Tok::Int(0));
        assert_eq!(toks[13], Tok::Punct("..."));
    }

    #[test]
    fn parses_an_lttng_like_metadata() {
        let text = r#"/* CTF 1.8 */
typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := unsigned long;
typealias integer { size = 5; align = 1; signed = false; } := uint5_t;
trace { major = 1; minor = 8; byte_order = be; uuid = "f23bdb74-720b-4097-81cc-acf0e9c78fc9";
  packet.header := struct { uint32_t magic; uint8_t uuid[16]; uint32_t stream_id; }; };
env { hostname = "h"; tracer_major = 2; };
clock { name = "monotonic"; freq = 1000000000; offset = 1448631930242771401; };
typealias integer { size = 27; align = 1; signed = false; map = clock.monotonic.value; } := uint27_clock_monotonic_t;
struct event_header_compact {
	enum : uint5_t { compact = 0 ... 30, extended = 31 } id;
	variant <id> {
		struct { uint27_clock_monotonic_t timestamp; } compact;
		struct { uint32_t id; unsigned long timestamp; } extended;
	} v;
} align(8);
stream { id = 0; event.header := struct event_header_compact; packet.context := struct { unsigned long cpu_id; }; };
event { name = "a:b"; id = 3; stream_id = 0; fields := struct { uint32_t _len; string s; uint8_t seq[_len]; }; };
"#;
        let m = parse(text).unwrap();
        assert_eq!(m.byte_order, ByteOrder::Be);
        assert_eq!(m.clocks[0].offset, 1448631930242771401);
        assert_eq!(m.streams.len(), 1);
        assert_eq!(m.events[0].id, Some(3));
        let Some(Ty::Struct(f)) = &m.events[0].fields else {
            panic!()
        };
        assert_eq!(f.fields[0].0, "len");
        assert!(matches!(&f.fields[2].1, Ty::Sequence(_, p) if p == &vec!["_len".to_string()]));
        let Some(Ty::Struct(h)) = &m.streams[0].event_header else {
            panic!()
        };
        assert_eq!(h.min_align, 8);
        assert!(
            matches!(&h.fields[0].1, Ty::Enum(e) if e.entries[1] == ("extended".into(), 31, 31))
        );
    }

    #[test]
    fn errors_have_offsets_and_do_not_panic() {
        for bad in [
            "trace { major = 1; ",
            "typealias integer { size = 99; } := x;",
            "trace { packet.header := struct { foo bar; }; };",
            "\"abc",
            "struct { struct { struct {",
            "event { name = \"x\"; fields := struct { integer { size = 8; } a[",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let deep = "trace { packet.header := ".to_string() + &"struct { ".repeat(500);
        assert!(parse(&deep).is_err());
    }
}
