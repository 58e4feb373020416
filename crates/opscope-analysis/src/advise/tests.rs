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
