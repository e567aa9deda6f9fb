"""Call overhead of a tiny sixfold op from Python (CPU): the time of inclusive_scan on 16 floats,
with out= and with the output allocated by sixfold, against numpy.cumsum on the same array.

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
    if "--json" in sys.argv:
        print(json.dumps({"unit": "us_per_call", "n": 16, "rows": rows}, indent=2))
        return
    print(f"{'call (16 f32, CPU)':<44} {'us/call':>8}")
    for k, v in rows.items():
        print(f"{k:<44} {v:>8.2f}")


if __name__ == "__main__":
    main()
