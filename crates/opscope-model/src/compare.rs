//! Two models compared part by part, for differential tests of importers (two readers
//! of one format must build the same model): each part as the model cache saves it,
//! with the hash maps' entries in order, since two maps of the same entries may
//! iterate differently.

use crate::Trace;

/// One part of a model and its saved bytes.
pub type Part = (&'static str, Vec<u8>);

/// The model in parts, equal for equal models.
pub fn parts(trace: &Trace) -> Vec<Part> {
    fn bytes(value: &impl serde::Serialize) -> Vec<u8> {
        postcard::to_allocvec(value).expect("a model serialises")
    }
    let mut categories: Vec<_> = trace.unknown_categories.iter().collect();
    categories.sort();
    // The args table indexes its bag shapes in a hash map: the bags themselves, then,
    // as the slices, instants and sources hold them.
    let ids = trace
        .slices
        .args
        .iter()
        .chain(&trace.instants.args)
        .chain(trace.sources.iter().map(|s| &s.metadata));
    let args: Vec<String> = ids
        .map(|&id| format!("{id:?} {:?}", trace.args.get(id).collect::<Vec<_>>()))
        .collect();
    vec![
        ("strings", bytes(&trace.strings)),
        ("args", bytes(&args)),
        ("sources", bytes(&trace.sources)),
        ("clocks", bytes(&trace.clocks)),
        ("processes", bytes(&trace.processes)),
        ("threads", bytes(&trace.threads)),
        ("devices", bytes(&trace.devices)),
        ("tracks", bytes(&trace.tracks)),
        ("slices", bytes(&trace.slices)),
        ("instants", bytes(&trace.instants)),
        ("counters", bytes(&trace.counters)),
        ("flows", bytes(&trace.flows)),
        ("samples", bytes(&trace.samples)),
        ("stacks", bytes(&trace.stacks)),
        ("repairs", bytes(&trace.repairs)),
        ("unknown categories", bytes(&categories)),
        ("warnings", bytes(&trace.warnings)),
    ]
}

/// The name of the first part in which two models differ, or `None` when they are equal.
pub fn first_difference(a: &Trace, b: &Trace) -> Option<&'static str> {
    parts(a)
        .into_iter()
        .zip(parts(b))
        .find(|((_, x), (_, y))| x != y)
        .map(|((name, _), _)| name)
}

/// What a model holds, in a line, for messages.
pub fn shape(trace: &Trace) -> String {
    format!(
        "{} slices, {} instants, {} counter samples, {} flows, {} strings, {} warnings",
        trace.slices.len(),
        trace.instants.len(),
        trace.counters.len(),
        trace.flows.len(),
        trace.strings.len(),
        trace.warnings.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::SliceRow;
    use crate::testing::one_thread;
    use crate::{ArgValue, SliceKind, StrId};

    /// Models built alike are equal, even where their hash maps' entries were made in
    /// another order; a slice's other arg value or another category is a difference.
    #[test]
    fn equal_models_compare_equal_and_a_changed_part_is_named() {
        let build = |value: i64, categories: &[&str]| {
            let (mut trace, track) = one_thread();
            let ids: Vec<_> = ["x", "y", "z"].iter().map(|c| trace.intern(c)).collect();
            for category in categories {
                let k = ["x", "y", "z"].iter().position(|c| c == category).unwrap();
                *trace.unknown_categories.entry(ids[k]).or_default() += 1;
            }
            let (key, name) = (trace.intern("k"), trace.intern("op"));
            let mut w = trace.args.writer();
            w.push(key, ArgValue::Int(value));
            let args = w.finish();
            trace.slices.push(SliceRow {
                track,
                ts: 10,
                dur: 5,
                name,
                category: StrId::EMPTY,
                kind: SliceKind::Other,
                args,
            });
            trace
        };
        let a = build(1, &["x", "y", "z"]);
        assert_eq!(first_difference(&a, &build(1, &["z", "y", "x"])), None);
        assert_eq!(
            first_difference(&a, &build(2, &["x", "y", "z"])),
            Some("args")
        );
        assert_eq!(
            first_difference(&a, &build(1, &["x", "y"])),
            Some("unknown categories")
        );
    }
}
