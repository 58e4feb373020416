#!/usr/bin/env python3
"""Writes examples/traces/mlp-train.json: a small, made-up PyTorch profiler (Kineto)
trace of three training steps of a two-layer MLP on one GPU.

It has what real Kineto traces have, in miniature: ProfilerStep annotations, CPU ops
with a forward and a backward thread, CUDA runtime launches linked to kernels on a GPU
stream by `ac2g` flows, forward-to-backward `fwdbwd` flows, copies, a memset, a device
synchronisation, Python functions and `[memory]` allocator instants. The numbers are
deterministic; nothing here comes from a real run.
"""
import json
import os

PID, MAIN, BWD, DEVICE, STREAM = 4242, 4242, 4250, 0, 7
BASE_US = 3_605_057_436  # monotonic µs, as Kineto writes them; baseTimeNanoseconds gives Unix time

events = []
correlation = [1000]
external = [1]
flow_ids = [1]
allocated = [0]


def x(cat, name, ts, dur, tid=MAIN, pid=PID, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
          "ts": round(BASE_US + ts, 3), "dur": round(dur, 3)}
    if args:
        ev["args"] = args
    events.append(ev)
    return ev


def memory(ts, nbytes, tid=MAIN):
    allocated[0] += nbytes
    events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                   "pid": PID, "tid": tid, "ts": round(BASE_US + ts, 3),
                   "args": {"Device Type": 1, "Device Id": DEVICE, "Bytes": nbytes,
                            "Total Allocated": allocated[0], "Total Reserved": 1 << 26}})


def launch(ts, kernel, kernel_ts, kernel_dur, cat="kernel", runtime="cudaLaunchKernel", **kargs):
    corr = correlation[0]
    correlation[0] += 1
    x("cuda_runtime", runtime, ts, 4.125, correlation=corr, **{"External id": external[0]})
    x(cat, kernel, kernel_ts, kernel_dur, tid=STREAM, pid=DEVICE, device=DEVICE, stream=STREAM,
      correlation=corr, **{"External id": external[0]}, **kargs)
    events.append({"ph": "s", "id": corr, "pid": PID, "tid": MAIN, "ts": round(BASE_US + ts, 3),
                   "cat": "ac2g", "name": "ac2g"})
    events.append({"ph": "f", "id": corr, "pid": DEVICE, "tid": STREAM,
                   "ts": round(BASE_US + kernel_ts, 3), "cat": "ac2g", "name": "ac2g", "bp": "e"})


def op(name, ts, dur, tid=MAIN, dims=None, seq=None):
    args = {"External id": external[0], "Record function id": 0}
    if dims is not None:
        args["Input Dims"] = dims
        args["Input type"] = ["float"] * len(dims)
    if seq is not None:
        args["Sequence number"] = seq
    external[0] += 1
    return x("cpu_op", name, ts, dur, tid=tid, **args)


def fwdbwd(fwd_ts, bwd_ts):
    fid = flow_ids[0]
    flow_ids[0] += 1
    events.append({"ph": "s", "id": fid, "pid": PID, "tid": MAIN, "ts": round(BASE_US + fwd_ts, 3),
                   "cat": "fwdbwd", "name": "fwdbwd"})
    events.append({"ph": "f", "id": fid, "pid": PID, "tid": BWD, "ts": round(BASE_US + bwd_ts, 3),
                   "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"})


def step(k, t0):
    """One training step starting at t0 (µs from BASE_US); returns its end."""
    seq = 100 * k
    x("user_annotation", f"ProfilerStep#{k}", t0, 2000.0)
    x("python_function", "train.py(41): train_step", t0 + 1, 1990.0)
    # Input copy to the device.
    op("aten::to", t0 + 5, 60.5, dims=[[64, 784], []])
    launch(t0 + 20, "Memcpy HtoD (Pageable -> Device)", t0 + 30, 25.25, cat="gpu_memcpy",
           runtime="cudaMemcpyAsync", bytes=64 * 784 * 4)
    memory(t0 + 10, 64 * 784 * 4)
    t = t0 + 80
    fwd = []
    for layer, (n_in, n_out) in enumerate([(784, 256), (256, 10)]):
        lin = op("aten::linear", t, 120.0, dims=[[64, n_in], [n_out, n_in], [n_out]], seq=seq + layer)
        op("aten::addmm", t + 10, 100.0, dims=[[n_out], [64, n_in], [n_in, n_out]], seq=seq + layer)
        launch(t + 30, "volta_sgemm_64x64_nn", t + 60, 48.5 + 10 * layer,
               grid=[4, 16, 1], block=[256, 1, 1], **{"registers per thread": 126})
        memory(t + 20, 64 * n_out * 4)
        fwd.append(lin["ts"] - BASE_US)
        t += 130
        if layer == 0:
            op("aten::relu", t, 40.0, dims=[[64, n_out]], seq=seq + 10)
            launch(t + 10, "at::native::vectorized_elementwise_kernel<4, ReluFunctor>", t + 40, 6.0)
            t += 50
    op("aten::cross_entropy_loss", t, 150.0, dims=[[64, 10], [64]], seq=seq + 20)
    launch(t + 20, "at::native::cunn_SoftMaxForward<4, float>", t + 70, 12.75)
    t += 170
    # Backward on the autograd thread, linked to the forward ops.
    b = t
    x("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", b, 300.0, tid=BWD,
      **{"External id": external[0], "Sequence number": seq + 1})
    external[0] += 1
    for i, fwd_ts in enumerate(reversed(fwd)):
        op("AddmmBackward0", b + 10 + 140 * i, 120.0, tid=BWD, seq=seq + 1 - i)
        fwdbwd(fwd_ts, b + 10 + 140 * i)
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": PID, "tid": BWD, "ts": round(BASE_US + b + 30 + 140 * i, 3), "dur": 4.0,
                       "args": {"correlation": correlation[0]}})
        x("kernel", "volta_sgemm_128x64_nt", b + 60 + 140 * i, 70.25, tid=STREAM, pid=DEVICE,
          correlation=correlation[0], stream=STREAM, device=DEVICE)
        correlation[0] += 1
        memory(b + 40 + 140 * i, -64 * 256 * 4, tid=BWD)
    t = b + 320
    # Optimizer step: a memset of the gradients and a fused update kernel.
    op("Optimizer.step#SGD.step", t, 200.0, seq=seq + 30)
    launch(t + 20, "Memset (Device)", t + 40, 3.5, cat="gpu_memset", runtime="cudaMemsetAsync")
    launch(t + 60, "multi_tensor_apply_kernel<SGDFunctor>", t + 90, 35.0)
    x("cuda_sync", "cudaDeviceSynchronize", t + 150, 45.0)
    return t0 + 2100


def main():
    t = 0.0
    for k in range(1, 4):
        t = step(k, t)
    meta = [
        {"name": "process_name", "ph": "M", "ts": BASE_US, "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": BASE_US, "pid": PID, "tid": 0, "args": {"labels": "CPU"}},
        {"name": "process_name", "ph": "M", "ts": BASE_US, "pid": DEVICE, "tid": 0, "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": BASE_US, "pid": DEVICE, "tid": 0, "args": {"labels": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "ts": BASE_US, "pid": PID, "tid": MAIN, "args": {"name": "thread 4242 (python)"}},
        {"name": "thread_name", "ph": "M", "ts": BASE_US, "pid": PID, "tid": BWD, "args": {"name": "thread 4250 (pt_autograd_0)"}},
        {"name": "thread_name", "ph": "M", "ts": BASE_US, "pid": DEVICE, "tid": STREAM, "args": {"name": "stream 7"}},
    ]
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Example GPU (made up)", "totalGlobalMem": 17071734784,
                              "computeMajor": 7, "computeMinor": 0, "numSms": 80}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": meta + events,
        "traceName": "mlp-train (synthetic example)",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000 - 1_700_000_000_000_000_000 % 10**9,
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces", "mlp-train.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(doc['traceEvents'])} events")


if __name__ == "__main__":
    main()
