"""C calling back into Python (each call of `compare` long enough, ~1 ms, for both
samplers to find the thread in it): `sort_in_c` hands libc's `qsort` (through ctypes and
libffi) a Python `compare`, so a sample inside `compare` has native frames between two
runs of the interpreter: sort_in_c → PyCFuncPtr_call → … → qsort_r → … →
_CallPythonObject → compare."""
import ctypes, ctypes.util, os, random
libc = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))

def compare(a, b):
    x = 0
    for i in range(20_000):
        x += i
    return a[0] - b[0]

def sort_in_c(n):
    arr = (ctypes.c_int * n)(*[random.randrange(10**6) for _ in range(n)])
    libc.qsort(arr, n, ctypes.sizeof(ctypes.c_int), CMP(compare))

def main():
    for _ in range(int(os.environ.get("STACKS_CALLBACK_ROUNDS", "6"))):
        sort_in_c(100)

main()
