"""Independent count of GPU work and of the GPU work whose launch is not in the trace.

Kineto traces: an event is GPU work by its category, and it is attributed when a host
runtime or driver event of the same file has the same `correlation` id.
TensorFlow timelines: GPU work is what the `/gpu:N/stream:K` (not `stream:all`) and
`/gpu:N/memcpy` lanes hold, and it is attributed when an op on a `/job:...` lane has the
same graph node name (`args.name`).

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
    processes = {e.get("pid"): str(e.get("args", {}).get("name", ""))
                 for e in events
                 if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name"}
    if any(n.startswith("/job:") or n.startswith("/gpu:") for n in processes.values()):
        def lane(e):
            return processes.get(e.get("pid"), "").lower()
        ops = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
        nodes = {str(e.get("args", {}).get("name")) for e in ops if lane(e).startswith("/job:")}
        device = [e for e in ops
                  if ("/stream:" in lane(e) and "/stream:all" not in lane(e)) or "/memcpy" in lane(e)]
        unattributed = [e for e in device if str(e.get("args", {}).get("name")) not in nodes]
        kernels = [e for e in unattributed if "MEMCPY" not in str(e.get("name", "")).upper()
                   and "/memcpy" not in lane(e)]
        print(json.dumps({"path": path, "device_work": len(device), "unattributed": len(unattributed),
                          "unattributed_kernels": len(kernels)}))
        continue
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
