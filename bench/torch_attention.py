"""sixfold.attention vs PyTorch's scaled_dot_product_attention in the same process, on the same
tensors. flops = 4·b·h·q_len·kv_len·d, halved when causal (q_len == kv_len here, so torch's
top-left and sixfold's bottom-right causal masks are the same mask).

GPU (--device cuda, bf16): torch SDPA pinned to its flash backend and to its cuDNN backend
(torch.nn.attention.sdpa_kernel), sixfold; TFLOP/s and sixfold/peer ratios. Shapes: hidden
2048 (16 heads of 128, 32 of 64, 8 of 256), 16k tokens per batch, seq 512…16384, causal and not;
decode rows: q_len 1, kv_len 8k…128k, 64 q heads on 8 kv heads (GQA), GB/s of the KV cache read.
CUDA events, median of repeats after warm-up.

CPU (--device cpu, f32): torch's CPU SDPA (its flash-attention CPU kernel) vs sixfold at seq
2048, head dim 64 and 128, 8 heads, causal and not, all cores for both (--threads N to pin).
The box may be shared: each row is the best of --reps runs, interleaved between torch and
sixfold, as wall time and as process CPU time (with --threads 1 the latter is the per-core
rate, the figure least disturbed by other load). sixfold's OpenMP threads: with torch imported
first both use the libgomp torch loaded, one thread pool.

    python3 bench/torch_attention.py [--device cuda|cpu] [--json FILE] [--reps N] [--quick] [--threads N]
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

import sixfold


def flops(b, h, lq, lk, d, causal):
    return 4.0 * b * h * lq * lk * d * (0.5 if causal else 1.0)


def gpu_ms(fn, reps=20, warmup=3):
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


def graph_ms(fn, calls=10, reps=20):
    """Per-call time of `calls` calls of fn captured in one CUDA graph and replayed: no host
    launch gap per call (decoding loops run this way in serving stacks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return gpu_ms(g.replay, reps=reps) / calls


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "math": SDPBackend.MATH}[name])


def run_gpu(args):
    rows = []
    dt = torch.bfloat16
    prefill = [(128, 16, s) for s in (512, 1024, 2048, 4096, 8192, 16384)]
    prefill += [(64, 32, s) for s in (2048, 8192)] + [(256, 8, s) for s in (2048, 8192)]
    if args.quick:
        prefill = [(128, 16, 2048), (128, 16, 8192)]
    if args.decode_only:
        prefill = []
    for d, h, seq in prefill:
        for causal in (False, True):
            b = 16384 // seq
            q, k, v = (torch.randn(b, h, seq, d, device="cuda", dtype=dt) for _ in range(3))
            out = torch.empty_like(q)
            f = flops(b, h, seq, seq, d, causal)
            res = {}
            for peer in ("flash", "cudnn"):
                try:
                    with sdpa_backend(peer):
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        res[peer] = gpu_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                except RuntimeError as e:  # backend refuses this shape
                    res[peer] = None
                    print(f"  torch {peer} unavailable for d={d} seq={seq}: {str(e).splitlines()[0]}")
            try:
                res["sixfold"] = gpu_ms(lambda: sixfold.attention(q, k, v, causal=causal, out=out))
            except sixfold.Error as e:
                res["sixfold"] = None
                print(f"  sixfold failed for d={d} seq={seq}: {e}")
            row = {"kind": "prefill", "d": d, "heads": h, "batch": b, "seq": seq, "causal": causal}
            for name, ms in res.items():
                row[f"{name}_ms"] = ms
                row[f"{name}_tflops"] = f / ms / 1e9 if ms else None
            for peer in ("flash", "cudnn"):
                row[f"ratio_vs_{peer}"] = res[peer] / res["sixfold"] if res[peer] and res["sixfold"] else None
            rows.append(row)
            print(fmt_row(row))
    for kv in ((8192, 131072) if args.quick else (8192, 32768, 131072)):
        b, hq, hkv, d = max(1, 65536 // kv), 64, 8, 128
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=dt)
        k, v = (torch.randn(b, hkv, kv, d, device="cuda", dtype=dt) for _ in range(2))
        out = torch.empty_like(q)
        nbytes = 2 * b * hkv * kv * d * 2
        res = {}
        for peer in ("flash", "cudnn"):
            for mode, timer in (("", gpu_ms), ("_graph", graph_ms)):
                try:
                    with sdpa_backend(peer):
                        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                        res[peer + mode] = timer(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
                except RuntimeError as e:
                    res[peer + mode] = None
                    print(f"  torch {peer}{mode} unavailable for decode kv={kv}: {str(e).splitlines()[0]}")
        for mode, timer in (("", gpu_ms), ("_graph", graph_ms)):
            try:
                res["sixfold" + mode] = timer(lambda: sixfold.attention(q, k, v, out=out))
            except (sixfold.Error, RuntimeError) as e:
                res["sixfold" + mode] = None
                print(f"  sixfold{mode} failed for decode kv={kv}: {e}")
        row = {"kind": "decode", "d": d, "heads": f"{hq}/{hkv}", "batch": b, "kv_len": kv}
        for name, ms in res.items():
            row[f"{name}_ms"] = ms
            row[f"{name}_gbps"] = nbytes / ms / 1e6 if ms else None
        for peer in ("flash", "cudnn", "flash_graph", "cudnn_graph"):
            mine = res["sixfold_graph" if peer.endswith("_graph") else "sixfold"]
            row[f"ratio_vs_{peer}"] = res[peer] / mine if res[peer] and mine else None
        rows.append(row)
        print(fmt_row(row))
    return rows


def run_cpu(args):
    torch.set_num_threads(args.threads or os.cpu_count())
    rows = []
    b, h, seq = 1, 8, 2048
    for d in (64, 128):
        for causal in (False, True):
            q, k, v = (torch.randn(b, h, seq, d, dtype=torch.float32) for _ in range(3))
            out = torch.empty_like(q)
            fns = {"torch_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                   "sixfold": lambda: sixfold.attention(q, k, v, causal=causal, out=out)}
            best = {n: float("inf") for n in fns}
            cpu = {n: float("inf") for n in fns}  # process CPU time: all threads together
            for n, fn in fns.items():
                fn()  # warm-up
            for _ in range(args.reps):  # interleaved, best of reps: the box may be shared
                for n, fn in fns.items():
                    t0, c0 = time.perf_counter(), time.process_time()
                    fn()
                    best[n] = min(best[n], (time.perf_counter() - t0) * 1e3)
                    cpu[n] = min(cpu[n], (time.process_time() - c0) * 1e3)
            want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
            err = ((out.double() - want).abs().max() / want.abs().max()).item()
            f = flops(b, h, seq, seq, d, causal)
            row = {"kind": "cpu", "d": d, "heads": h, "batch": b, "seq": seq, "causal": causal,
                   "max_rel_error": err}
            for n, ms in best.items():
                row[f"{n}_ms"] = ms
                row[f"{n}_gflops"] = f / ms / 1e6
                row[f"{n}_cpu_gflops"] = f / cpu[n] / 1e6  # per CPU-second (per core with --threads 1)
            row["ratio_vs_torch"] = best["torch_sdpa"] / best["sixfold"]
            row["cpu_ratio_vs_torch"] = cpu["torch_sdpa"] / cpu["sixfold"]
            rows.append(row)
            print(fmt_row(row))
    return rows


def fmt_row(r):
    keys = [k for k in r if k.endswith(("_tflops", "_gflops", "_gbps")) or "ratio" in k]
    head = ", ".join(f"{k}={r[k]}" for k in ("kind", "d", "heads", "batch", "seq", "kv_len", "causal") if k in r)
    vals = ", ".join(f"{k}={r[k]:.3g}" if isinstance(r[k], float) else f"{k}={r[k]}" for k in keys)
    return f"{head}: {vals}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="GPU: two prefill shapes and two decode rows")
    ap.add_argument("--decode-only", action="store_true", help="GPU: only the decode rows")
    ap.add_argument("--threads", type=int, default=0, help="CPU: threads for both (default: all cores)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda"
             else f" ({args.threads or os.cpu_count()} of {os.cpu_count()} threads)"))
    rows = run_gpu(args) if args.device == "cuda" else run_cpu(args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
