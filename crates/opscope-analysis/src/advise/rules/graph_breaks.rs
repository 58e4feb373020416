//! `torch.compile` graph breaks: where Dynamo cannot trace a line it splits the
//! function, runs that line eagerly and compiles the rest as a resume function
//! (`torch_dynamo_resume_in_<fn>_at_<line>`), whose own "Torch-Compiled Region" then
//! runs inside the first's. PyTorch's guidance (torch.compile's troubleshooting,
//! `TORCH_LOGS=graph_breaks`): each break costs the eager code between graphs, another
//! guard check and the fusion across the break. A region nested in another, in a step
//! after the first, is a break; the saving is the time inside the broken regions but
//! outside their compiled graphs (what one whole graph would not spend).

use hashbrown::HashMap;
use opscope_model::NONE;

use super::{time, Facts, Finding, Out, Rule, Severity};

pub static RULE: Rule = Rule {
    name: "graph_breaks",
    anchor: "torch.compile graph breaks (a compiled region resumed inside another)",
    about: "torch.compile splitting a function into several graphs every step",
    needs_device: false,
    check,
};

/// What Dynamo's compiled code records around each compiled frame's call.
fn is_region(name: &str) -> bool {
    name.starts_with("Torch-Compiled Region")
}

/// A compiled graph's own run: AOT autograd's function, Inductor's graph call.
fn is_graph_call(name: &str) -> bool {
    name == "CompiledFunction" || name.starts_with("## Call CompiledFxGraph")
}

/// `file.py(9): torch_dynamo_resume_in_forward_at_9` (a Python stack frame) as
/// `forward at file.py:9`.
fn resume_site(name: &str) -> Option<String> {
    let (at, function) = name.split_once(": ")?;
    let rest = function.strip_prefix("torch_dynamo_resume_in_")?;
    let (function, line) = rest.rsplit_once("_at_")?;
    let file = at.split_once('(').map_or(at, |x| x.0);
    Some(format!("{function} at {file}:{line}"))
}

#[derive(Default)]
struct Broken {
    /// Regions nested in this outermost one.
    nested: usize,
    /// Its compiled graphs' time.
    graphs_ns: i64,
}

fn check(facts: &Facts, out: &mut Out) {
    let trace = facts.trace();
    let s = &trace.slices;
    let regions = facts.names_where(is_region);
    if !regions.iter().any(|&r| r) {
        return;
    }
    let graphs = facts.names_where(is_graph_call);
    let region = |i: usize| regions[s.name[i].0 as usize];
    // The outermost region above `i` (itself excluded), if any.
    let outermost = |mut at: u32| {
        let mut found = None;
        while at != NONE {
            if region(at as usize) {
                found = Some(at as usize);
            }
            at = s.parent[at as usize];
        }
        found
    };
    let mut broken: HashMap<usize, Broken> = HashMap::new();
    for i in facts.slices_where(region) {
        if let Some(outer) = outermost(s.parent[i]) {
            broken.entry(outer).or_default().nested += 1;
        }
    }
    if broken.is_empty() {
        return;
    }
    for i in facts.slices_where(|i| graphs[s.name[i].0 as usize]) {
        // A graph call inside another (Inductor's call in AOT's function) counts once.
        let mut at = s.parent[i];
        let mut inside_graph = false;
        while at != NONE && !region(at as usize) {
            inside_graph |= graphs[s.name[at as usize].0 as usize];
            at = s.parent[at as usize];
        }
        if inside_graph || at == NONE {
            continue;
        }
        if let Some(b) = outermost(s.parent[i]).and_then(|o| broken.get_mut(&o)) {
            b.graphs_ns += s.dur[i];
        }
    }
    let sites: Vec<String> = {
        let resumes = facts.names_where(|n| n.contains("torch_dynamo_resume_in_"));
        let mut sites: Vec<String> = (0..trace.strings.len())
            .filter(|&k| resumes[k])
            .filter_map(|k| resume_site(trace.strings.get(opscope_model::StrId(k as u32))))
            .collect();
        sites.sort();
        sites.dedup();
        sites
    };
    let outers: Vec<usize> = broken.keys().copied().collect();
    for (source, rows) in super::sources_of(facts, &outers) {
        // The first step compiles every frame: breaks count from the second.
        let Some(steps) = facts.steps_of(source, 2) else {
            continue;
        };
        let first_end = steps.steps[0].start_ns + steps.steps[0].dur_ns;
        let mut late: Vec<usize> = rows
            .into_iter()
            .filter(|&i| s.ts[i] >= first_end && super::step_at(&steps.steps, s.ts[i]).is_some())
            .collect();
        if late.is_empty() {
            continue;
        }
        late.sort_by_key(|&i| s.ts[i]);
        let (mut nested, mut outside_ns) = (0, 0i64);
        for &i in &late {
            let b = &broken[&i];
            nested += b.nested;
            outside_ns += (s.dur[i] - b.graphs_ns).max(0);
        }
        let mut with: Vec<usize> = late
            .iter()
            .filter_map(|&i| super::step_at(&steps.steps, s.ts[i]))
            .collect();
        with.dedup();
        let later_steps = steps.steps.len() - 1;
        let per_step = nested as f64 / with.len() as f64;
        let mut f = Finding::of(
            &RULE,
            facts.label(source, None),
            format!(
                "torch.compile breaks the compiled code into more graphs: {per_step:.0} \
                 break{} per step in {} of {later_steps} steps after the first",
                if per_step >= 1.5 { "s" } else { "" },
                with.len()
            ),
        )
        .saving(facts, source, outside_ns);
        f.severity = Severity::of_share(f.saving_pct, 3.0, 15.0);
        f.evidence.push(format!(
            "{nested} compiled regions resumed inside another; {} inside the broken \
             regions but outside their compiled graphs",
            time(outside_ns)
        ));
        if !sites.is_empty() {
            let shown: Vec<&str> = sites.iter().take(3).map(String::as_str).collect();
            f.evidence.push(format!("resumes in {}", shown.join(", ")));
        }
        f.fix = "find each break with TORCH_LOGS=graph_breaks (or torch._dynamo.explain) \
                 and remove it: no .item(), print or data-dependent Python control flow \
                 in the compiled code (torch.cond, torch._dynamo.config.\
                 capture_scalar_outputs); fullgraph=True makes a break an error"
            .to_string();
        f.more = format!("opscope view {}", facts.files());
        let first = late[0];
        f.span = Some([s.ts[first], s.end(first)]);
        f.figures.insert("breaks", nested as f64);
        f.figures.insert("steps_with", with.len() as f64);
        f.figures.insert("outside_graphs_ns", outside_ns as f64);
        out.finding(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_frame_names_the_function_and_line() {
        assert_eq!(
            resume_site("train.py(9): torch_dynamo_resume_in_forward_at_9").as_deref(),
            Some("forward at train.py:9")
        );
        assert_eq!(
            resume_site("m.py(30): torch_dynamo_resume_in_my_fn_at_31").as_deref(),
            Some("my_fn at m.py:31")
        );
        assert_eq!(resume_site("m.py(30): forward"), None);
    }
}
