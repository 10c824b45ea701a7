#!/usr/bin/env python3
"""make bench's report: medians, spreads and same-run ratios from samples.jsonl.

Writes results.json (every sample and the summary), results.md (the tables) and, when
matplotlib is there, latency.png, iops.png and scaling.png, all in the output directory.

A job that failed or stalled (a second or more with no completion: bench/peers-lib.sh) is
counted and shown as such, and enters no figure and no ratio: a repetition whose job failed
or stalled on either system gives no ratio. Each ratio is the median of the repetitions'
ratios, with a bootstrap 95% interval over those paired repetitions.
"""
import argparse
import json
import random
import statistics
import sys
from pathlib import Path

SYSTEMS = ["rdmadisk-rdma", "nvme-rdma", "rnbd", "rdmadisk-tcp", "nvme-tcp", "rdmadisk-rbd", "nvme-rdma-krbd", "fio-rbd"]
# workload -> (figure, better): the figure each workload is judged by.
FIGURES = {
    "rr4k_qd1": ("lat_p50_us", "lower"),
    "rr4k_qd1_poll": ("lat_p50_us", "lower"),
    "rw4k_qd1": ("lat_p50_us", "lower"),
    "rr4k_qd16": ("iops", "higher"),
    "sr128k_qd4": ("mb_s", "higher"),
    "sw128k_qd4": ("mb_s", "higher"),
}
TITLES = {
    "rr4k_qd1": "4 KiB randread QD1",
    "rr4k_qd1_poll": "4 KiB randread QD1, polled (io_uring --hipri)",
    "rw4k_qd1": "4 KiB randwrite QD1",
    "rr4k_qd16": "4 KiB randread QD16",
    "sr128k_qd4": "128 KiB read QD4",
    "sw128k_qd4": "128 KiB write QD4",
}
UNITS = {"lat_p50_us": "µs p50", "lat_p99_us": "µs p99", "iops": "IOPS", "mb_s": "MB/s"}


def broken(s):
    """The job failed or stalled: its figures mean nothing."""
    return bool(s.get("error") or s.get("stalled"))


def timed(samples):
    """The timed jobs' samples that are whole (no diagnostic job, nothing broken)."""
    return [s for s in samples if not s.get("diag") and not broken(s)]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summary(samples):
    """(system, job) -> {figure: (median, min, max, n)}"""
    groups = {}
    for s in timed(samples):
        groups.setdefault((s["system"], s["job"]), []).append(s)
    out = {}
    for key, ss in groups.items():
        figs = {}
        for f in ("iops", "mb_s", "lat_p50_us", "lat_p99_us", "lat_mean_us", "cpu_us_per_io", "target_us", "backing_us",
                  "ctxt_per_io", "storage_cpu_us_per_io", "storage_ctxt_per_io", "target_user_us_per_io",
                  "target_sys_us_per_io", "target_wakeups_per_io", "storage_tcp_insegs_per_io",
                  "compute_tcp_outsegs_per_io"):
            xs = [s[f] for s in ss if s.get(f) is not None]
            if xs:
                figs[f] = (statistics.median(xs), min(xs), max(xs), len(xs))
        out[key] = figs
    return out


def fig(summ, system, job, f):
    v = summ.get((system, job), {}).get(f)
    return v[0] if v else None


def ratio(samples, a, b, job):
    """Each repetition's ratio, sorted: the systems ran one after the other within a
    repetition, so a drift of the host between repetitions cancels. The table gives their
    median and, in brackets, their spread."""
    f, better = FIGURES[job]
    by = {}
    for s in timed(samples):
        if s["job"] == job and s["system"] in (a, b) and s.get(f):
            by.setdefault(s["rep"], {})[s["system"]] = s[f]
    rs = []
    for v in by.values():
        if a in v and b in v:
            # Always "how many times better a is than b": above 1 means a wins.
            rs.append(v[b] / v[a] if better == "lower" else v[a] / v[b])
    return sorted(rs)


def rep_ratios(samples, system, num, den, f):
    """Each repetition's `num` ÷ `den` figure `f` of one system, sorted."""
    by = {}
    for s in timed(samples):
        if s["system"] == system and s["job"] in (num, den) and s.get(f):
            by.setdefault(s["rep"], {})[s["job"]] = s[f]
    return sorted(v[num] / v[den] for v in by.values() if num in v and den in v)


def boot_ci(rs, n=4000):
    """A bootstrap 95% interval of the median of `rs` (percentile method, fixed seed so that a
    report is reproducible from its samples). With fewer than 3 values there is none."""
    if len(rs) < 3:
        return None
    rng = random.Random(2027)
    meds = sorted(statistics.median(rng.choices(rs, k=len(rs))) for _ in range(n))
    return [meds[int(0.025 * n)], meds[int(0.975 * n) - 1]]


def spread(rs):
    """{median, min, max, n, ci95} of a list of ratios; None if empty."""
    if not rs:
        return None
    return {"median": statistics.median(rs), "min": min(rs), "max": max(rs), "n": len(rs), "ci95": boot_ci(rs)}


def fmt_ratio(rs):
    """A ratio's cell: the median, the bootstrap 95% interval and the pairs it rests on."""
    if not rs:
        return "–"
    ci = boot_ci(rs)
    ci_s = f"[{ci[0]:.2f}–{ci[1]:.2f}]" if ci else f"(min–max {min(rs):.2f}–{max(rs):.2f})"
    return f"{statistics.median(rs):.2f} {ci_s}, n={len(rs)}"


def fmt(v, nd=2):
    return "–" if v is None else f"{v:.{nd}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--kernel", default="?")
    ap.add_argument("--host", default="?")
    ap.add_argument("--secs", type=int, default=0)
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--minutes", type=int, default=0)
    ap.add_argument("--date", default=None)
    ap.add_argument("--backing", default="a brd RAM disk")
    a = ap.parse_args()
    d = Path(a.dir)
    samples = [json.loads(line) for line in (d / "samples.jsonl").read_text().splitlines() if line.strip()]
    if not samples:
        print("report: no samples", file=sys.stderr)
        return 1
    summ = summary(samples)
    import datetime

    date = a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    systems = [s for s in SYSTEMS if any(k[0] == s for k in summ)]
    md = []
    md.append("# rdmadisk against its peers, one run\n")
    md.append(
        f"{date}; kernel {a.kernel}; {a.host}. fio libaio (the polled job: io_uring, --hipri), direct, one job on the first 32 MiB "
        f"of {a.backing} on the storage VM that every system serves; two hardware queues for "
        f"each, and one poll queue (used only by the polled job); {a.reps} repetitions of {a.secs} s, interleaved across the systems; medians, "
        f"with the spread (min–max) in brackets. A job that failed, or stalled (a second or more with no completion), "
        f"is counted in its cell and enters no figure and no ratio. The whole run took {a.minutes} minutes.\n"
    )
    rbd = [x for x in ("rdmadisk-rbd", "nvme-rdma-krbd", "fio-rbd") if x in systems]
    if rbd:
        md.append(
            f"The RBD set ({', '.join(rbd)}) serves images of one Ceph cluster on the storage VM instead (one monitor, "
            "one bluestore OSD on a file, on the VM's loopback), an image a system, each filled with the same random data: "
            "rdmadisk-rbd through rdmadisk-target's librbd over RDMA; nvme-rdma-krbd through nvmet on the image mapped by the "
            "storage VM's kernel RBD client; fio-rbd is fio's rbd engine on the storage VM itself, where the target runs "
            "(no network hop: the floor). It runs 4 KiB random reads and writes at QD1 and reads at QD16; fio-rbd's CPU per "
            "I/O is not taken (no block device to count its I/Os on).\n"
        )
    agents = {vm: [x["agent_cpu_us"][vm] for x in samples if x.get("agent_cpu_us") and x["agent_cpu_us"].get(vm) is not None]
              for vm in ("compute", "storage")}
    if agents["storage"]:
        md.append(
            "The test bed's agents (which poll their command queues 10 times a second when idle) run each job's "
            "counter commands for the whole measuring window, so they do not poll then: their CPU time in a window was "
            + ", ".join(f"{vm} {max(v):.0f} µs at most ({len(v)} jobs)" for vm, v in agents.items() if v) + ".\n"
        )
    md.append("## Figures\n")
    md.append("| workload | " + " | ".join(systems) + " |")
    md.append("|---|" + "---|" * len(systems))
    # Only the workloads this run measured (make bench's BENCH_JOBS may have left some out).
    jobs = [j for j in FIGURES if any(x["job"] == j for x in samples)]
    for job in jobs:
        f = FIGURES[job][0]
        for ff in ([f, "lat_p99_us"] if f == "lat_p50_us" else [f]):
            cells = []
            for s in systems:
                v = summ.get((s, job), {}).get(ff)
                mine = [x for x in samples if x["system"] == s and x["job"] == job and not x.get("diag")]
                failed = sum(1 for x in mine if x.get("error"))
                stalled = sum(1 for x in mine if x.get("stalled") and not x.get("error"))
                cell = "–" if not v else f"{v[0]:.0f} ({v[1]:.0f}–{v[2]:.0f})"
                cells.append(cell + (f", {failed} failed" if failed else "") + (f", {stalled} stalled" if stalled else ""))
            md.append(f"| {TITLES[job]}, {UNITS[ff]} | " + " | ".join(cells) + " |")
    for f, what in (("cpu_us_per_io", "client CPU µs per I/O"), ("ctxt_per_io", "client context switches per I/O"),
                    ("storage_cpu_us_per_io", "storage CPU µs per I/O"),
                    ("storage_ctxt_per_io", "storage context switches per I/O"),
                    ("target_user_us_per_io", "rdmadisk-target's user CPU µs per I/O"),
                    ("target_sys_us_per_io", "rdmadisk-target's system CPU µs per I/O"),
                    ("target_wakeups_per_io", "rdmadisk-target's wake-ups per I/O"),
                    ("storage_tcp_insegs_per_io", "TCP segments the storage VM received per I/O"),
                    ("compute_tcp_outsegs_per_io", "TCP segments the compute VM sent per I/O")):
        for job in jobs:
            cells = []
            for s in systems:
                v = summ.get((s, job), {}).get(f)
                cells.append("–" if not v else f"{v[0]:.1f}" if v[0] < 100 else f"{v[0]:.0f}")
            if any(c != "–" for c in cells):
                md.append(f"| {TITLES[job]}, {what} | " + " | ".join(cells) + " |")

    md.append(
        "\n## Same-run ratios (above 1: rdmadisk is better; the median of the repetitions' ratios, "
        "a bootstrap 95% interval over the paired repetitions in brackets, and how many pairs; a repetition "
        "where either job failed or stalled gives none)\n"
    )
    pairs = [
        ("rdmadisk-rdma", "nvme-rdma"),
        ("rdmadisk-rdma", "rnbd"),
        ("rdmadisk-tcp", "nvme-tcp"),
        ("rdmadisk-rbd", "nvme-rdma-krbd"),
        ("rdmadisk-rbd", "fio-rbd"),
    ]
    pairs = [p for p in pairs if p[0] in systems and p[1] in systems]
    md.append("| workload | " + " | ".join(f"{x} ÷ {y}" for x, y in pairs) + " |")
    md.append("|---|" + "---|" * len(pairs))
    ratios, spreads = {}, {}
    for job in jobs:
        row = []
        for x, y in pairs:
            rs = ratio(samples, x, y, job)
            ratios[f"{x}/{y}/{job}"] = statistics.median(rs) if rs else None
            spreads[f"{x}/{y}/{job}"] = spread(rs)
            row.append(fmt_ratio(rs))
        md.append(f"| {TITLES[job]} ({FIGURES[job][1]} {UNITS[FIGURES[job][0]]} wins) | " + " | ".join(row) + " |")

    md.append("\n## Queue-depth scaling, 4 KiB random reads (IOPS)\n")
    qds = [1, 2, 4, 8, 16, 32]
    scal = {}
    sc_sys = [s for s in ("rdmadisk-rdma", "nvme-rdma") if s in systems]
    md.append("| system | " + " | ".join(f"QD{q}" for q in qds) + " | QD16 ÷ QD1 (spread) |")
    md.append("|---|" + "---|" * (len(qds) + 1))
    for s in sc_sys:
        vals = [fig(summ, s, f"rr4k_qd{q}", "iops") for q in qds]
        scal[s] = dict(zip(qds, vals))
        rs = rep_ratios(samples, s, "rr4k_qd16", "rr4k_qd1", "iops")
        spreads[f"{s}/rr4k_qd16/rr4k_qd1"] = spread(rs)
        md.append(f"| {s} | " + " | ".join(fmt(v, 0) for v in vals) + f" | {fmt_ratio(rs)} |")

    split = [(s, j) for s in ("rdmadisk-rdma", "rdmadisk-tcp") if s in systems for j in TITLES
             if fig(summ, s, j, "target_us") is not None]
    if split:
        md.append("\n## Where rdmadisk's time goes (medians of the repetitions' means, µs)\n")
        md.append(
            "The target counts the time from taking a request off its transport to posting its "
            "response (`service_us`), and the backing I/O's share of it; the rest of fio's "
            "latency is the client, the link and soft-RoCE's processing on both VMs.\n"
        )
        md.append("| system | workload | fio mean latency | in the target | of it backing I/O | outside the target |")
        md.append("|---|---|---|---|---|---|")
        for s, j in split:
            lat, tgt, bk = (fig(summ, s, j, f) for f in ("lat_mean_us", "target_us", "backing_us"))
            md.append(
                f"| {s} | {TITLES[j]} | {fmt(lat, 0)} | {fmt(tgt, 0)} | {fmt(bk, 0)} | "
                f"{fmt(lat - tgt if lat is not None and tgt is not None else None, 0)} |"
            )

    crc = next((s for s in samples if s["job"] == "crc32c_4k"), None)
    if crc:
        md.append(
            f"\nrdmadisk checks every transfer with CRC32C (rdmadisk-proto's software slice-by-8, in the module "
            f"and in the target): over a 4 KiB block it takes {fmt(crc.get('compute_us'), 0)} µs on the "
            f"compute VM and {fmt(crc.get('storage_us'), 0)} µs on the storage VM, on each 4 KiB I/O's path. "
            f"The peers here compute none (nvme-tcp's digests are off).\n"
        )

    gaps = [s for s in samples if s["job"] == "nic_gap"]
    if gaps:
        md.append("\n## NIC servicing under load (rxe0 deleted and added back under 4 KiB random reads at QD1)\n")
        md.append("| system | longest I/O gap (ms) | completions | fio stopped on an error | device still there |")
        md.append("|---|---|---|---|---|")
        for s in gaps:
            if s.get("skipped"):
                md.append(f"| {s['system']} | not measured: {s['skipped']} | | | |")
                ratios[f"{s['system']}/nic_gap_ms"] = None
                continue
            # I/O that failed never came back, and a disk that went away fails what comes after:
            # the gap between the completions fio logged says nothing then.
            lost = "the I/O failed" if s.get("fio_error") else None if s.get("device_left") else "the disk went away"
            gap = None if lost else s.get("gap_ms")
            md.append(
                f"| {s['system']} | {f'unbounded ({lost})' if lost else fmt(gap, 0)} | "
                f"{s.get('completions')} | {s.get('fio_error') or 'no'} | {'yes' if s.get('device_left') else 'no'} |"
            )
            ratios[f"{s['system']}/nic_gap_ms"] = gap

    floor = {s["job"]: s for s in samples if s["system"] == "floor"}
    md.append("\n## The floor (perftest between the VMs' soft-RoCE devices)\n")
    if floor:
        md.append("| test | typical (p50) µs | p99 µs | MB/s |")
        md.append("|---|---|---|---|")
        for k, s in floor.items():
            md.append(f"| {k} | {fmt(s.get('lat_p50_us'), 1)} | {fmt(s.get('lat_p99_us'), 1)} | {fmt(s.get('mb_s'), 1)} |")
        # Only RDMA Reads are timed (bench/peers-lib.sh, bp_floor, says why). A read's latency
        # is a round trip: of 64 B, two small one-way messages; of 4 KiB, one more 4 KiB one
        # way. A 4 KiB read of a disk is a small request, a 4 KiB RDMA Write and a small
        # response: read_lat(4 KiB) + read_lat(64 B) / 2.
        small, big = floor.get("ib_read_lat_64"), floor.get("ib_read_lat_4096")
        if small and big:
            fl = big["lat_p50_us"] + small["lat_p50_us"] / 2
            rd = fig(summ, "rdmadisk-rdma", "rr4k_qd1", "lat_p50_us")
            # The floor is measured once; the spread is that of rdmadisk's repetitions.
            rs = sorted(x["lat_p50_us"] / fl for x in timed(samples)
                        if x["system"] == "rdmadisk-rdma" and x["job"] == "rr4k_qd1" and x.get("lat_p50_us"))
            ratios["rdmadisk-rdma/floor/rr4k_qd1"] = rd / fl if rd else None
            spreads["rdmadisk-rdma/floor/rr4k_qd1"] = spread(rs)
            nv = fig(summ, "nvme-rdma", "rr4k_qd1", "lat_p50_us")
            md.append(
                f"\nFloor of a 4 KiB read at QD1: a small request, a 4 KiB RDMA Write and a small response "
                f"(ib_read_lat 4 KiB + half of ib_read_lat 64 B, p50s, on CQ events) = {fl:.0f} µs; "
                f"rdmadisk-rdma's p50 is {fmt(rd, 0)} µs, {fmt_ratio(rs)} × the floor"
                + (f"; nvme-rdma's {fmt(nv, 0)} µs, {nv / fl:.2f} × the floor." if nv else ".")
            )
    else:
        md.append("(not measured)")
    diag_tables(md, samples, systems)
    (d / "results.md").write_text("\n".join(md) + "\n")
    summary_json = {
        f"{k[0]}/{k[1]}": {f: {"median": v[0], "min": v[1], "max": v[2], "n": v[3]} for f, v in figs.items()}
        for k, figs in summ.items()
    }
    (d / "results.json").write_text(
        json.dumps(
            {
                "date": date,
                "kernel": a.kernel,
                "host": a.host,
                "secs": a.secs,
                "reps": a.reps,
                "summary": summary_json,
                "ratios": ratios,
                "ratio_spreads": spreads,
                "scaling": scal,
                "samples": samples,
            },
            indent=1,
        )
        + "\n"
    )
    plots(d, summ, systems, scal)
    print((d / "results.md").read_text())
    return 0


def diag_tables(md, samples, systems):
    """The diagnostic jobs (bp_diag): system calls and wake-ups per I/O on the storage VM, and
    how long a woken task waited for the CPU."""
    diag = {(s["system"], s["job"]): s for s in samples if s.get("diag")}
    if not diag:
        return
    md.append("\n## On the storage VM, per I/O (one traced job each: sched and raw_syscalls tracepoints)\n")
    md.append(
        "Tracing costs time per event, so these jobs enter no other table. The target's figures are "
        "rdmadisk-target's threads (the peers' targets run in the kernel: none); the VM's are every task's. "
        "Wake-up to run: from sched_wakeup to the sched_switch that runs the task; the last column gives "
        "the share of the target's waits longer than EEVDF's 0.75 ms base slice.\n"
    )
    md.append("| system | workload | target syscalls | target wake-ups | VM syscalls | VM wake-ups | "
              "target wake→run p50 / p99 µs | all tasks wake→run p50 / p99 µs | target waits > 0.75 ms | "
              "who ran while the target waited > 0.1 ms (µs) |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in systems:
        for job in ("rr4k_qd1", "rr4k_qd16"):
            x = diag.get((s, job))
            if not x:
                continue
            if not s.startswith("rdmadisk"):
                # rdmadisk-target idles through the peers' jobs: its threads are not their target.
                x = {**x, "target_syscalls_per_io": None, "target_wakeups_per_io": None,
                     "wake_to_run_target": None, "ran_while_target_waited_us": None}
            wt, wa = x.get("wake_to_run_target") or {}, x.get("wake_to_run_all") or {}
            lost = f" (trace lost {x['trace_overrun']} events)" if x.get("trace_overrun") else ""
            who = ", ".join(f"{k} {v}" for k, v in (x.get("ran_while_target_waited_us") or {}).items()) or "–"
            over = wt.get("over_base_slice")
            md.append(
                f"| {s} | {TITLES[job]}{lost} | {fmt(x.get('target_syscalls_per_io'), 1)} | "
                f"{fmt(x.get('target_wakeups_per_io'), 1)} | {fmt(x.get('vm_syscalls_per_io'), 1)} | "
                f"{fmt(x.get('vm_wakeups_per_io'), 1)} | {fmt(wt.get('p50_us'), 0)} / {fmt(wt.get('p99_us'), 0)} | "
                f"{fmt(wa.get('p50_us'), 0)} / {fmt(wa.get('p99_us'), 0)} | "
                f"{'–' if over is None else f'{100 * over:.0f}%'} | {who} |"
            )


def plots(d, summ, systems, scal):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: no matplotlib, no plots", file=sys.stderr)
        return
    # Latency: p50 bars with p99 markers, per QD1 workload.
    fig_, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, job in zip(axes, ("rr4k_qd1", "rw4k_qd1")):
        p50 = [fig(summ, s, job, "lat_p50_us") or 0 for s in systems]
        p99 = [fig(summ, s, job, "lat_p99_us") or 0 for s in systems]
        x = range(len(systems))
        ax.bar(x, p50, label="p50")
        ax.scatter(x, p99, color="black", marker="_", s=400, label="p99")
        ax.set_xticks(list(x), systems, rotation=30, ha="right")
        ax.set_ylabel("latency (µs)")
        ax.set_title(TITLES[job])
        ax.legend()
    fig_.tight_layout()
    fig_.savefig(d / "latency.png", dpi=100)
    plt.close(fig_)
    # Throughput: IOPS at QD16, MB/s at 128 KiB.
    fig_, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, job in zip(axes, ("rr4k_qd16", "sr128k_qd4", "sw128k_qd4")):
        f = FIGURES[job][0]
        vals = [fig(summ, s, job, f) or 0 for s in systems]
        lo = [v - (summ.get((s, job), {}).get(f, (0, 0, 0))[1]) for s, v in zip(systems, vals)]
        hi = [(summ.get((s, job), {}).get(f, (0, 0, 0))[2]) - v for s, v in zip(systems, vals)]
        ax.bar(range(len(systems)), vals, yerr=[lo, hi], capsize=4)
        ax.set_xticks(range(len(systems)), systems, rotation=30, ha="right")
        ax.set_ylabel(UNITS[f])
        ax.set_title(TITLES[job])
    fig_.tight_layout()
    fig_.savefig(d / "iops.png", dpi=100)
    plt.close(fig_)
    if scal:
        fig_, ax = plt.subplots(figsize=(6, 4))
        for s, byq in scal.items():
            qs = [q for q, v in byq.items() if v]
            ax.plot(qs, [byq[q] for q in qs], marker="o", label=s)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("iodepth")
        ax.set_ylabel("IOPS (4 KiB random reads)")
        ax.set_title("Queue-depth scaling")
        ax.legend()
        fig_.tight_layout()
        fig_.savefig(d / "scaling.png", dpi=100)
        plt.close(fig_)


if __name__ == "__main__":
    sys.exit(main())
