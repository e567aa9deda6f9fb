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
    return {
        "sixfold.attention(q, k, v, out=out)": host_us(lambda: sixfold.attention(q, k, v, out=out)),
        "sixfold._C.attention (binding only)": host_us(
            lambda: sixfold._C.attention(q, k, v, out, None, 0.0, False, -1, -1, stream)),
        "sixfold._stream(q) (raw current stream)": host_us(lambda: sixfold._stream(q, None)),
        "torch.cuda.current_stream().cuda_stream": host_us(lambda: torch.cuda.current_stream(q.device).cuda_stream),
        "q.__dlpack__()": host_us(lambda: q.__dlpack__()),
        "F.scaled_dot_product_attention(enable_gqa)": host_us(
            lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
    }


if __name__ == "__main__":
    main()
