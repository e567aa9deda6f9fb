"""Nsight Compute target: torch.compile's forward kernels (rms_norm / layer_norm / softmax, bf16)
on the shapes given, one profiled call each between cudaProfilerStart / Stop (compilation and
warm-up outside), so that `ncu --profile-from-start off` sees exactly the peer's kernels.

    ncu --profile-from-start off ... python3 dev/norm/ncu_torch_fwd.py 65536x1024 4096x4096
"""
import sys

import torch
import torch.nn.functional as F


def main():
    shapes = [tuple(int(v) for v in s.split("x")) for s in (sys.argv[1:] or ["65536x1024"])]
    for rows, n in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
        ops = {
            "rms_norm": torch.compile(lambda x, w: F.rms_norm(x, (n,), w, 1e-6)),
            "layer_norm": torch.compile(lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5)),
            "softmax": torch.compile(lambda x: torch.softmax(x, -1)),
        }
        args = {"rms_norm": (x, w), "layer_norm": (x, w, b), "softmax": (x,)}
        for name, fn in ops.items():
            for _ in range(3):
                fn(*args[name])
            torch.cuda.synchronize()
            print(f"profiling {name} {rows}x{n}", flush=True)
            torch.cuda.cudart().cudaProfilerStart()
            fn(*args[name])
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
