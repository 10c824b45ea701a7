#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The module's layering (docs/design.md, "Who changes what"): src/ has no import cycle,
and no transport imports the disk. Reads every `crate::NAME` path outside comments; prints
the cycle or the bad import it finds and exits 1."""
import glob, os, re, sys

TRANSPORTS = {"rdma_conn", "rdma_queue", "tcp_queue", "queue", "io", "host", "probe", "authn"}

deps = {}
for f in sorted(glob.glob("src/**/*.rs", recursive=True)):
    mod = os.path.relpath(f, "src")[:-3].split("/")[0]
    code = "\n".join(l.split("//")[0] for l in open(f, encoding="utf-8"))
    for d in re.findall(r"\bcrate::(\w+)", code):
        if d != mod:
            deps.setdefault(mod, set()).add(d)

bad = []
for t in sorted(TRANSPORTS):
    if "disk" in deps.get(t, ()):
        bad.append(f"src/{t}: imports disk")

def cycle_from(start):
    path, on = [start], {start}
    def walk(m):
        for d in sorted(deps.get(m, ())):
            if d == start:
                return path + [start]
            if d not in on:
                on.add(d); path.append(d)
                c = walk(d)
                if c:
                    return c
                path.pop()
        return None
    return walk(start)

for m in sorted(deps):
    c = cycle_from(m)
    if c:
        bad.append("import cycle: " + " -> ".join(c))
        break

for b in bad:
    print(b)
print(f"{len(deps)} modules, {sum(len(v) for v in deps.values())} imports: "
      + ("layering holds" if not bad else "layering broken"))
sys.exit(1 if bad else 0)
