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
