"""Independent count of GPU work and of the GPU work whose launch is not in the trace,
for Kineto traces: an event is GPU work by its category, and it is attributed when a
host runtime or driver event of the same file has the same `correlation` id.

Usage: count_launches.py FILE...  (prints one JSON line per file)
"""
import gzip
import json
import sys

DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset", "mtia_ccp_events"}
HOST = {"cuda_runtime", "cuda_driver", "Runtime", "mtia_runtime", "hip_runtime", "xpu_runtime",
        "privateuse1_runtime", "privateuse1_driver"}

for path in sys.argv[1:]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    launches = set()
    device = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e.get("cat") in HOST and "correlation" in args:
            launches.add(args["correlation"])
        elif e.get("cat") in DEVICE:
            device.append((e.get("cat"), e.get("name", ""), args.get("correlation")))
    unattributed = [d for d in device if d[2] is None or d[2] not in launches]
    kernels = [d for d in unattributed
               if d[0] in ("kernel", "Kernel") or (d[0] == "mtia_ccp_events" and not d[1].startswith("dma"))]
    print(json.dumps({"path": path, "device_work": len(device), "unattributed": len(unattributed),
                      "unattributed_kernels": len(kernels)}))
