"""tfprof's `advise` on a RunMetadata and its GraphDef, as TensorFlow 2.x's
`tf.compat.v1.profiler.advise` returns it (an AdviceProto): one JSON document mapping
each checker's name to its report strings.

    python tfprof_advise.py RUN_DIR      # RUN_DIR holds run_meta and graph.pbtxt
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

import tf_run  # noqa: E402


def main():
    run_dir = sys.argv[1]
    graph, run_meta = tf_run.load(run_dir)
    # advise prints its report too: keep stdout for the JSON.
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        advice = tf.compat.v1.profiler.advise(graph, run_meta=run_meta)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
    print(json.dumps({name: list(c.reports) for name, c in advice.checkers.items()}))


if __name__ == "__main__":
    main()
