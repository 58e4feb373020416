use super::rules::RULES;

/// Every rule has a distinct name, an anchor and a description.
#[test]
fn rules_are_named_once_with_their_anchor() {
    let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before);
    assert!(RULES
        .iter()
        .all(|r| !r.anchor.is_empty() && !r.about.is_empty()));
}

/// On a run on CPUs only, the rules about devices are not checked, and said so under
/// "not checked" (they were listed among the rules checked, as if the trace had passed
/// them); one kernel makes them checked again.
#[test]
fn device_rules_are_not_checked_on_a_cpu_run() {
    use opscope_model::Trace;

    use crate::context::Context;
    use crate::report::Reported;

    let advice_of = |extra: &str| {
        let json = format!(
            r#"[{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":50}}{extra}]"#
        );
        let mut trace = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        super::advise(&Context::new(&trace), &super::AdviseOptions::default())
    };
    let cpu = advice_of("");
    let device: Vec<&str> = RULES
        .iter()
        .filter(|r| r.needs_device)
        .map(|r| r.name)
        .collect();
    assert!(device.contains(&"gpu_utilization") && device.contains(&"sync_apis"));
    for rule in &device {
        assert!(!cpu.rules.contains(rule), "{rule} was run");
        assert!(
            cpu.not_checked
                .iter()
                .any(|n| n.rule == *rule && n.reason == super::NO_DEVICE),
            "{rule}"
        );
    }
    assert!(cpu.rules.contains(&"dataloader") && cpu.rules.contains(&"optimizer"));
    let lines: Vec<String> = cpu
        .report()
        .blocks
        .iter()
        .filter_map(|b| match b {
            crate::report::Block::Line(line) => Some(
                line.0
                    .iter()
                    .map(|p| match p {
                        crate::report::Piece::Text(t) => t.clone(),
                        crate::report::Piece::Value(_) => String::new(),
                    })
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect();
    // One line for them all, not one per rule.
    let line = format!("  {}: {}", device.join(", "), super::NO_DEVICE);
    assert!(lines.contains(&line), "{lines:#?}");
    let gpu = advice_of(
        r#",{"ph":"X","cat":"kernel","name":"gemm","pid":1,"tid":7,"ts":10,"dur":20,"args":{"device":0,"stream":7}}"#,
    );
    assert!(device.iter().all(|rule| gpu.rules.contains(rule)));
    assert!(!gpu.not_checked.iter().any(|n| n.reason == super::NO_DEVICE));
}

/// A finding on two ranks names both ("rank 0 and 1 more" read as if a third were
/// hidden); on more, the one that saves most and how many others.
#[test]
fn a_finding_on_two_ranks_names_both() {
    let rule = &RULES[0];
    let on = |ranks: &[(&str, i64)]| {
        let findings = ranks
            .iter()
            .map(|&(scope, saving)| {
                let mut f = super::Finding::of(rule, scope, "slow");
                f.saving_ns = saving;
                f
            })
            .collect();
        super::merge_across_sources(findings).remove(0).scope
    };
    assert_eq!(on(&[("rank 0", 5), ("rank 1", 9)]), "rank 1 and rank 0");
    assert_eq!(
        on(&[("rank 0", 5), ("rank 1", 9), ("rank 2", 1)]),
        "rank 1 and 2 more"
    );
}

/// Findings of one scope in several files: files of different times (a profiler's
/// windows) add their savings, with the share of all their time; files of the same
/// time (a recorded file and the program's own profile) saw it twice, and the largest
/// saving stands.
#[test]
fn a_scope_in_several_files_adds_up_only_across_times() {
    let rule = &RULES[0];
    let merged = |files: &[([i64; 2], i64, f64)]| {
        let findings = files
            .iter()
            .map(|&(looked_at, saving, pct)| {
                let mut f = super::Finding::of(rule, "python (pid 7)", "slow");
                (f.saving_ns, f.saving_pct, f.looked_at) = (saving, pct, Some(looked_at));
                f
            })
            .collect();
        let mut out = super::merge_across_sources(findings);
        assert_eq!(out.len(), 1);
        let f = out.remove(0);
        assert_eq!(f.scope, "python (pid 7)");
        (f.saving_ns, f.saving_pct)
    };
    // Two windows of 1000 ns each: 100 + 300 of 2000.
    assert_eq!(
        merged(&[([0, 1000], 100, 10.0), ([5000, 6000], 300, 30.0)]),
        (400, 20.0)
    );
    // The same time twice: the larger saving and its share.
    assert_eq!(
        merged(&[([0, 1000], 100, 10.0), ([200, 900], 300, 30.0)]),
        (300, 30.0)
    );
    // Two windows, one of them seen twice.
    assert_eq!(
        merged(&[
            ([0, 1000], 100, 10.0),
            ([5000, 6000], 50, 5.0),
            ([5100, 5900], 80, 8.0)
        ]),
        (180, 9.0)
    );
}

#[test]
fn groups_put_one_key_together_and_keyless_items_apart() {
    let keys = [Some(1), None, Some(2), Some(1), None, Some(2)];
    assert_eq!(
        crate::across::groups(&keys),
        vec![vec![0, 3], vec![1], vec![2, 5], vec![4]]
    );
}
