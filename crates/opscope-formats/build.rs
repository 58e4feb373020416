//! Generates the prost messages of the Perfetto, XPlane and TensorFlow protos that
//! opscope-formats reads and writes, from the subsets in the repository's `proto/`
//! folder: protox compiles them in Rust (no `protoc`), prost-build writes the types.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::{env, fs};

use prost_types::field_descriptor_proto::Type;
use prost_types::source_code_info::Location;
use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};

/// One file per format; each imports the rest of its subset.
const ROOTS: [&str; 3] = [
    "perfetto/trace/perfetto_trace.proto",
    "tsl/profiler/protobuf/xplane.proto",
    "tensorflow/core/protobuf/config.proto",
];

/// A message also decoded in part: a copy of it with fewer fields, so that a pass that
/// needs only those has prost skip the others unread. A view with its message's own
/// name replaces the message.
struct View {
    message: &'static str,
    name: &'static str,
    keep: Keep,
    /// The view's doc comment; `None` keeps the message's.
    doc: Option<&'static str>,
}

enum Keep {
    Only(&'static [&'static str]),
    AllBut(&'static [&'static str]),
}

const VIEWS: [View; 4] = [
    View {
        message: "perfetto.protos.TracePacket",
        name: "TracePacketGlobals",
        keep: Keep::Only(&[
            "track_descriptor",
            "clock_snapshot",
            "compressed_packets",
            "zstd_compressed_packets",
        ]),
        doc: Some(
            " The fields of a `TracePacket` the importer's first pass reads: what is global\n \
             to the trace rather than to a sequence, and the compressed packets it inflates.",
        ),
    },
    // The second pass walks the packets the first one inflated: it skips the
    // compressed bytes rather than copy them.
    View {
        message: "perfetto.protos.TracePacket",
        name: "TracePacket",
        keep: Keep::AllBut(&["compressed_packets", "zstd_compressed_packets"]),
        doc: None,
    },
    View {
        message: "tensorflow.profiler.XSpace",
        name: "XSpaceRest",
        keep: Keep::AllBut(&["planes"]),
        doc: Some(" An `XSpace` without its planes, which the importer decodes one at a time."),
    },
    View {
        message: "perfetto.protos.EventName",
        name: "Interned",
        keep: Keep::AllBut(&[]),
        doc: Some(" One entry of any of `InternedData`'s string tables."),
    },
];

/// The messages of `InternedData`'s tables, decoded as the `Interned` view: once
/// strings are bytes, `EventCategory`, `EventName`, `DebugAnnotationName` (`{iid = 1,
/// name = 2}`) and `InternedString` (`{iid = 1, str = 2}`) encode alike, and one Rust
/// type lets the importer and the exporter handle the four tables alike.
const INTERNED: &[&str] = &[
    "perfetto.protos.EventCategory",
    "perfetto.protos.EventName",
    "perfetto.protos.DebugAnnotationName",
    "perfetto.protos.InternedString",
];

/// Fields the importers and the exporter frame by hand, as (file, constant, message,
/// field): they walk a file's top-level message themselves so as to handle its big
/// repeated field one element at a time.
const FRAMING: [(&str, &str, &str, &str); 2] = [
    (
        "perfetto_fields.rs",
        "TRACE_PACKET",
        "perfetto.protos.Trace",
        "packet",
    ),
    (
        "xplane_fields.rs",
        "XSPACE_PLANES",
        "tensorflow.profiler.XSpace",
        "planes",
    ),
];

/// `TracePacket` fields held in a `Box`: all members of its `data` oneof but the
/// frequent `track_event`, so that a packet stays small to build and move.
const BOXED: [&str; 6] = [
    ".perfetto.protos.TracePacket.perf_sample",
    ".perfetto.protos.TracePacket.trace_packet_defaults",
    ".perfetto.protos.TracePacket.track_descriptor",
    ".perfetto.protos.TracePacket.clock_snapshot",
    ".perfetto.protos.TracePacket.thread_descriptor",
    ".perfetto.protos.TracePacket.process_descriptor",
];

fn main() -> Result<(), Box<dyn Error>> {
    let protos = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    println!("cargo:rerun-if-changed={}", protos.display());
    let out = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);

    let mut fds = protox::compile(ROOTS, [&protos])?;
    for (file, constant, message, field) in FRAMING {
        let number = field_number(&fds, message, field)?;
        let text = format!("/// `{message}.{field}`\npub const {constant}: u32 = {number};\n");
        fs::write(out.join(file), text)?;
    }
    // A text that is not UTF-8 (a name cut inside a character, say) is then replaced
    // on import instead of failing its whole message.
    for file in &mut fds.file {
        strings_as_bytes(&mut file.message_type);
    }
    for view in &VIEWS {
        add_view(&mut fds, view)?;
    }
    share_interned(&mut fds)?;

    let mut config = prost_build::Config::new();
    for path in BOXED {
        config.boxed(path);
    }
    config.compile_fds(fds)?;
    Ok(())
}

fn strings_as_bytes(messages: &mut [DescriptorProto]) {
    for message in messages {
        for field in &mut message.field {
            if field.r#type() == Type::String {
                field.set_type(Type::Bytes);
            }
        }
        // Map entries are nested messages too.
        strings_as_bytes(&mut message.nested_type);
    }
}

/// The file and index of the top-level message `name` (`package.Message`).
fn find(fds: &FileDescriptorSet, name: &str) -> Result<(usize, usize), String> {
    fds.file
        .iter()
        .enumerate()
        .find_map(|(f, file)| {
            let local = name.strip_prefix(file.package())?.strip_prefix('.')?;
            let m = file.message_type.iter().position(|m| m.name() == local)?;
            Some((f, m))
        })
        .ok_or_else(|| format!("no message {name} in proto/"))
}

fn field_number(fds: &FileDescriptorSet, message: &str, field: &str) -> Result<i32, String> {
    let (f, m) = find(fds, message)?;
    fds.file[f].message_type[m]
        .field
        .iter()
        .find(|x| x.name() == field)
        .map(|x| x.number())
        .ok_or_else(|| format!("no field {message}.{field} in proto/"))
}

fn add_view(fds: &mut FileDescriptorSet, view: &View) -> Result<(), String> {
    let (f, m) = find(fds, view.message)?;
    let file = &mut fds.file[f];
    let original = &file.message_type[m];
    if !original.oneof_decl.is_empty() {
        return Err(format!(
            "{}: views of oneofs are not supported",
            view.message
        ));
    }
    let (fields, exclude) = match view.keep {
        Keep::Only(names) => (names, false),
        Keep::AllBut(names) => (names, true),
    };
    for name in fields {
        if !original.field.iter().any(|x| x.name() == *name) {
            return Err(format!(
                "view {}: no field {}.{name}",
                view.name, view.message
            ));
        }
    }
    let index = if view.name == original.name() {
        m
    } else {
        let copy = DescriptorProto {
            name: Some(view.name.to_string()),
            // The copy's fields name the original's nested types, which stay there.
            nested_type: Vec::new(),
            enum_type: Vec::new(),
            ..original.clone()
        };
        file.message_type.push(copy);
        let index = file.message_type.len() - 1;
        copy_field_comments(file, m, index);
        index
    };
    if let Some(doc) = view.doc {
        set_doc(file, index, doc);
    }
    let keep = |name: &str| fields.contains(&name) != exclude;
    retain_fields(file, index, keep);
    Ok(())
}

/// Source locations are paths into the descriptor: `[4, m]` is top-level message `m`,
/// `[4, m, 2, i, ..]` its field `i`. prost-build takes the doc comments from them.
const MESSAGE_TYPE: i32 = 4;
const FIELD: i32 = 2;

fn locations(file: &mut FileDescriptorProto) -> &mut Vec<Location> {
    &mut file
        .source_code_info
        .get_or_insert_with(Default::default)
        .location
}

fn copy_field_comments(file: &mut FileDescriptorProto, from: usize, to: usize) {
    let (from, to) = (from as i32, to as i32);
    let all = locations(file);
    let copies: Vec<Location> = all
        .iter()
        .filter(|l| l.path.starts_with(&[MESSAGE_TYPE, from, FIELD]))
        .map(|l| {
            let mut l = l.clone();
            l.path[1] = to;
            l
        })
        .collect();
    all.extend(copies);
}

fn set_doc(file: &mut FileDescriptorProto, message: usize, doc: &str) {
    let path = vec![MESSAGE_TYPE, message as i32];
    let all = locations(file);
    all.retain(|l| l.path != path);
    all.push(Location {
        path,
        leading_comments: Some(doc.to_string()),
        ..Default::default()
    });
}

/// Keeps the fields of top-level message `message` that `keep` names, and moves their
/// comments along with them.
fn retain_fields(file: &mut FileDescriptorProto, message: usize, keep: impl Fn(&str) -> bool) {
    let fields = &mut file.message_type[message].field;
    let mut next = 0;
    let new_index: Vec<Option<i32>> = fields
        .iter()
        .map(|x| {
            keep(x.name()).then(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    fields.retain(|x| keep(x.name()));
    let message = message as i32;
    locations(file).retain_mut(|l| match l.path[..] {
        [MESSAGE_TYPE, m, FIELD, i, ..] if m == message => match new_index[i as usize] {
            Some(j) => {
                l.path[3] = j;
                true
            }
            None => false,
        },
        _ => true,
    });
}

/// Points the fields of the `INTERNED` types at the `Interned` view, once sure that the
/// four encode alike.
fn share_interned(fds: &mut FileDescriptorSet) -> Result<(), String> {
    let shape = |fds: &FileDescriptorSet, name: &str| -> Result<Vec<(i32, Type)>, String> {
        let (f, m) = find(fds, name)?;
        let fields = &fds.file[f].message_type[m].field;
        Ok(fields.iter().map(|x| (x.number(), x.r#type())).collect())
    };
    let shared = "perfetto.protos.Interned";
    let want = shape(fds, shared)?;
    for name in INTERNED {
        if shape(fds, name)? != want {
            return Err(format!("{name} does not encode like {shared}"));
        }
    }
    let mut renamed = 0;
    for file in &mut fds.file {
        retype(&mut file.message_type, shared, &mut renamed);
    }
    if renamed == 0 {
        return Err("no field holds interned strings".into());
    }
    Ok(())
}

fn retype(messages: &mut [DescriptorProto], shared: &str, renamed: &mut usize) {
    for message in messages {
        for field in &mut message.field {
            let name = field.type_name().strip_prefix('.').unwrap_or_default();
            if INTERNED.contains(&name) {
                field.type_name = Some(format!(".{shared}"));
                *renamed += 1;
            }
        }
        retype(&mut message.nested_type, shared, renamed);
    }
}
