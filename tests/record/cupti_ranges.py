"""A CUDA program's part for `record --cupti` against the stand-in libcupti: loads the
injection as cuInit does, then makes API calls inside nested NVTX ranges, on two
threads, each queuing a kernel (the stand-in records what the driver would tell
libcupti), and the kernels end after all the calls, as queued work does. Prints, per
call's correlation id, the innermost range it was made in (null: none)."""
import ctypes
import json
import os
import threading

import nvtx

ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection()
cupti = ctypes.CDLL("libcupti.so.12")
cupti.stand_in_cupti_now_ns.restype = ctypes.c_uint64
made_in = {}


def launch(correlation, range_name):
    # In ns, as libcupti times calls: a call inside a short range ends inside it.
    now = cupti.stand_in_cupti_now_ns()
    line = f"runtime cbid=211 corr={correlation} start_ns={now} end_ns={now + 100}"
    cupti.stand_in_cupti_add(line.encode())
    made_in[correlation] = range_name


with nvtx.annotate("outer"):
    launch(1, "outer")
    with nvtx.annotate("inner"):
        launch(2, "inner")
    launch(3, "outer")
launch(4, None)


def worker():
    with nvtx.annotate("worker"):
        launch(5, "worker")


thread = threading.Thread(target=worker)
thread.start()
thread.join()

for correlation in sorted(made_in):
    now = cupti.stand_in_cupti_now_ns()
    line = f"kernel name=k{correlation} stream=7 corr={correlation} start_ns={now} end_ns={now + 2000}"
    cupti.stand_in_cupti_add(line.encode())
print(json.dumps(made_in))
