#!/usr/bin/env python3
"""Instructions in the main loop of each kernel of a `cuobjdump --dump-sass` listing.

    cuobjdump --dump-sass norm_backward.cu.o > sass.txt
    python3 dev/norm/sass_loop.py sass.txt [NAME_SUBSTRING]

For every function whose (mangled) name contains NAME_SUBSTRING (default: bwd_rows), the loop is
taken as the widest backward branch (a BRA to a lower address); the script prints the demangled
name, the function's instruction count, the loop's, and the loop's shuffles, equality compares
(the byte-offset selects of a struct picked by lane), calls (IEEE division / sqrt slow paths) and
global / shared loads. Run D → session 3 used it to find that the rms / layer backward were
instruction-bound (docs/perf/norm.md, runs E–H).
"""
import re
import subprocess
import sys
from collections import Counter

INSTR = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(?:@!?U?P[T\d]\s+)?([A-Z0-9_.]+)")
BRANCH = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(?:@!?U?P[T\d]\s+)?BRA\s+(?:!?U?P\d, )?0x([0-9a-f]+)")


def demangle(name):
    try:
        out = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    except OSError:
        return name
    out = re.sub(r"\w+::\(anonymous namespace\)::", "", out)
    if out.endswith(")"):  # drop the parameter list: from the '(' matching the last ')'
        depth = 0
        for i in range(len(out) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(out[i], 0)
            if depth == 0:
                return out[:i]
    return out


def main():
    text = open(sys.argv[1]).read()
    want = sys.argv[2] if len(sys.argv) > 2 else "bwd_rows"
    for body in re.split(r"\n\s*Function : ", text)[1:]:
        name = body.split("\n", 1)[0].strip()
        if want not in name:
            continue
        ins = [(int(a, 16), op) for a, op in INSTR.findall(body)]
        back = [(int(a, 16) - int(t, 16), int(t, 16), int(a, 16))
                for a, t in BRANCH.findall(body) if int(t, 16) < int(a, 16)]
        if not back:
            print(f"{demangle(name):80s} total {len(ins):5d}  (no loop)")
            continue
        _, lo, hi = max(back)
        c = Counter(op for a, op in ins if lo <= a <= hi)
        count = lambda prefix: sum(v for k, v in c.items() if k.startswith(prefix))
        print(f"{demangle(name):80s} total {len(ins):5d} loop {sum(c.values()):5d} "
              f"SHFL {count('SHFL'):3d} ISETP.EQ {c['ISETP.EQ.AND']:3d} CALL {count('CALL'):2d} "
              f"LDG {count('LDG'):3d} LDS {count('LDS'):3d} LDL {count('LDL'):3d}")


if __name__ == "__main__":
    main()
