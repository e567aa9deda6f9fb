"""sixfold's fused norms vs PyTorch in the same process, on the same bf16 tensors (GPU):
eager torch.nn.functional (rms_norm / layer_norm / softmax), the same under torch.compile, and
the unfused eager chain. Inputs rotate among copies totalling > 2x the L2 cache; CUDA events;
median of repeats. GB/s counts one read of x and one write of y.

    python3 bench/torch_norm.py [--json]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import sixfold

SHAPES = [(16384, 8192), (4096, 4096), (65536, 1024), (256, 262144), (32, 1048576)]


def time_ms(fn, xs, reps=40, warmup=5):
    for i in range(warmup):
        fn(xs[i % len(xs)])
    torch.cuda.synchronize()
    ts = []
    for i in range(reps):
        x = xs[i % len(xs)]
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(x)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def eager_rms(x, w, eps):  # the unfused chain: one pass per operation
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def main():
    # Each shape compiles its own static graph: with automatic dynamic shapes, torch.compile
    # would recompile the lambdas for the later shapes as shape-generic (slower) kernels.
    torch._dynamo.config.cache_size_limit = 64
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    l2 = 60 << 20
    for r, n in SHAPES:
        nbytes = r * n * 2
        copies = max(1, -(-2 * l2 // nbytes))
        xs = [torch.randn(r, n, device="cuda", dtype=torch.bfloat16) * 2 + 0.5 for _ in range(copies)]
        w = (torch.randn(n, device="cuda") * 0.1 + 1).bfloat16()
        b = (torch.randn(n, device="cuda") * 0.1).bfloat16()
        shape = (n,)
        c_rms = torch.compile(lambda x: F.rms_norm(x, shape, w, 1e-6), dynamic=False)
        c_ln = torch.compile(lambda x: F.layer_norm(x, shape, w, b, 1e-5), dynamic=False)
        c_sm = torch.compile(lambda x: torch.softmax(x, -1), dynamic=False)
        impls = {
            "rms_norm": [("sixfold", lambda x: sixfold.rms_norm(x, w, eps=1e-6)),
                         ("F.rms_norm", lambda x: F.rms_norm(x, shape, w, 1e-6)),
                         ("torch.compile", c_rms), ("eager chain", lambda x: eager_rms(x, w, 1e-6))],
            "layer_norm": [("sixfold", lambda x: sixfold.layer_norm(x, w, b, eps=1e-5)),
                           ("F.layer_norm", lambda x: F.layer_norm(x, shape, w, b, 1e-5)),
                           ("torch.compile", c_ln)],
            "softmax": [("sixfold", lambda x: sixfold.softmax(x)),
                        ("torch.softmax", lambda x: torch.softmax(x, -1)), ("torch.compile", c_sm)],
        }
        for op, lst in impls.items():
            res = {}
            for name, fn in lst:
                ms = time_ms(fn, xs)
                res[name] = ms
                rows.append({"op": op, "shape": f"{r}x{n}", "impl": name, "median_ms": ms,
                             "gbps": 2 * nbytes / ms / 1e6})
            best_peer = min(v for k, v in res.items() if k != "sixfold")
            rows.append({"op": op, "shape": f"{r}x{n}", "impl": "ratio sixfold/best peer",
                         "median_ms": None, "gbps": best_peer / res["sixfold"]})
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2))
        return
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'op':<11} {'shape':<12} {'impl':<24} {'median ms':>10} {'GB/s':>8}")
    for r in rows:
        if r["median_ms"] is None:
            print(f"{r['op']:<11} {r['shape']:<12} {r['impl']:<24} {'':>10} {r['gbps']:>7.2f}x")
        else:
            print(f"{r['op']:<11} {r['shape']:<12} {r['impl']:<24} {r['median_ms']:>10.4f} {r['gbps']:>8.0f}")


if __name__ == "__main__":
    main()
