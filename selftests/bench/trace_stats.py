#!/usr/bin/env python3
"""One diagnostic sample of make bench (bench/peers-lib.sh, bp_diag) from a storage-VM trace of
the sched_wakeup, sched_switch and raw_syscalls:sys_enter tracepoints over a job's window.

    trace_stats.py TRACE IOS SYSTEM JOB  ->  one JSON line on stdout

TRACE starts with "# target tids: ..." (rdmadisk-target's threads, none for the peers, whose
targets are in the kernel) and "# overrun: N" (events the trace buffer lost), then the trace
as /sys/kernel/tracing/trace prints it. IOS is the I/Os the client completed in the window.

Per I/O: system calls and wake-ups of the target's threads, and of the whole VM. Wake-up to
run: from a task's sched_wakeup to the sched_switch that gives it the CPU, for the target's
threads and for every task; with how often it exceeded EEVDF's base slice (0.75 ms) and which
tasks had the CPU while a target thread waited longer than 0.1 ms.
"""

import collections
import json
import re
import sys

LINE = re.compile(r"^\s*(?P<comm>.+)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+):\s+(?P<ev>\w+):\s+(?P<rest>.*)$")
KV = re.compile(r"(\w+)=(\S+)")
BASE_SLICE_US = 750


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main():
    path, ios, system, job = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    tids, overrun = set(), None
    woken = {}  # pid -> wake-up time (s)
    lat_all, lat_target = [], []
    # While a target thread waited for the CPU (> 0.1 ms): who ran, and for how long (us).
    ran_meanwhile = collections.Counter()
    waiting_target = {}  # pid -> (wake-up time, who ran since), for the target's threads
    last_switch = None  # when the CPU last changed hands
    sys_all = sys_target = wake_all = wake_target = 0
    t_first = t_last = None
    for line in open(path, errors="replace"):
        if line.startswith("# target tids:"):
            tids = {int(x) for x in line.split(":", 1)[1].split()}
            continue
        if line.startswith("# overrun:"):
            overrun = int(line.split(":", 1)[1])
            continue
        m = LINE.match(line)
        if not m:
            continue
        ts, ev, pid = float(m["ts"]), m["ev"], int(m["pid"])
        t_first = ts if t_first is None else t_first
        t_last = ts
        if ev == "sys_enter":
            sys_all += 1
            sys_target += pid in tids
        elif ev in ("sched_wakeup", "sched_wakeup_new"):
            kv = dict(KV.findall(m["rest"]))
            w = int(kv.get("pid", -1))
            wake_all += 1
            if w in tids:
                wake_target += 1
                waiting_target.setdefault(w, (ts, collections.Counter()))
            woken.setdefault(w, ts)
        elif ev == "sched_switch":
            kv = dict(KV.findall(m["rest"]))
            nxt = int(kv.get("next_pid", -1))
            # The task switched out (prev) had the CPU since the last switch.
            if last_switch is not None:
                comm = kv.get("prev_comm", "?")
                for at, ran in waiting_target.values():
                    ran[comm] += (ts - max(last_switch, at)) * 1e6
            last_switch = ts
            if nxt in woken:
                d = (ts - woken.pop(nxt)) * 1e6
                lat_all.append(d)
                if nxt in tids:
                    lat_target.append(d)
            at, ran = waiting_target.pop(nxt, (ts, None))
            if ran is not None and ts - at > 1e-4:
                ran_meanwhile.update(ran)
    window = (t_last - t_first) if t_first is not None else 0

    def per_io(n):
        return n / ios if ios else None

    def lat(xs):
        return {
            "n": len(xs),
            "p50_us": pct(xs, 50),
            "p99_us": pct(xs, 99),
            "mean_us": sum(xs) / len(xs) if xs else None,
            "over_base_slice": sum(1 for x in xs if x > BASE_SLICE_US) / len(xs) if xs else None,
        }

    print(json.dumps({
        "system": system, "job": job, "diag": True, "ios": ios, "window_s": window,
        "trace_overrun": overrun,
        "target_threads": len(tids),
        "target_syscalls_per_io": per_io(sys_target) if tids else None,
        "target_wakeups_per_io": per_io(wake_target) if tids else None,
        "vm_syscalls_per_io": per_io(sys_all),
        "vm_wakeups_per_io": per_io(wake_all),
        "wake_to_run_target": lat(lat_target) if tids else None,
        "wake_to_run_all": lat(lat_all),
        "ran_while_target_waited_us": {k: round(v) for k, v in ran_meanwhile.most_common(5)},
    }))


if __name__ == "__main__":
    main()
