"""sixfold.selective_scan vs PyTorch in the same process, on the same f32 CUDA tensors: Mamba's
configuration (input-dependent B and C, one group, D, z, delta_bias with softplus).

Peers:
  * step loop: mamba-ssm's reference loop in eager PyTorch (Δ·A and Δ·B·u materialized, one
    update of the (batch, d, n) state per step);
  * associative_scan: torch._higher_order_ops.associative_scan over the affine pairs
    (exp(ΔA), ΔBu), the whole op (softplus, discretization, scan, C contraction, D, silu(z))
    under torch.compile — and the scan alone on pre-materialized pairs, as BENCH.md quotes it.
CUDA events, median of repeats after warm-up (compilation excluded). GB/s counts the minimum
bytes: u, Δ, z, B, C read once and out written once.

    python3 bench/torch_selective_scan.py [--shapes 0,1,2] [--json FILE]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import sixfold

SHAPES = [(1, 2048, 4096, 16), (8, 4096, 2048, 16), (4, 8192, 1536, 64)]  # (batch, L, d, n)


def time_ms(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
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


def discretize(u, delta, A, B, delta_bias):
    dt = F.softplus(delta + delta_bias[None, :, None])                    # (b, d, L)
    dA = torch.exp(dt[:, :, None, :] * A[None, :, :, None])               # (b, d, n, L)
    dBu = (dt * u)[:, :, None, :] * B                                      # B: (b, 1, n, L)
    return dA, dBu


def finish(h, u, C, D, z):
    y = (h * C).sum(2) + D[None, :, None] * u                              # (b, d, L)
    return y * F.silu(z)


def step_loop(u, delta, A, B, C, D, z, delta_bias):
    dA, dBu = discretize(u, delta, A, B, delta_bias)
    h = torch.zeros(u.shape[0], u.shape[1], A.shape[1], device=u.device)
    ys = []
    for t in range(u.shape[2]):
        h = dA[..., t] * h + dBu[..., t]
        ys.append((h * C[:, :, :, t]).sum(-1))                             # C: (b, 1, n, L)
    y = torch.stack(ys, dim=2) + D[None, :, None] * u
    return y * F.silu(z)


def combine(x, y):  # (a1, b1) then (a2, b2): h -> a2 (a1 h + b1) + b2
    return x[0] * y[0], y[0] * x[1] + y[1]


def assoc_full(u, delta, A, B, C, D, z, delta_bias):
    from torch._higher_order_ops.associative_scan import associative_scan
    dA, dBu = discretize(u, delta, A, B, delta_bias)
    _, h = associative_scan(combine, (dA, dBu), dim=3, combine_mode="pointwise")
    return finish(h, u, C, D, z)


def assoc_scan_only(dA, dBu):
    from torch._higher_order_ops.associative_scan import associative_scan
    return associative_scan(combine, (dA, dBu), dim=3, combine_mode="pointwise")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="0,1,2")
    ap.add_argument("--json", default=None)
    ap.add_argument("--step-loop-max-L", type=int, default=8192)
    args = ap.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    torch.manual_seed(0)
    rows = []
    dev = "cuda"
    for i in (int(s) for s in args.shapes.split(",")):
        b, L, d, n = SHAPES[i]
        label = f"b{b} L{L} d{d} n{n}"
        u = torch.rand(b, d, L, device=dev) * 4 - 2
        delta = torch.rand(b, d, L, device=dev) * 5 - 5
        z = torch.rand(b, d, L, device=dev) * 6 - 3
        B = torch.rand(b, 1, n, L, device=dev) * 2 - 1
        C = torch.rand(b, 1, n, L, device=dev) * 2 - 1
        A = -(torch.rand(d, n, device=dev) * 7.5 + 0.5)
        D = torch.rand(d, device=dev) * 2 - 1
        bias = torch.rand(d, device=dev) * 2 - 1
        args_ = (u, delta, A, B, C, D, z, bias)
        nbytes = 4 * (4 * b * d * L + 2 * b * n * L)
        res = {}
        out_sf = sixfold.selective_scan(u, delta, A, B, C, D, z, bias, True)
        res["sixfold"] = time_ms(lambda: sixfold.selective_scan(u, delta, A, B, C, D, z, bias, True, out=out_sf), 20)
        errs = {}
        if L <= args.step_loop_max_L:
            ref = step_loop(*args_)
            res["step loop (eager)"] = time_ms(lambda: step_loop(*args_), 3, warmup=1)
            errs["sixfold vs step loop"] = ((out_sf - ref).abs().max() / ref.abs().max()).item()
            del ref
        try:
            t0 = time.time()
            full = torch.compile(assoc_full, fullgraph=True, dynamic=False)
            y = full(*args_)
            torch.cuda.synchronize()
            compile_s = time.time() - t0
            res["associative_scan, whole op (compiled)"] = time_ms(lambda: full(*args_), 10)
            errs["sixfold vs associative_scan"] = ((out_sf - y).abs().max() / y.abs().max()).item()
            del y
            dA, dBu = discretize(u, delta, A, B, bias)
            only = torch.compile(assoc_scan_only, fullgraph=True, dynamic=False)
            only(dA, dBu)
            res["associative_scan, scan only (compiled)"] = time_ms(lambda: only(dA, dBu), 10)
            del dA, dBu
            print(f"# {label}: torch.compile took {compile_s:.1f} s (excluded)", flush=True)
        except Exception as e:  # report, keep the other rows
            print(f"# {label}: associative_scan failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        torch.cuda.empty_cache()
        for name, ms in res.items():
            rows.append({"shape": label, "impl": name, "median_ms": ms, "gbps": nbytes / ms / 1e6,
                         "sixfold_speedup": ms / res["sixfold"]})
        for k, v in errs.items():
            rows.append({"shape": label, "impl": "max rel diff " + k, "median_ms": None, "gbps": None,
                         "sixfold_speedup": v})
        for r in rows[-len(res) - len(errs):]:
            if r["median_ms"] is None:
                print(f"{r['shape']:22s} {r['impl']:44s} {r['sixfold_speedup']:.2e}", flush=True)
            else:
                print(f"{r['shape']:22s} {r['impl']:44s} {r['median_ms']:10.3f} ms {r['gbps']:8.1f} GB/s "
                      f"sixfold {r['sixfold_speedup']:8.1f}x", flush=True)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
