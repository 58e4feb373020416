"""tfprof itself on a RunMetadata and its GraphDef: the op and scope views as
TensorFlow 2.x's `tf.compat.v1.profiler.profile` returns them (protos, not text), as
one JSON document on stdout.

    python tfprof_views.py RUN_DIR      # RUN_DIR holds run_meta and graph.pbtxt

(tf1_gpu_run_meta.py writes such a directory for a TF 1.x GPU step.)

Views, each with ProfileOptionBuilder.time_and_memory() (the options of the stored
peer outputs) and with every limit off:
  op_default, op_all:       rows in display order
  scope_default, scope_all: nodes in display order, with their depth
Each row/node carries tfprof's own integers: exec/cpu/accelerator micros, requested,
peak, residual and output bytes (self and total), and run counts.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

import tf_run  # noqa: E402

FIELDS = [
    "exec_micros",
    "cpu_exec_micros",
    "accelerator_exec_micros",
    "requested_bytes",
    "peak_bytes",
    "residual_bytes",
    "output_bytes",
]


def amounts(node):
    out = {f: getattr(node, f) for f in FIELDS}
    out.update({"total_" + f: getattr(node, "total_" + f) for f in FIELDS})
    return out


def main():
    run_dir = sys.argv[1]
    graph, run_meta = tf_run.load(run_dir)

    builder = tf.compat.v1.profiler.ProfileOptionBuilder
    select = [
        "micros",
        "cpu_micros",
        "accelerator_micros",
        "bytes",
        "peak_bytes",
        "residual_bytes",
        "output_bytes",
        "occurrence",
    ]
    default = builder(builder.time_and_memory()).select(select).with_empty_output().build()
    everything = (
        builder(builder.time_and_memory(min_micros=0, min_bytes=0))
        .select(select)
        .account_displayed_op_only(False)
        .with_empty_output()
        .build()
    )

    result = {}
    for name, options in [("default", default), ("all", everything)]:
        root = tf.compat.v1.profiler.profile(graph, run_meta=run_meta, cmd="op", options=options)
        # The op view returns its rows as a chain: each row the only child of the last.
        rows, node = [], root
        while node.children:
            node = node.children[0]
            row = {"name": node.name, "runs": sum(g.run_count for g in node.graph_nodes)}
            row.update(amounts(node))
            rows.append(row)
        result["op_" + name] = rows

        root = tf.compat.v1.profiler.profile(
            graph, run_meta=run_meta, cmd="scope", options=options
        )
        nodes = []

        def walk(node, depth):
            entry = {"name": node.name, "depth": depth, "runs": node.run_count}
            entry.update(amounts(node))
            nodes.append(entry)
            for child in node.children:
                walk(child, depth + 1)

        walk(root, 0)
        result["scope_" + name] = nodes
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
