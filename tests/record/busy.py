"""Busy on its main thread for argv[2] seconds beside 3 waiting threads, holding about
200 MB it touched; writes its own account to argv[1]: pid, thread count, VmRSS and
VmHWM in bytes, and its CPU seconds over the busy spell with that spell's length."""

import json
import os
import sys
import threading
import time

stop = threading.Event()
waiting = [threading.Thread(target=stop.wait) for _ in range(3)]
for t in waiting:
    t.start()
block = bytearray(200 << 20)
for i in range(0, len(block), 4096):  # bytearray's pages are zero and untouched
    block[i] = 1
wall, cpu = time.monotonic(), time.process_time()
end = wall + float(sys.argv[2])
while time.monotonic() < end:
    pass
wall, cpu = time.monotonic() - wall, time.process_time() - cpu
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
account = {
    "pid": os.getpid(),
    "threads": len(os.listdir("/proc/self/task")),
    "rss": int(status["VmRSS"].split()[0]) * 1024,
    "hwm": int(status["VmHWM"].split()[0]) * 1024,
    "busy_cpu_s": cpu,
    "busy_wall_s": wall,
}
stop.set()
for t in waiting:
    t.join()
with open(sys.argv[1], "w") as out:
    json.dump(account, out)
