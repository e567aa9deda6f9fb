"""sixfold's fused activations vs PyTorch on the same tensors (GPU; bf16, or --dtype f16 / f32): bias+GELU (erf and tanh
forms) against F.gelu(x + b) eager and under torch.compile, SiLU-gate against F.silu(a) * b.
Inputs rotate through enough copies to pass 4x a 50 MB L2; timing as bench/torch_norm.py (events
around a batch of calls, or with --graph their replay from one CUDA graph); median of 40. GB/s
counts each input read once and the output written once; "% copy" divides by a 1 GiB copy-class
kernel (torch.neg into another tensor: y.copy_(x) is a cudaMemcpyAsync, ~2.7 TB/s on the H200
against ~4.2 TB/s for a copy kernel) timed in the same process, or by --copy-gbps.

    python3 bench/torch_activation.py [--shapes 16384x8192,4096x4096,65536x1024] [--graph]
        [--sixfold-only] [--env NAME=V1,V2,...] [--dtype bf16|f16|f32]

--env adds sixfold rows with the environment variable NAME set to each value (development knobs
such as SIXFOLD_ACT_ROWS, read on every call); --sixfold-only leaves the PyTorch rows out.
"""
import argparse
import contextlib
import os

import torch
import torch.nn.functional as F

import sixfold
import torch_norm  # time_ms: the same timing as the norms' side-by-side

SHAPES = [(16384, 8192), (4096, 4096), (65536, 1024)]
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


@contextlib.contextmanager
def env_set(var, value):
    """The environment variable `var` set to `value` for the block (var None: nothing set)."""
    if var is None:
        yield
        return
    saved = os.environ.get(var)
    os.environ[var] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[var]
        else:
            os.environ[var] = saved


def copy_gbps():
    x = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16)  # 1 GiB
    y = torch.empty_like(x)
    ms = torch_norm.time_ms(lambda _: torch.neg(x, out=y), [None])
    return 2 * x.numel() * 2 / ms / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="")
    ap.add_argument("--graph", action="store_true", help="replay the calls from a CUDA graph")
    ap.add_argument("--copy-gbps", type=float, default=0.0, help="the copy ceiling (default: measured)")
    ap.add_argument("--sixfold-only", action="store_true", help="no PyTorch rows")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--env", default="", help="NAME=V1,V2: extra sixfold rows with NAME set to each value")
    args = ap.parse_args()
    torch_norm.GRAPH = args.graph
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    ceiling = args.copy_gbps or copy_gbps()
    dt = DTYPES[args.dtype]
    esize = torch.empty(0, dtype=dt).element_size()
    print(f"device: {torch.cuda.get_device_name()}, {args.dtype}, {'graph replay' if args.graph else 'batches of calls'}; "
          f"copy ceiling {ceiling:.0f} GB/s")
    print(f"{'op':<10} {'shape':<12} {'impl':<22} {'median ms':>10} {'GB/s':>8} {'% copy':>7}")
    for r, n in shapes:
        copies = max(2, -(-(200 << 20) // (2 * r * n * esize)))
        sets = [(torch.randn(r, n, device="cuda", dtype=dt),
                 torch.randn(r, n, device="cuda", dtype=dt)) for _ in range(copies)]
        bias = torch.randn(n, device="cuda", dtype=dt)
        c_gelu = torch.compile(lambda x: F.gelu(x + bias), dynamic=False)
        c_gelu_tanh = torch.compile(lambda x: F.gelu(x + bias, approximate="tanh"), dynamic=False)
        c_silu = torch.compile(lambda a, b: F.silu(a) * b, dynamic=False)
        rows = [
            # (op, impl, call, tensors of r x n read or written); torch.neg: this shape's own ceiling
            ("copy", "torch.neg (copy class)", lambda s: torch.neg(s[0]), 2),
            ("bias_gelu", "sixfold", lambda s: sixfold.bias_gelu(s[0], bias), 2),
            ("bias_gelu", "eager F.gelu(x+b)", lambda s: F.gelu(s[0] + bias), 2),
            ("bias_gelu", "torch.compile", lambda s: c_gelu(s[0]), 2),
            ("gelu_tanh", "sixfold", lambda s: sixfold.bias_gelu(s[0], bias, approximate="tanh"), 2),
            ("gelu_tanh", "torch.compile", lambda s: c_gelu_tanh(s[0]), 2),
            ("silu_gate", "sixfold", lambda s: sixfold.silu_gate(s[0], s[1]), 3),
            ("silu_gate", "eager F.silu(a)*b", lambda s: F.silu(s[0]) * s[1], 3),
            ("silu_gate", "torch.compile", lambda s: c_silu(s[0], s[1]), 3),
        ]
        if args.sixfold_only:
            rows = [row for row in rows if row[1] == "sixfold"]
        rows = [(*row, (None, None)) for row in rows]
        if args.env:
            var, values = args.env.split("=", 1)
            rows = [(op, f"sixfold {var}={v}", fn, k, (var, v)) for op, name, fn, k, _ in rows
                    if name == "sixfold" for v in values.split(",")] + rows
        # The first timing after a change of shape reads slow (seen as 47% against 54.5% for one
        # kernel timed twice); one untimed pass of the first row absorbs it.
        torch_norm.time_ms(rows[0][2], sets)
        for op, name, fn, tensors, env in rows:
            with env_set(*env):
                ms = torch_norm.time_ms(fn, sets)
            gbps = tensors * esize * r * n / ms / 1e6
            print(f"{op:<10} {f'{r}x{n}':<12} {name:<22} {ms:>10.4f} {gbps:>8.0f} {100 * gbps / ceiling:>6.1f}%",
                  flush=True)
        del sets


if __name__ == "__main__":
    main()
