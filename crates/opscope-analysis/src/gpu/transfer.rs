//! Memory copies and sets per direction: how many, how many bytes, how long, and the
//! bandwidth they reached (bytes over their summed durations: copies that overlap on
//! different streams each count their whole time).

use std::collections::BTreeMap;

use opscope_model::args::ArgValue;
use opscope_model::{SliceKind, Trace};
use serde::Serialize;

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TransferRow {
    /// `memcpy_h2d`, `memset`, … (the slice kind)
    pub direction: String,
    pub count: usize,
    /// Bytes moved, over the copies whose size the trace gives.
    pub bytes: u64,
    pub time_ns: i64,
    /// `bytes` over the time of the copies with a size, in GB/s (10⁹ bytes per second).
    pub gb_per_s: Option<f64>,
}

/// One row per direction, for the memory work among `work` (slice rows).
pub fn transfers(trace: &Trace, work: impl Iterator<Item = usize>) -> Vec<TransferRow> {
    let s = &trace.slices;
    let bytes_key = trace.strings.find("bytes");
    let mut rows: BTreeMap<String, (TransferRow, i64)> = BTreeMap::new();
    for i in work {
        let kind = s.kind(i);
        if !matches!(kind, SliceKind::Memcpy(_) | SliceKind::Memset) {
            continue;
        }
        let direction = kind.name().to_string();
        let bytes = bytes_key.and_then(|k| match trace.args.find(s.args[i], k) {
            Some(ArgValue::Int(b)) => u64::try_from(b).ok(),
            Some(ArgValue::UInt(b)) => Some(b),
            Some(ArgValue::Float(b)) if b >= 0.0 => Some(b as u64),
            _ => None,
        });
        let (row, sized_time) = rows.entry(direction.clone()).or_insert_with(|| {
            (
                TransferRow {
                    direction,
                    ..TransferRow::default()
                },
                0,
            )
        });
        row.count += 1;
        row.time_ns += s.dur[i];
        if let Some(b) = bytes {
            row.bytes += b;
            *sized_time += s.dur[i];
        }
    }
    rows.into_values()
        .map(|(mut row, sized_time)| {
            row.gb_per_s =
                (sized_time > 0 && row.bytes > 0).then(|| row.bytes as f64 / sized_time as f64);
            row
        })
        .collect()
}
