"""Call overhead of a tiny sixfold op from Python (CPU): the time of inclusive_scan on 16 floats,
with out= and with the output allocated by sixfold, against numpy.cumsum on the same array.
With torch and a GPU also the host time of one CUDA call (a tiny decode attention, queued
without synchronizing: what an idle GPU waits for per call) against torch's SDPA, and its parts.

    python3 bench/python_overhead.py [--json]
"""
import json
import sys
import timeit

import numpy as np

import sixfold


def per_call_us(stmt, number=20000, repeat=7):
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e6


def main():
    x = np.random.default_rng().uniform(-1, 1, 16).astype(np.float32)
    out = np.empty_like(x)
    rows = {
        "sixfold.inclusive_scan(x, out=out)": per_call_us(lambda: sixfold.inclusive_scan(x, out=out)),
        "sixfold.inclusive_scan(x)": per_call_us(lambda: sixfold.inclusive_scan(x)),
        "sixfold._C.inclusive_scan (binding only)": per_call_us(lambda: sixfold._C.inclusive_scan(x, out, "sum", 0)),
        "numpy.cumsum(x, out=out)": per_call_us(lambda: np.cumsum(x, out=out)),
    }
    cuda_rows = cuda_call_rows()
    if "--json" in sys.argv:
        print(json.dumps({"unit": "us_per_call", "n": 16, "rows": rows, "cuda_rows": cuda_rows}, indent=2))
        return
    print(f"{'call (16 f32, CPU)':<44} {'us/call':>8}")
    for k, v in rows.items():
        print(f"{k:<44} {v:>8.2f}")
    if cuda_rows:
        print(f"{'host time per CUDA call (decode b1 h8/1 kv256)':<52} {'us/call':>8}")
        for k, v in cuda_rows.items():
            print(f"{k:<52} {v:>8.2f}")


def cuda_call_rows():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    q = torch.randn(1, 8, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 1, 256, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(q)

    def host_us(fn, number=2000, repeat=5):
        best = float("inf")
        for _ in range(repeat):
            torch.cuda.synchronize()
            best = min(best, timeit.timeit(fn, number=number) / number * 1e6)
        torch.cuda.synchronize()
        return best

    stream = sixfold._stream(q, None)
    rows = norm_train_rows(torch, F, host_us)
    return rows | {
        "sixfold.attention(q, k, v, out=out)": host_us(lambda: sixfold.attention(q, k, v, out=out)),
        "sixfold._C.attention (binding only)": host_us(
            lambda: sixfold._C.attention(q, k, v, out, None, 0.0, False, -1, -1, stream)),
        "sixfold._stream(q) (raw current stream)": host_us(lambda: sixfold._stream(q, None)),
        "torch.cuda.current_stream().cuda_stream": host_us(lambda: torch.cuda.current_stream(q.device).cuda_stream),
        "q.__dlpack__()": host_us(lambda: q.__dlpack__()),
        "F.scaled_dot_product_attention(enable_gqa)": host_us(
            lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
    }


def norm_train_rows(torch, F, host_us):
    """Host time of an RMSNorm training step on a tiny bf16 CUDA tensor (8 x 1024): the kernels
    are ~µs, so this is what a step pays on the host — sixfold.torch's autograd path, its parts,
    and F.rms_norm's."""
    import sixfold.torch as st

    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    xd, wd = x.detach(), w.detach()
    out, rstd = torch.empty_like(xd), torch.empty(8, device="cuda")
    dx, dw = torch.empty_like(xd), torch.empty_like(wd)
    s = sixfold._stream(xd, None)
    return {
        "norm step: sixfold.torch.rms_norm fwd+bwd": host_us(
            lambda: torch.autograd.grad(st.rms_norm(x, w, 1e-6), (x, w), dy)),
        "norm step: torch.ops.sixfold.rms_norm fwd+bwd": host_us(
            lambda: torch.autograd.grad(torch.ops.sixfold.rms_norm(x, w, 1e-6), (x, w), dy)),
        "norm step: F.rms_norm fwd+bwd": host_us(lambda: torch.autograd.grad(F.rms_norm(x, (1024,), w, 1e-6),
                                                                          (x, w), dy)),
        "norm: sixfold._C.rms_norm (binding, 4 arrays)": host_us(
            lambda: sixfold._C.rms_norm(xd, wd, out, 1e-6, s, rstd)),
        "norm: sixfold._C.rms_norm_backward (binding, 6 arrays)": host_us(
            lambda: sixfold._C.rms_norm_backward(dy, xd, wd, dx, dw, 1e-6, s, rstd)),
        "norm: sixfold._C.rms_norm_backward without dweight": host_us(
            lambda: sixfold._C.rms_norm_backward(dy, xd, wd, dx, None, 1e-6, s, rstd)),
        "norm: F.rms_norm forward": host_us(lambda: F.rms_norm(xd, (1024,), wd, 1e-6)),
    }


if __name__ == "__main__":
    main()
