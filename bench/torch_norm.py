"""sixfold's fused norms vs PyTorch in the same process, on the same bf16 tensors (GPU):
eager torch.nn.functional (rms_norm / layer_norm / softmax), the same under torch.compile, and
the unfused eager chain. Inputs rotate among copies totalling > 2x the L2 cache; CUDA events
around 8 back-to-back calls (--batch; 1 times each call alone), median of repeats. GB/s counts
each input read once and each output written once: forward 2 tensors (x, y); fused residual add
4 (x, residual, y, sum); backward 3 (x or y, dy, dx).

Families (--only, default all):
  forward   rms_norm, layer_norm, softmax
  add       s = x + residual; y = norm(s), both returned: sixfold.add_*_norm, the eager pair
            (x + r, then F.rms_norm / F.layer_norm) and that pair under torch.compile
  backward  dx (and dweight, dbias) from dy: sixfold.*_backward against torch autograd of
            F.rms_norm / F.layer_norm / torch.softmax, eager and under torch.compile (only the
            backward is timed: torch.autograd.grad on a retained graph). Like autograd's, sixfold's
            rms / layer backward reads the row statistics its forward saved (stats=True)
  train     forward + backward through autograd (torch.autograd.grad for a given dy):
            sixfold.torch's differentiable ops against F.* eager and under torch.compile
            (not in the default set: --only train)

    python3 bench/torch_norm.py [--json] [--only forward,add,backward,train] [--shapes 4096x4096,...]
                                [--batch 8] [--graph]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import sixfold

SHAPES = [(16384, 8192), (4096, 4096), (65536, 1024), (256, 262144), (32, 1048576)]


BATCH = 8  # --batch: calls between two events
GRAPH = False  # --graph: the BATCH calls captured once in a CUDA graph and replayed


def time_ms(fn, xs, reps=40, warmup=5, graph=None):
    """Median ms per call of fn(item), items rotating through xs: events around BATCH calls issued
    back to back (the host's launch work overlaps the GPU's, as in a training step; BATCH = 1:
    each call timed alone from an idle GPU, which adds the host's dispatch and its jitter).
    GRAPH: the BATCH calls (items in turn) replayed from one CUDA graph, so the GPU's time alone
    (torch.compile's and the wrappers' host work out of every row alike)."""
    for i in range(warmup):
        fn(xs[i % len(xs)])
    torch.cuda.synchronize()
    if GRAPH if graph is None else graph:
        calls = max(BATCH, len(xs))
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(s):
                fn(xs[0])  # once on the side stream before capture (lazy initialisation)
                torch.cuda.current_stream().synchronize()
                with torch.cuda.graph(g, stream=s):
                    for k in range(calls):
                        fn(xs[k % len(xs)])
        except Exception as e:  # not capturable: the row says so (nan)
            print(f"# capture failed: {type(e).__name__}: {str(e)[:120]}")
            torch.cuda.synchronize()
            return float("nan")
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / calls)
        del g
        return statistics.median(ts)
    ts = []
    k = 0
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(BATCH):
            fn(xs[k % len(xs)])
            k += 1
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / BATCH)
    return statistics.median(ts)


def eager_rms(x, w, eps):  # the unfused chain: one pass per operation
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


class Rows(list):
    """Result rows; with stream=True each row is also printed as it is measured."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream

    def append(self, r):
        super().append(r)
        if self.stream:
            print_row(r)


def print_row(r):
    if r["median_ms"] is None:
        print(f"{r['op']:<20} {r['shape']:<12} {r['impl']:<24} {'':>10} {r['gbps']:>7.2f}x")
    else:
        print(f"{r['op']:<20} {r['shape']:<12} {r['impl']:<24} {r['median_ms']:>10.4f} {r['gbps']:>8.0f}")


def measure(rows, op, r, n, impls, items, nbytes):
    """Times each (name, fn) on the rotating items; appends rows and the sixfold/best-peer ratio."""
    res = {}
    for name, fn in impls:
        ms = time_ms(fn, items)
        res[name] = ms
        rows.append({"op": op, "shape": f"{r}x{n}", "impl": name, "median_ms": ms,
                     "gbps": nbytes / ms / 1e6})
    best_peer = min(v for k, v in res.items() if k != "sixfold")
    rows.append({"op": op, "shape": f"{r}x{n}", "impl": "ratio sixfold/best peer",
                 "median_ms": None, "gbps": best_peer / res["sixfold"]})


def run_add(rows, r, n, xs, w, b):
    """Fused residual add + norm: (x, residual) rotating pairs; returns y and s."""
    shape = (n,)
    pairs = [(x, torch.randn_like(x)) for x in xs]

    def eager_rms(p):
        s = p[0] + p[1]
        return F.rms_norm(s, shape, w, 1e-6), s

    def eager_ln(p):
        s = p[0] + p[1]
        return F.layer_norm(s, shape, w, b, 1e-5), s

    c_rms = torch.compile(eager_rms, dynamic=False)
    c_ln = torch.compile(eager_ln, dynamic=False)
    nbytes = 4 * r * n * 2
    measure(rows, "add_rms_norm", r, n,
            [("sixfold", lambda p: sixfold.add_rms_norm(p[0], p[1], w, eps=1e-6)),
             ("eager x+r, F.rms_norm", eager_rms), ("torch.compile", c_rms)], pairs, nbytes)
    measure(rows, "add_layer_norm", r, n,
            [("sixfold", lambda p: sixfold.add_layer_norm(p[0], p[1], w, b, eps=1e-5)),
             ("eager x+r, F.layer_norm", eager_ln), ("torch.compile", c_ln)], pairs, nbytes)


def run_backward(rows, r, n, xs, w, b):
    """Backward only: autograd.grad on retained graphs (one per rotating input) for the peers."""
    shape = (n,)
    dys = [torch.randn_like(x) for x in xs]
    fwd = {
        "rms_norm": lambda x, w_, b_: F.rms_norm(x, shape, w_, 1e-6),
        "layer_norm": lambda x, w_, b_: F.layer_norm(x, shape, w_, b_, 1e-5),
        "softmax": lambda x, w_, b_: torch.softmax(x, -1),
    }
    nbytes = 3 * r * n * 2
    for op, f in fwd.items():
        impls = []
        for name, fn in (("torch eager autograd", f), ("torch.compile autograd", torch.compile(f, dynamic=False))):
            items = []
            for x, dy in zip(xs, dys):
                xa = x.detach().requires_grad_()
                wa = w.detach().requires_grad_()
                ba = b.detach().requires_grad_()
                out = fn(xa, wa, ba)
                inputs = (xa,) if op == "softmax" else ((xa, wa) if op == "rms_norm" else (xa, wa, ba))
                items.append((out, inputs, dy))
            impls.append((name, items))
        ys = [torch.softmax(x, -1) for x in xs] if op == "softmax" else None
        if op == "rms_norm":
            st = [sixfold.rms_norm(x, w, eps=1e-6, stats=True)[1] for x in xs]
            ours = lambda i: sixfold.rms_norm_backward(dys[i], xs[i], w, eps=1e-6, rstd=st[i])
        elif op == "layer_norm":
            st = [sixfold.layer_norm(x, w, b, eps=1e-5, stats=True)[1:] for x in xs]
            ours = lambda i: sixfold.layer_norm_backward(dys[i], xs[i], w, eps=1e-5, mean=st[i][0],
                                                         rstd=st[i][1])
        else:
            ours = lambda i: sixfold.softmax_backward(dys[i], ys[i])
        idx = list(range(len(xs)))
        # The peers' autograd.grad on a graph built outside a capture cannot be captured: the
        # backward family is always timed back to back (--graph applies to forward and add).
        res = {"sixfold": time_ms(ours, idx, graph=False)}
        for name, items in impls:
            res[name] = time_ms(lambda it: torch.autograd.grad(it[0], it[1], it[2], retain_graph=True), items,
                                graph=False)
        for name, ms in res.items():
            rows.append({"op": op + "_backward", "shape": f"{r}x{n}", "impl": name, "median_ms": ms,
                         "gbps": nbytes / ms / 1e6})
        best_peer = min(v for k, v in res.items() if k != "sixfold")
        rows.append({"op": op + "_backward", "shape": f"{r}x{n}", "impl": "ratio sixfold/best peer",
                     "median_ms": None, "gbps": best_peer / res["sixfold"]})
        del impls


def run_train(rows, r, n, xs, w, b):
    """Forward + backward through autograd (torch.autograd.grad of the op's output for a given dy,
    as a training step runs it): sixfold.torch's differentiable ops against F.* eager and under
    torch.compile. GB/s counts x and y (forward) and x, dy, dx (backward): 5 tensors."""
    import sixfold.torch as st

    shape = (n,)
    dys = [torch.randn_like(x) for x in xs]
    ops = {
        "rms_norm": (lambda x, w_, b_: st.rms_norm(x, w_, 1e-6), lambda x, w_, b_: F.rms_norm(x, shape, w_, 1e-6)),
        "layer_norm": (lambda x, w_, b_: st.layer_norm(x, w_, b_, 1e-5),
                       lambda x, w_, b_: F.layer_norm(x, shape, w_, b_, 1e-5)),
        "softmax": (lambda x, w_, b_: st.softmax(x), lambda x, w_, b_: torch.softmax(x, -1)),
    }
    nbytes = 5 * r * n * 2
    for op, (ours, peer) in ops.items():
        wa, ba = w.detach().requires_grad_(), b.detach().requires_grad_()
        params = () if op == "softmax" else ((wa,) if op == "rms_norm" else (wa, ba))
        items = [(x.detach().requires_grad_(), dy) for x, dy in zip(xs, dys)]
        res = {}
        for name, f in (("sixfold.torch autograd", ours), ("torch eager autograd", peer),
                        ("torch.compile autograd", torch.compile(peer, dynamic=False))):
            res[name] = time_ms(lambda it: torch.autograd.grad(f(it[0], wa, ba), (it[0],) + params, it[1]), items,
                                graph=False)
        for name, ms in res.items():
            rows.append({"op": op + "_train", "shape": f"{r}x{n}", "impl": name, "median_ms": ms,
                         "gbps": nbytes / ms / 1e6})
        best_peer = min(v for k, v in res.items() if not k.startswith("sixfold"))
        rows.append({"op": op + "_train", "shape": f"{r}x{n}", "impl": "ratio sixfold/best peer",
                     "median_ms": None, "gbps": best_peer / res["sixfold.torch autograd"]})


def main():
    global BATCH, GRAPH
    # Each shape compiles its own static graph: with automatic dynamic shapes, torch.compile
    # would recompile the lambdas for the later shapes as shape-generic (slower) kernels.
    torch._dynamo.config.cache_size_limit = 64
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", default="forward,add,backward")
    ap.add_argument("--shapes", default="")
    ap.add_argument("--batch", type=int, default=BATCH, help="calls per timed stretch (1: each alone)")
    ap.add_argument("--graph", action="store_true", help="replay the stretch from a CUDA graph")
    args = ap.parse_args()
    BATCH = max(1, args.batch)
    GRAPH = args.graph
    families = set(args.only.split(","))
    wanted = set(args.shapes.split(",")) if args.shapes else None
    torch.manual_seed(0)
    if not args.json:
        print(f"device: {torch.cuda.get_device_name()}")
        print(f"{'op':<20} {'shape':<12} {'impl':<24} {'median ms':>10} {'GB/s':>8}")
    rows = Rows(stream=not args.json)
    l2 = 60 << 20
    for r, n in SHAPES:
        if wanted and f"{r}x{n}" not in wanted:
            continue
        nbytes = r * n * 2
        copies = max(1, -(-2 * l2 // nbytes))
        xs = [torch.randn(r, n, device="cuda", dtype=torch.bfloat16) * 2 + 0.5 for _ in range(copies)]
        w = (torch.randn(n, device="cuda") * 0.1 + 1).bfloat16()
        b = (torch.randn(n, device="cuda") * 0.1).bfloat16()
        shape = (n,)
        c_rms = torch.compile(lambda x: F.rms_norm(x, shape, w, 1e-6), dynamic=False)
        c_ln = torch.compile(lambda x: F.layer_norm(x, shape, w, b, 1e-5), dynamic=False)
        c_sm = torch.compile(lambda x: torch.softmax(x, -1), dynamic=False)
        impls = {} if "forward" not in families else {
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
            measure(rows, op, r, n, lst, xs, 2 * nbytes)
        if "add" in families:
            run_add(rows, r, n, xs, w, b)
        if "backward" in families:
            run_backward(rows, r, n, xs, w, b)
        if "train" in families:
            run_train(rows, r, n, xs, w, b)
        del xs
        torch.cuda.empty_cache()
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2))
        return


if __name__ == "__main__":
    main()
