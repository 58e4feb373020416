"""A CUDA process that ends with `os._exit` (as multiprocessing's workers and some
serving frameworks do), so no exit handler runs: loads the injection as cuInit does,
makes one launch the stand-in libcupti records, and leaves at once."""
import ctypes
import os

ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection()
cupti = ctypes.CDLL("libcupti.so.12")
cupti.stand_in_cupti_now_us.restype = ctypes.c_uint64
now = cupti.stand_in_cupti_now_us()
cupti.stand_in_cupti_add(f"runtime cbid=211 corr=1 start={now} end={now + 1}".encode())
cupti.stand_in_cupti_add(f"kernel name=k_exit stream=7 corr=1 start={now + 2} end={now + 4}".encode())
print("leaving", flush=True)
os._exit(0)
