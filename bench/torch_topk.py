"""sixfold.topk vs torch.topk and torch.sort + slice in the same process, on the same f32
tensors (GPU; --device cpu times torch's CPU topk instead). Workloads of the top-k issue: one
row of 1e8 (k 10, 1000, 100000) and 4096 rows of 32768 (k 8, 64, 1024), on random (normal),
sorted ascending, sorted descending and all-equal data. CUDA events, median of repeats; GB/s
counts one read of the input. Every sixfold result is checked against torch.topk's values and
(on the random data, where values are distinct) its indices.

    python3 bench/torch_topk.py [--device cuda|cpu] [--quick] [--json]
"""
import argparse
import json
import statistics
import time

import torch

import sixfold

ROW = [(1, 100_000_000, k) for k in (10, 1000, 100_000)]
BATCH = [(4096, 32768, k) for k in (8, 64, 1024)]


def make(kind, rows, n, device):
    if kind == "random":
        return torch.randn(rows, n, device=device)
    i = torch.arange(n, device=device, dtype=torch.float32).expand(rows, n).contiguous() * 0.25
    if kind == "ascending":
        return i
    if kind == "descending":
        return -i
    return torch.ones(rows, n, device=device)


def time_ms(fn, reps, device):
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="random data only, fewer repeats")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dev = args.device
    reps = 5 if dev == "cpu" else (10 if args.quick else 30)
    kinds = ["random"] if args.quick else ["random", "ascending", "descending", "all-equal"]
    rows_out = []
    for kind in kinds:
        shapes = ROW + BATCH if kind == "random" else [(1, 100_000_000, 1000), (4096, 32768, 64)]
        for rows, n, k in shapes:
            x = make(kind, rows, n, dev)
            v, i = sixfold.topk(x, k)
            tv, ti = torch.topk(x, k)
            ok = torch.equal(v, tv) and (kind != "random" or torch.equal(i, ti))
            if kind == "all-equal":  # torch.topk's choice among ties is not specified
                ok = torch.equal(v, tv) and torch.equal(i, torch.arange(k, device=dev).expand(rows, k))
            t_six = time_ms(lambda: sixfold.topk(x, k), reps, dev)
            t_topk = time_ms(lambda: torch.topk(x, k), reps, dev)
            t_sort = time_ms(lambda: torch.sort(x, dim=-1, descending=True, stable=True)[0][..., :k],
                             max(3, reps // 5), dev) if dev == "cuda" else float("nan")
            gbps = rows * n * 4 / (t_six * 1e-3) / 1e9
            r = dict(data=kind, rows=rows, n=n, k=k, sixfold_ms=t_six, torch_topk_ms=t_topk,
                     torch_sort_ms=t_sort, sixfold_gbps=gbps, vs_topk=t_topk / t_six,
                     vs_sort=t_sort / t_six, exact=ok)
            rows_out.append(r)
            if not args.json:
                print(f"{kind:10} {rows:5}x{n:<10} k={k:<7} sixfold {t_six:8.3f} ms ({gbps:7.1f} GB/s)  "
                      f"torch.topk {t_topk:8.3f} ms ({t_topk / t_six:5.1f}x)  "
                      f"torch.sort {t_sort:8.3f} ms ({t_sort / t_six:5.1f}x)  {'exact' if ok else 'MISMATCH'}",
                      flush=True)
            del x
    if args.json:
        print(json.dumps(dict(device=torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                              torch=torch.__version__, rows=rows_out), indent=1))


if __name__ == "__main__":
    main()
