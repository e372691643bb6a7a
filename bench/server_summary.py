"""Summaries of the server benchmarks: reads the `mmserve bench` JSON reports (and /metrics snapshots, RSS
samples) that bench/server_batching.sh, server_priority.sh and server_overload.sh leave in OUT_DIR, prints the
table and the ratio against the target, and writes OUT_DIR/server_<name>.json keyed by commit.

    python3 bench/server_summary.py batching|priority|overload OUT_DIR --commit C --host H

Run by those scripts; not meant to be run alone except to re-print a finished run.
"""
import argparse
import datetime
import json
import os
import re
import sys


def load(out, name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)


def lat(stats, key):
    return stats["latency_ms"][key] if stats["latency_ms"] else float("nan")


def histogram_sum_count(path, metric, model):
    """(sum, count) of a histogram's series for one model (summed over its other labels)."""
    total = {"sum": 0.0, "count": 0.0}
    pattern = re.compile(r"^%s_(sum|count)\{([^}]*)\}\s+(\S+)" % re.escape(metric))
    with open(path) as f:
        for line in f:
            m = pattern.match(line)
            if m and f'model="{model}"' in m.group(2):
                total[m.group(1)] += float(m.group(3))
    return total["sum"], total["count"]


def mean_batch(out, run, model):
    try:
        s0, c0 = histogram_sum_count(os.path.join(out, run + ".metrics.before"), "mmserve_batch_size", model)
        s1, c1 = histogram_sum_count(os.path.join(out, run + ".metrics.after"), "mmserve_batch_size", model)
    except OSError:
        return float("nan")
    return (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan")


def save(out, name, args, payload):
    payload = {"commit": args.commit, "date": datetime.date.today().isoformat(), "host": args.host,
               "settings": args.note, "load_average": os.getloadavg(), **payload}
    path = os.path.join(out, f"server_{name}.json")
    with open(path, "w") as f:
        json.dump({args.commit: payload}, f, indent=1)
    print(f"(written {path})")


def batching(args):
    rows = []
    print("| requests | batched ok/s | batch-1 ok/s | ratio | batched p50 / p99 ms | batch-1 p50 / p99 ms "
          "| mean batch (batched) |")
    print("|---|---|---|---|---|---|---|")
    for kind in args.kinds.split():
        b = load(args.out, f"batching_{kind}_clip-batched")["overall"]
        one = load(args.out, f"batching_{kind}_clip-b1")["overall"]
        ratio = b["throughput_ok_per_s"] / one["throughput_ok_per_s"] if one["throughput_ok_per_s"] else float("inf")
        mb = mean_batch(args.out, f"batching_{kind}_clip-batched", "clip-batched")
        rows.append({"kind": kind, "batched": b, "b1": one, "ratio": ratio, "mean_batch": mb})
        print(f"| {kind} | {b['throughput_ok_per_s']:.1f} | {one['throughput_ok_per_s']:.1f} | **{ratio:.2f}x** "
              f"| {lat(b, 'p50'):.0f} / {lat(b, 'p99'):.0f} | {lat(one, 'p50'):.0f} / {lat(one, 'p99'):.0f} "
              f"| {mb:.1f} |")
        for name, s in (("batched", b), ("batch-1", one)):
            bad = {k: s[k] for k in ("errors", "transport_errors") if s[k]}
            if bad:
                print(f"  note: {kind} {name} had {bad}")
    worst = min(r["ratio"] for r in rows)
    print(f"target >= 3x: {'met' if worst >= 3 else 'NOT met'} (lowest ratio {worst:.2f}x)")
    save(args.out, "batching", args, {"rows": rows, "target_ratio": 3.0, "lowest_ratio": worst})


def priority(args):
    unloaded = load(args.out, "priority_unloaded")["overall"]
    base = lat(unloaded, "p99")
    print(f"unloaded high-priority texts: p50 {lat(unloaded, 'p50'):.1f} ms, p99 {base:.1f} ms "
          f"({unloaded['ok']} ok)")
    print("| flood | policy | high p50 ms | high p99 ms | p99 / unloaded | high ok / sent | flood ok/s | flood 429 |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for flood in ("image", "text"):
        for policy in ("qos", "fifo"):
            if not os.path.exists(os.path.join(args.out, f"priority_{policy}_{flood}_high.json")):
                continue  # POLICIES / FLOODS ran a subset
            h = load(args.out, f"priority_{policy}_{flood}_high")["overall"]
            f = load(args.out, f"priority_{policy}_{flood}_flood")["overall"]
            ratio = lat(h, "p99") / base
            rows.append({"flood": flood, "policy": policy, "high": h, "flood_stats": f, "ratio": ratio})
            print(f"| {flood} | {policy} | {lat(h, 'p50'):.1f} | {lat(h, 'p99'):.1f} | **{ratio:.2f}x** "
                  f"| {h['ok']} / {h['sent']} | {f['throughput_ok_per_s']:.1f} | {f['rejected_429']} |")
    qos = [r["ratio"] for r in rows if r["policy"] == "qos"]
    print(f"target (qos) p99 <= 2x unloaded: {'met' if max(qos) <= 2 else 'NOT met'} (worst {max(qos):.2f}x)")
    save(args.out, "priority", args, {"unloaded": unloaded, "rows": rows, "target_ratio": 2.0})


def overload(args):
    cap = load(args.out, "overload_capacity")["overall"]
    run = load(args.out, "overload_2x")
    o = run["overall"]
    with open(os.path.join(args.out, "overload_window.txt")) as f:
        t_start, t_end = (float(x) for x in f.read().split())
    samples = []
    with open(os.path.join(args.out, "overload_rss.txt")) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                samples.append((float(parts[0]), int(parts[1]) / 1024.0))
    during = [(t - t_start, mb) for t, mb in samples if t_start <= t <= t_end]
    before = [mb for t, mb in samples if t < t_start]
    half = (t_end - t_start) / 2
    first = max((mb for t, mb in during if t < half), default=float("nan"))
    second = max((mb for t, mb in during if t >= half), default=float("nan"))
    growth = second / first - 1 if first == first and first > 0 else float("nan")
    print(f"capacity: {cap['throughput_ok_per_s']:.1f} ok/s (p50 {lat(cap, 'p50'):.0f} ms)")
    print(f"overload: offered {run['offered_rate']:.1f} req/s for {run['window_s']:.0f} s: sent {o['sent']}, "
          f"ok {o['ok']} ({o['throughput_ok_per_s']:.1f}/s), 429 {o['rejected_429']}, other HTTP errors "
          f"{o['errors'] or 0}, transport errors {o['transport_errors'] or 0}, client drops "
          f"{o['dropped_by_client']}; ok latency p50 {lat(o, 'p50'):.0f} ms p99 {lat(o, 'p99'):.0f} ms")
    print(f"RSS: before {before[-1] if before else float('nan'):.1f} MiB; max first half {first:.1f} MiB, "
          f"max second half {second:.1f} MiB (growth {growth * 100:+.1f}%)")
    print("RSS over the overload window (s: MiB): " + ", ".join(
        f"{t:.0f}: {mb:.0f}" for i, (t, mb) in enumerate(during) if i % 6 == 0))
    checks = {
        "429 > 0": o["rejected_429"] > 0,
        "no other HTTP error": not o["errors"],
        "no transport error": not o["transport_errors"],
        "RSS second half <= first half + 10%": growth <= 0.10,
    }
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    save(args.out, "overload", args, {"capacity": cap, "overload": run, "rss_mib": during,
                                      "rss_growth": growth, "checks": checks})
    return 0 if all(checks.values()) else 1


def header(args):
    load = os.getloadavg()
    print(f"commit {args.commit}, {datetime.date.today().isoformat()}, {args.host}; {args.note}")
    print(f"machine load average at the end (1/5/15 min): {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("which", choices=["batching", "priority", "overload"])
    p.add_argument("out")
    p.add_argument("--commit", default="unknown")
    p.add_argument("--host", default="")
    p.add_argument("--note", default="", help="the run's settings, stored with the figures")
    p.add_argument("--kinds", default="text image mix", help="batching: the request kinds that were run")
    args = p.parse_args()
    header(args)
    return {"batching": batching, "priority": priority, "overload": overload}[args.which](args) or 0


if __name__ == "__main__":
    sys.exit(main())
