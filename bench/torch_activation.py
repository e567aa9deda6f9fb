"""sixfold's fused activations vs PyTorch on the same bf16 tensors (GPU): bias+GELU against
F.gelu(x + b) eager and under torch.compile, SiLU-gate against F.silu(a) * b. Inputs rotate
between two copies (512 MB each, beyond L2); CUDA events; median of 40. GB/s counts each input
read once and the output written once.

    python3 bench/torch_activation.py [--rows R] [--n N]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

import sixfold


def time_ms(fn, sets, reps=40, warmup=5):
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    ts = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*sets[i % len(sets)])
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--n", type=int, default=8192)
    args = ap.parse_args()
    r, n = args.rows, args.n
    sets = [(torch.randn(r, n, device="cuda", dtype=torch.bfloat16),
             torch.randn(r, n, device="cuda", dtype=torch.bfloat16)) for _ in range(2)]
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    c_gelu = torch.compile(lambda x: F.gelu(x + bias), dynamic=False)
    c_silu = torch.compile(lambda a, b: F.silu(a) * b, dynamic=False)
    rows = [
        ("bias_gelu", "sixfold", lambda x, g: sixfold.bias_gelu(x, bias), 4),
        ("bias_gelu", "eager F.gelu(x+b)", lambda x, g: F.gelu(x + bias), 4),
        ("bias_gelu", "torch.compile", lambda x, g: c_gelu(x), 4),
        ("silu_gate", "sixfold", lambda a, b: sixfold.silu_gate(a, b), 6),
        ("silu_gate", "eager F.silu(a)*b", lambda a, b: F.silu(a) * b, 6),
        ("silu_gate", "torch.compile", lambda a, b: c_silu(a, b), 6),
    ]
    print(f"device: {torch.cuda.get_device_name()}, {r}x{n} bf16")
    print(f"{'op':<10} {'impl':<20} {'median ms':>10} {'GB/s':>8}")
    for op, name, fn, bytes_per in rows:
        ms = time_ms(fn, sets)
        print(f"{op:<10} {name:<20} {ms:>10.4f} {bytes_per * r * n / ms / 1e6:>8.0f}")


if __name__ == "__main__":
    main()
