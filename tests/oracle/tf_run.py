"""A TensorFlow run as tfprof reads it: the graph of RUN_DIR/graph.pbtxt imported into a
tf.Graph, and RUN_DIR/run_meta as a RunMetadata (for tfprof_views.py and
tfprof_advise.py)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402


def load(run_dir):
    graph_def = tf.compat.v1.GraphDef()
    with open(os.path.join(run_dir, "graph.pbtxt")) as f:
        text_format.Parse(f.read(), graph_def)
    run_meta = tf.compat.v1.RunMetadata()
    with open(os.path.join(run_dir, "run_meta"), "rb") as f:
        run_meta.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(graph_def, name="")
    return graph, run_meta
