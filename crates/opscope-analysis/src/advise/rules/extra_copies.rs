//! Tensors made on the host only to be copied to the device: torch's
//! `ExtraCUDACopyPattern` (`torch/profiler/_pattern_matcher.py`) — an `aten::to` whose
//! last child is `aten::_to_copy`, whose last child is an `aten::copy_` between equal
//! dtypes, right after a sibling of its caller whose last descendants end in
//! `aten::fill_`, `aten::zero_`, `aten::normal_` or `aten::uniform_` (a constant or
//! random tensor made on the CPU, as `torch.zeros(n).to("cuda")` does). Create it on the
//! device instead. Only copies that launched device work count.

use opscope_model::{SliceKind, NONE};

use super::{sources_of, time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "extra_copies",
    anchor: "torch.profiler _pattern_matcher ExtraCUDACopyPattern",
    about: "tensors created on the host and copied to the device at once",
    needs_device: true,
    check,
};

const INIT_OPS: [&str; 4] = [
    "aten::fill_",
    "aten::zero_",
    "aten::normal_",
    "aten::uniform_",
];

fn check(facts: &Facts, out: &mut Out) {
    if facts.device_work().is_empty() {
        return;
    }
    let trace = facts.trace();
    let s = &trace.slices;
    let tos = facts.named(&[SliceKind::Op], |n| n == "aten::to");
    if tos.is_empty() {
        return;
    }
    // Children of each op slice, in start order (slices are in start order per track).
    let children = |p: usize| -> Vec<usize> {
        let range = trace.track_slices(opscope_model::TrackId(s.track[p]));
        let from = range.start + s.ts[range.clone()].partition_point(|&t| t < s.ts[p]);
        let to = range.start + s.ts[range.clone()].partition_point(|&t| t <= s.end(p));
        (from..to).filter(|&c| s.parent[c] == p as u32).collect()
    };
    let launched_work = |copy: usize| -> bool {
        // A launch under the copy whose work is on a device.
        let range = trace.track_slices(opscope_model::TrackId(s.track[copy]));
        let from = range.start + s.ts[range.clone()].partition_point(|&t| t < s.ts[copy]);
        let to = range.start + s.ts[range.clone()].partition_point(|&t| t <= s.end(copy));
        (from..to).any(|c| {
            matches!(s.kind(c), SliceKind::Runtime | SliceKind::Driver)
                && facts.name(c).contains("Memcpy")
        })
    };
    let dtypes_equal = |copy: usize| -> bool {
        match facts.str_arg(copy, "Input type") {
            // `["float", "float", ""]`: the first two.
            Some(types) => {
                let v: Vec<&str> = types
                    .trim_matches(|c| c == '[' || c == ']')
                    .split(',')
                    .map(|t| t.trim().trim_matches('"'))
                    .collect();
                v.len() >= 2 && !v[0].is_empty() && v[0] == v[1]
            }
            None => false,
        }
    };
    let mut hits = Vec::new();
    let mut no_types = false;
    for &to in &tos {
        let Some(&to_copy) = children(to).last() else {
            continue;
        };
        if facts.name(to_copy) != "aten::_to_copy" {
            continue;
        }
        let Some(&copy) = children(to_copy).last() else {
            continue;
        };
        if facts.name(copy) != "aten::copy_" {
            continue;
        }
        if facts.str_arg(copy, "Input type").is_none() {
            no_types = true;
            continue;
        }
        if !dtypes_equal(copy) || !launched_work(copy) {
            continue;
        }
        // The caller's previous sibling, down its last children to an init op.
        let caller = s.parent[to];
        if caller == NONE {
            continue;
        }
        let caller = caller as usize;
        let siblings = match s.parent[caller] {
            NONE => {
                let range = trace.track_slices(opscope_model::TrackId(s.track[caller]));
                range.filter(|&c| s.parent[c] == NONE).collect::<Vec<_>>()
            }
            p => children(p as usize),
        };
        let Some(k) = siblings.iter().position(|&c| c == caller) else {
            continue;
        };
        let Some(mut at) = k.checked_sub(1).map(|k| siblings[k]) else {
            continue;
        };
        let mut found = INIT_OPS.contains(&facts.name(at));
        while !found {
            let Some(&last) = children(at).last() else {
                break;
            };
            at = last;
            found = INIT_OPS.contains(&facts.name(at));
        }
        if found {
            hits.push(to);
        }
    }
    if no_types && hits.is_empty() {
        out.not_checked(
            RULE.name,
            "copies without their input types (record_shapes=True records them)",
        );
    }
    for (source, rows) in sources_of(facts, &hits) {
        let spent: i64 = rows.iter().map(|&i| s.dur[i]).sum();
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!(
                "{} tensors are made on the host and copied to the device",
                rows.len()
            ),
        )
        .saving(facts, source, spent);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{} in those copies (aten::to after a fill, zero, normal or uniform)",
            time(spent)
        ));
        f.fix = "create the tensor on the device: torch.zeros(..., device=\"cuda\"), \
                 torch.randn(..., device=\"cuda\")"
            .to_string();
        f.more = format!("opscope stats op {}", facts.files());
        f.figures.insert("copies", rows.len() as f64);
        out.finding(f);
    }
}
