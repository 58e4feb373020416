"""The torch part of the GPU check: a small training loop on the GPU, run plainly (for
`opscope record --cupti` to record) or under torch.profiler (its own Chrome trace
written), so that the kernels opscope records can be compared with torch.profiler's.

    torch_check.py plain
    torch_check.py profiled TRACE.json
    torch_check.py kernels TRACE.json     the trace's kernels: `COUNT TOTAL_NS NAME` lines
    torch_check.py stats STATS.json       the same of `opscope stats kernel --format json`
    torch_check.py compare OURS THEIRS    two such tables: exit 1 where counts differ

Both runs launch the same kernels: the whole program, model made and data moved
included, runs inside the profiler in the second. Prints `steps N` when it ran.
"""
import json
import sys
from collections import defaultdict


def train(profiled_to=None):
    import torch

    if not torch.cuda.is_available():
        print("error no CUDA device for torch", flush=True)
        sys.exit(3)

    def run():
        torch.manual_seed(0)
        device = torch.device("cuda")
        model = torch.nn.Sequential(
            torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
        ).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(256, 512, device=device)
        y = torch.randint(0, 10, (256,), device=device)
        steps = 20
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        torch.cuda.synchronize()
        return steps

    if profiled_to is None:
        steps = run()
    else:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            steps = run()
        prof.export_chrome_trace(profiled_to)
    print("steps", steps, flush=True)


def kernels(trace_path):
    """Kernel count and total time by name in a Chrome trace (torch.profiler's)."""
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    table = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            row = table[e["name"]]
            row[0] += 1
            row[1] += float(e.get("dur", 0)) * 1000.0
    for name, (count, total_ns) in sorted(table.items()):
        print(count, round(total_ns), name)


def stats(stats_path):
    """The same table of opscope's `stats kernel --format json`."""
    with open(stats_path) as f:
        rows = json.load(f)
    for row in sorted(rows, key=lambda r: r["name"]):
        print(row["instances"], round(row["total_ns"]), row["name"])


def read_table(path):
    table = {}
    with open(path) as f:
        for line in f:
            count, total_ns, name = line.rstrip("\n").split(" ", 2)
            table[name] = (int(count), float(total_ns))
    return table


def compare(ours_path, theirs_path):
    ours, theirs = read_table(ours_path), read_table(theirs_path)
    n_ours = sum(c for c, _ in ours.values())
    n_theirs = sum(c for c, _ in theirs.values())
    differ = sorted(
        (name, ours.get(name, (0, 0))[0], theirs.get(name, (0, 0))[0])
        for name in set(ours) | set(theirs)
        if ours.get(name, (0, 0))[0] != theirs.get(name, (0, 0))[0]
    )
    if not differ and n_ours > 0:
        print(
            f"ok    torch: {n_ours} kernels of {len(ours)} names recorded, each name as "
            f"often as torch.profiler saw it"
        )
        return 0
    print(
        f"FAIL  torch: {n_ours} kernels recorded, torch.profiler saw {n_theirs}; "
        f"{len(differ)} names differ in count"
    )
    for name, a, b in differ[:10]:
        print(f"      {a:6d} recorded, {b:6d} by torch.profiler: {name}")
    return 1


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "plain":
        train()
    elif mode == "profiled":
        train(sys.argv[2])
    elif mode == "kernels":
        kernels(sys.argv[2])
    elif mode == "stats":
        stats(sys.argv[2])
    elif mode == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
