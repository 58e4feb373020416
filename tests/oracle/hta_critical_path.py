"""HTA's critical path analysis (HolisticTraceAnalysis 0.5.0,
`TraceAnalysis.critical_path_analysis`) on one rank's trace, as one JSON document: the
path's edges in order, each with its type, weight, the events at its two ends and the
event it is attributed to (name, start and duration in HTA's units, µs), and the
summary by bound_by.

    python hta_critical_path.py TRACE_DIR ANNOTATION INSTANCE   # the trace's first rank

Run it with HTA 0.5.0 on pandas 2 (tests/requirements-hta.txt: pandas 2.2.3, which
accepts HTA's `DataFrame.drop(axis=1, columns=[...])`). pandas 3 refuses that call, and
under its copy-on-write HTA's `fillna(-1, inplace=True)` on a column no longer writes
back, which drops every CUDA event synchronisation edge: the script refuses pandas 3.
"""

import json
import sys

from hta_quiet import first_rank, stdout_to_stderr

import pandas as pd  # noqa: E402

if int(pd.__version__.split(".")[0]) >= 3:
    sys.exit(f"hta_critical_path.py: pandas {pd.__version__}: HTA 0.5.0's critical path needs "
             "pandas 2 (tests/requirements-hta.txt)")


def main():
    trace_dir, annotation, instance = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with stdout_to_stderr():
        ta, rank = first_rank(trace_dir)
        cp, ok = ta.critical_path_analysis(rank=rank, annotation=annotation, instance_id=instance)
    df = cp.trace_df
    names = ta.t.symbol_table.get_sym_table()

    def event(ev):
        if ev is None or ev < 0:
            return None
        row = df.loc[ev]
        return {"name": names[int(row["name"])], "ts": int(row["ts"]), "dur": int(row["dur"]),
                "stream": int(row["stream"])}

    edges = []
    path = cp.critical_path_nodes
    for u, v in zip(path, path[1:]):
        e = cp.edges[u, v]["object"]
        src, dst = cp.node_list[u], cp.node_list[v]
        edges.append({
            "type": e.type.value,
            "weight": int(cp.edges[u, v]["weight"]),
            "src": event(src.ev_idx), "src_start": bool(src.is_start),
            "dst": event(dst.ev_idx), "dst_start": bool(dst.is_start),
            "attributed": event(cp.get_event_attribution_for_edge(e)),
        })
    bd = cp.get_critical_path_breakdown()
    summary = {str(k): int(v) for k, v in bd.groupby("bound_by").duration.sum().items()}
    print(json.dumps({"ok": bool(ok), "edges": edges, "summary": summary,
                      "nodes": len(cp.node_list), "graph_edges": cp.number_of_edges()}))


if __name__ == "__main__":
    main()
