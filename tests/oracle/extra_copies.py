"""torch's ExtraCUDACopyPattern (`torch/profiler/_pattern_matcher.py`) on a Kineto trace's
raw JSON, with no code of opscope's: per thread, events nest by time; an `aten::to`
whose last child is `aten::_to_copy`, whose last child is an `aten::copy_` between two
equal input types that launched a memcpy, right after a sibling of its caller whose
last descendants reach `aten::fill_`, `aten::zero_`, `aten::normal_` or
`aten::uniform_`. Prints the count.

    python extra_copies.py TRACE_DIR      # its one .json.gz
"""

import glob
import gzip
import json
import sys

INIT = {"aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_"}
HOST = ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")


def count(events):
    threads = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in HOST:
            threads.setdefault((e["pid"], e["tid"]), []).append(e)
    hits = 0
    for es in threads.values():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack, parent, children = [], {}, {}
        for i, e in enumerate(es):
            while stack and es[stack[-1]]["ts"] + es[stack[-1]]["dur"] <= e["ts"]:
                stack.pop()
            p = stack[-1] if stack else None
            parent[i] = p
            children.setdefault(p, []).append(i)
            stack.append(i)
        for i, e in enumerate(es):
            if e["name"] != "aten::to" or e.get("cat") != "cpu_op":
                continue
            c = children.get(i, [])
            if not c or es[c[-1]]["name"] != "aten::_to_copy":
                continue
            c2 = children.get(c[-1], [])
            if not c2 or es[c2[-1]]["name"] != "aten::copy_":
                continue
            cp = c2[-1]
            types = es[cp].get("args", {}).get("Input type")
            if not types or len(types) < 2 or not types[0] or types[0] != types[1]:
                continue
            end = es[cp]["ts"] + es[cp]["dur"]
            inside = (es[j] for j in range(cp + 1, len(es)) if es[j]["ts"] <= end)
            if not any("Memcpy" in x["name"] and x.get("cat") in HOST[3:] for x in inside):
                continue
            p = parent[i]
            if p is None:
                continue
            siblings = children.get(parent[p], [])
            k = siblings.index(p)
            if k == 0:
                continue
            at = siblings[k - 1]
            found = es[at]["name"] in INIT
            while not found and children.get(at):
                at = children[at][-1]
                found = es[at]["name"] in INIT
            hits += found
    return hits


def main():
    path = glob.glob(sys.argv[1] + "/*.json.gz")[0]
    with gzip.open(path) as f:
        print(count(json.load(f)["traceEvents"]))


if __name__ == "__main__":
    main()
