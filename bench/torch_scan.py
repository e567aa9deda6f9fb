"""sixfold vs PyTorch's own kernels, same process, same tensors: prefix sum (torch.cumsum) and
sum (torch.sum) of 1e8 f32 on the GPU (and, with --cpu, on the CPU). CUDA events, warm-up, median
of repeats; inputs (400 MB) exceed the L2 cache.

    python3 bench/torch_scan.py [--n N] [--cpu] [--json]
"""
import argparse
import json
import statistics
import time

import torch

import sixfold


def time_ms(fn, device, reps=30, warmup=5):
    for _ in range(warmup):
        fn()
    ts = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
    else:
        for _ in range(max(3, reps // 10)):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000_000)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    devices = (["cuda"] if torch.cuda.is_available() else []) + (["cpu"] if args.cpu or not torch.cuda.is_available() else [])
    rows = []
    for dev in devices:
        x = torch.rand(args.n, device=dev) * 2 - 1
        out = torch.empty_like(x)
        r = torch.empty((), device=dev)
        ref = torch.cumsum(x.double(), 0)
        cases = [
            ("scan", "torch.cumsum", lambda: torch.cumsum(x, 0, out=out), 8.0),
            ("scan", "sixfold.inclusive_scan", lambda: sixfold.inclusive_scan(x, out=out), 8.0),
            ("reduce", "torch.sum", lambda: torch.sum(x, 0, out=r), 4.0),
            ("reduce", "sixfold.reduce", lambda: sixfold.reduce(x, out=r), 4.0),
        ]
        for op, name, fn, bytes_per in cases:
            ms = time_ms(fn, dev)
            fn()
            if dev == "cuda":
                torch.cuda.synchronize()
            got = out.double() if op == "scan" else r.double()
            want = ref if op == "scan" else ref[-1]
            err = ((got - want).abs().max() / want.abs().max()).item()
            rows.append({"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "op": op,
                         "impl": name, "n": args.n, "median_ms": ms,
                         "gbps": bytes_per * args.n / ms / 1e6, "max_rel_error": err})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'device':<14} {'op':<7} {'impl':<24} {'median ms':>10} {'GB/s':>8} {'max rel err':>12}")
    for r in rows:
        print(f"{r['device'][:14]:<14} {r['op']:<7} {r['impl']:<24} {r['median_ms']:>10.3f} {r['gbps']:>8.1f} {r['max_rel_error']:>12.2e}")


if __name__ == "__main__":
    main()
