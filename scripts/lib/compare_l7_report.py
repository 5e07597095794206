#!/usr/bin/env python3
"""Report for scripts/compare-l7.sh: runs.tsv -> summary.md (also printed) and results.json.

Environment: OUT, MODE, DURATION, WARMUP, REPEATS, CONNS, THREADS, MIX, HAPROXY_REUSE,
PROXY_CPU, LOAD_CPU, CLK_TCK, CPU_MODEL, KERNEL, NCPU, STAMP, V_SWITCHYARD, V_HAPROXY, V_NGINX.
"""
import csv
import json
import os
import statistics
import sys

TARGET = 1.3  # PRODUCT.md section 3: >= 1.3x more efficient than the better peer
SATURATED = 0.95  # a core busier than this over a run counts as saturated


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v, spec=".2f"):
    return "n/a" if v is None else format(v, spec)


def main():
    tsv = sys.argv[1]
    env = os.environ
    out = env["OUT"]
    with open(tsv, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for r in rows:
        for k, v in list(r.items()):
            if k != "proxy":
                r[k] = num(v)
    order = []
    for r in rows:
        if r["proxy"] not in order:
            order.append(r["proxy"])
    versions = {
        "switchyard": env.get("V_SWITCHYARD", ""),
        "haproxy": env.get("V_HAPROXY", ""),
        "nginx": env.get("V_NGINX", ""),
    }

    per = {}
    for p in order:
        rs = [r for r in rows if r["proxy"] == p]
        us = [r["us_per_req"] for r in rs]
        med = lambda k: statistics.median([r[k] for r in rs if r[k] is not None]) if any(r[k] is not None for r in rs) else None
        errors = sum(int(r["non2xx"] or 0) + int(r["sock_errors"] or 0) for r in rs)
        req_total = sum(r["requests"] for r in rs)
        wrk_cpu = [r["wrk_cpu_s"] for r in rs if r["wrk_cpu_s"] is not None]
        per[p] = {
            "version": versions.get(p, ""),
            "runs": len(rs),
            "us_cpu_per_request": {"median": statistics.median(us), "min": min(us), "max": max(us), "all": us},
            "requests_per_s_median": med("rps"),
            "latency_us_median": {"avg": med("lat_avg_us"), "p50": med("lat_p50_us"), "p99": med("lat_p99_us")},
            "errors": {"non2xx": sum(int(r["non2xx"] or 0) for r in rs), "socket": sum(int(r["sock_errors"] or 0) for r in rs)},
            "flagged_runs": [int(r["rep"]) for r in rs if (r["non2xx"] or 0) + (r["sock_errors"] or 0) > 0],
            "proxy_core_share_median": med("proxy_util"),
            "core_proxy_busy_median": med("core0_busy"),
            "core_load_busy_median": med("core1_busy"),
            "wrk_cpu_s_median": statistics.median(wrk_cpu) if wrk_cpu else None,
            "origins_cpu_s_median": med("origins_cpu_s"),
            "load_side_us_per_request": (
                sum((r["wrk_cpu_s"] or 0) + r["origins_cpu_s"] for r in rs) * 1e6 / req_total if req_total else None
            ),
            "errors_total": errors,
        }

    peers = [p for p in order if p != "switchyard"]
    ratio = None
    best_peer = None
    if "switchyard" in per and peers:
        best_peer = min(peers, key=lambda p: per[p]["us_cpu_per_request"]["median"])
        sw = per["switchyard"]["us_cpu_per_request"]["median"]
        if sw > 0:
            ratio = per[best_peer]["us_cpu_per_request"]["median"] / sw

    mode = env.get("MODE", "keepalive")
    title = {
        "keepalive": "L7 keep-alive, 128 B, `.png` rule",
        "close": "L7 CPS, 1 request per connection, 128 B, `.png` rule",
    }[mode]
    lines = [f"# compare-l7: {title}", ""]
    lines.append(
        f"{env.get('STAMP','')} · {env.get('CPU_MODEL','?')} · {env.get('NCPU','?')} CPUs · {env.get('KERNEL','?')} · "
        f"load average before/after {env.get('LOADAVG_BEFORE','?')} / {env.get('LOADAVG_AFTER','?')} · "
        f"proxy on core {env.get('PROXY_CPU')}, wrk + 3 origins on core {env.get('LOAD_CPU')}"
    )
    lines.append(
        f"wrk -t{env.get('THREADS')} -c{env.get('CONNS')} -d{env.get('DURATION')}s (+{env.get('WARMUP')}s warm-up), "
        f"{env.get('MIX')}; {env.get('REPEATS')} runs per proxy, interleaved; HAProxy http-reuse {env.get('HAPROXY_REUSE')}; "
        f"CPU from /proc/PID/stat utime+stime at CLK_TCK={env.get('CLK_TCK')}"
    )
    lines.append("")
    lines.append("| proxy | version | median µs CPU/request | spread (min–max) | req/s (median) | latency p50 / p99 | errors | proxy core share | load core busy |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in order:
        d = per[p]
        u = d["us_cpu_per_request"]
        lat = d["latency_us_median"]
        err = d["errors"]
        errs = f"{err['non2xx']} non-2xx, {err['socket']} socket" if d["errors_total"] else "0"
        if d["flagged_runs"]:
            errs += f" (runs {','.join(map(str, d['flagged_runs']))} FLAGGED)"
        lines.append(
            f"| {p} | {d['version']} | {u['median']:.2f} | {u['min']:.2f}–{u['max']:.2f} | {d['requests_per_s_median']:.0f} | "
            f"{(lat['p50'] or 0)/1000:.2f} / {(lat['p99'] or 0)/1000:.2f} ms | {errs} | "
            f"{(d['proxy_core_share_median'] or 0)*100:.0f} % | {(d['core_load_busy_median'] or 0)*100:.0f} % |"
        )
    lines.append("")
    if ratio is not None:
        verdict = "meets" if ratio >= TARGET else "misses"
        lines.append(
            f"**Ratio:** better peer / switchyard = {ratio:.2f}× ({best_peer} {per[best_peer]['us_cpu_per_request']['median']:.2f} µs "
            f"vs switchyard {per['switchyard']['us_cpu_per_request']['median']:.2f} µs CPU per request; > 1 means switchyard is "
            f"more efficient); target ≥ {TARGET}× — {verdict} it."
        )
    elif peers:
        lines.append("**Ratio:** n/a (switchyard not measured)")
    lines.append("")

    notes = []
    for p in order:
        d = per[p]
        if d["errors_total"]:
            notes.append(f"- {p}: runs with errors: {d['flagged_runs']} — their figures are suspect.")
        load = d["core_load_busy_median"] or 0
        share = d["proxy_core_share_median"] or 0
        if load >= SATURATED:
            notes.append(
                f"- {p}: load core {env.get('LOAD_CPU')} was saturated ({load*100:.0f} % busy; wrk {d['wrk_cpu_s_median']} s, "
                f"origins {d['origins_cpu_s_median']:.2f} s CPU per run) while the proxy used {share*100:.0f} % of its core: "
                f"req/s measures the load side, CPU per request is still the figure."
            )
        busy0 = d["core_proxy_busy_median"] or 0
        if busy0 - share > 0.10:
            notes.append(
                f"- {p}: the proxy core {env.get('PROXY_CPU')} was {busy0*100:.0f} % busy but the proxy used only {share*100:.0f} %: "
                f"other processes ran on the proxy's core during the run; its figures are noisy."
            )
        if load < SATURATED and share < 0.9:
            notes.append(f"- {p}: proxy used only {share*100:.0f} % of its core and the load core was {load*100:.0f} % busy.")
    lines.append("Load side (wrk + origins on the load core), per proxy: " + "; ".join(
        f"{p}: wrk {per[p]['wrk_cpu_s_median']} s, origins {per[p]['origins_cpu_s_median']:.2f} s CPU per run "
        f"({per[p]['load_side_us_per_request']:.1f} µs/request)" for p in order))
    if notes:
        lines.append("")
        lines.append("Flags:")
        lines.extend(notes)
    lines.append("")
    lines.append("Per run (in the order run):")
    lines.append("")
    lines.append("| proxy | run | requests | req/s | µs CPU/request | proxy core share | proxy core busy | load core busy | wrk CPU s | origins CPU s | errors |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["rep"], order.index(r["proxy"]))):
        lines.append(
            f"| {r['proxy']} | {int(r['rep'])} | {int(r['requests'])} | {r['rps']:.0f} | {r['us_per_req']:.2f} | "
            f"{r['proxy_util']*100:.0f} % | {r['core0_busy']*100:.0f} % | {r['core1_busy']*100:.0f} % | "
            f"{fmt(r['wrk_cpu_s'])} | "
            f"{r['origins_cpu_s']:.2f} | {int(r['non2xx'] or 0) + int(r['sock_errors'] or 0)} |"
        )
    lines.append("")
    lines.append("Per run: `runs.tsv`; wrk outputs `wrk-PROXY-N.txt`; configs `switchyard.toml`, `haproxy.cfg`, `nginx.conf`.")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(md)
    result = {
        "test": title,
        "mode": mode,
        "timestamp": env.get("STAMP"),
        "machine": {"cpu_model": env.get("CPU_MODEL"), "cpus": num(env.get("NCPU")), "kernel": env.get("KERNEL"), "loadavg_before": env.get("LOADAVG_BEFORE"), "loadavg_after": env.get("LOADAVG_AFTER"), "clk_tck": num(env.get("CLK_TCK"))},
        "setup": {
            "duration_s": num(env.get("DURATION")), "warmup_s": num(env.get("WARMUP")), "repeats": num(env.get("REPEATS")),
            "connections": num(env.get("CONNS")), "wrk_threads": num(env.get("THREADS")), "mix": env.get("MIX"),
            "haproxy_http_reuse": env.get("HAPROXY_REUSE"), "proxy_core": num(env.get("PROXY_CPU")), "load_core": num(env.get("LOAD_CPU")),
        },
        "proxies": per,
        "better_peer": best_peer,
        "ratio_peer_over_switchyard": ratio,
        "target_ratio": TARGET,
        "runs": rows,
    }
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
    sys.stdout.write(md)
    sys.stdout.write(f"\n(written to {out})\n")


if __name__ == "__main__":
    main()
