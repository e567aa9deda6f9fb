"""What torch.compile runs for the long-row norms (32 x 1048576 bf16 by default): each compiled
chain's kernels with their CUDA times from torch.profiler, the bytes each would move at least, and
(with TORCH_LOGS=output_code in the environment) Inductor's generated Triton source on stderr.

    TORCH_LOGS=output_code python3 dev/norm/inductor_probe.py [--shape 32x1048576] 2> code.txt
"""
import argparse

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def chains(n, w, b):
    shape = (n,)

    def add_rms(x, r):
        s = x + r
        return F.rms_norm(s, shape, w, 1e-6), s

    def add_ln(x, r):
        s = x + r
        return F.layer_norm(s, shape, w, b, 1e-5), s

    return {
        "rms_norm": lambda x, r: F.rms_norm(x, shape, w, 1e-6),
        "layer_norm": lambda x, r: F.layer_norm(x, shape, w, b, 1e-5),
        "add_rms_norm": add_rms,
        "add_layer_norm": add_ln,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="32x1048576")
    p.add_argument("--only", default="rms_norm,add_rms_norm,add_layer_norm")
    args = p.parse_args()
    rows, n = (int(v) for v in args.shape.split("x"))
    dev = torch.device("cuda")
    w = torch.randn(n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, device=dev, dtype=torch.bfloat16)
    x = torch.randn(rows, n, device=dev, dtype=torch.bfloat16)
    r = torch.randn_like(x)
    for name, fn in chains(n, w, b).items():
        if name not in args.only.split(","):
            continue
        c = torch.compile(fn, dynamic=False)
        for _ in range(5):
            c(x, r)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                c(x, r)
            torch.cuda.synchronize()
        print(f"== {name} {args.shape} bf16: CUDA kernels, mean over 20 calls")
        total = 0.0
        for e in prof.key_averages():
            if e.device_type.name != "CUDA" or e.count == 0:
                continue
            us = e.device_time_total / e.count
            total += us * e.count / 20
            print(f"  {us:9.2f} us x{e.count // 20}  {e.key[:110]}")
        print(f"  total {total:.2f} us a call")


if __name__ == "__main__":
    main()
