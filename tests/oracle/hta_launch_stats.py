"""HTA's CUDA kernel launch statistics (`get_cuda_kernel_launch_stats`, runtime_cutoff 50,
launch_delay_cutoff 100, memory events included) for a folder's first rank, as JSON:
the launches HTA pairs with their work, its short kernels (launch call ≤ 50 µs and
work shorter than the call), runtime outliers (call > 50 µs) and launch-delay outliers
(> 100 µs). HTA leaves out the work of the last profiler step (its default).

    python hta_launch_stats.py TRACE_DIR
"""

import json
import sys

from hta_quiet import first_rank, stdout_to_stderr


def main():
    with stdout_to_stderr():
        ta, rank = first_rank(sys.argv[1])
        stats = ta.get_cuda_kernel_launch_stats(ranks=[rank], runtime_cutoff=50,
                                                launch_delay_cutoff=100,
                                                include_memory_events=True, visualize=False)
    df = stats[rank]
    print(json.dumps({
        "launched": len(df),
        "short": int(((df.cpu_duration <= 50) & (df.gpu_duration < df.cpu_duration)).sum()),
        "runtime_outliers": int((df.cpu_duration > 50).sum()),
        "delay_outliers": int((df.launch_delay > 100).sum()),
    }))


if __name__ == "__main__":
    main()
