#!/usr/bin/env python3
"""Reads the variants' rows.json written by scripts/policy-frontier.sh and
prints a Markdown table of each variant's worst ratios against issue 45's
goals (as `gpool bench policies` judged them), on the training rows and on
the held-out ones apart, then draws the training points as an SVG scatter
with the goals' corner and plain LAS for reference.

usage: policy_frontier.py DIR OUT.svg
"""
import json
import os
import sys

AVG_GOAL, P99_GOAL = 1.15, 1.10
ORDER = {"24h": 0, "36h": 1, "48h": 2, "60h": 3, "96h": 4, "off": 5}


def worst(rows):
    """Worst avg ÷ best baseline, worst p99 ÷ FIFO, rows missing a goal."""
    if not rows:
        return None
    avg = max(r["goals"]["avg_vs_best_baseline"] for r in rows)
    p99 = max(r["goals"]["p99_vs_fifo"] for r in rows)
    return avg, p99, sum(1 for r in rows if r["misses"]), len(rows)


def las_point(rows):
    """Plain LAS on the same axes (its average ÷ the best baseline's, itself included)."""
    avg = max(
        r["runs"]["las"]["avg_jct_s"] / min(r["runs"][b]["avg_jct_s"] for b in ("fifo", "fifo-backfill", "las", "fair"))
        for r in rows
    )
    p99 = max(r["runs"]["las"]["p99_jct_s"] / r["runs"]["fifo"]["p99_jct_s"] for r in rows)
    return avg, p99


def main():
    src, out = sys.argv[1], sys.argv[2]
    points, las = [], None
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name, "rows.json")
        if not os.path.exists(path):
            continue
        rows = json.load(open(path))
        after, max_runtime = name.split("_", 1)
        training = [r for r in rows if not r["held_out"]]
        held_out = [r for r in rows if r["held_out"]]
        points.append((after, max_runtime, worst(training), worst(held_out)))
        las = las_point(training)
    points.sort(key=lambda p: (ORDER.get(p[0], 99), int(p[1].rstrip("h"))))
    print("| guard after | never promoted past | training: worst avg ÷ best baseline | worst p99 ÷ FIFO | rows missing | held-out rows missing |")
    print("|---|---|---:|---:|---:|---:|")
    for after, max_runtime, t, h in points:
        held = f"{h[2]} of {h[3]}" if h else "–"
        shown = "–" if after == "off" else max_runtime
        print(f"| {after} | {shown} | {t[0]:.3f} | {t[1]:.3f} | {t[2]} of {t[3]} | {held} |")
    if las:
        print(f"| plain LAS (reference) | | {las[0]:.3f} | {las[1]:.3f} | | |")
    print(f"\nGoals: avg ÷ best baseline ≤ {AVG_GOAL}, p99 ÷ FIFO ≤ {P99_GOAL}, and no baseline better on both, on every row.")

    # SVG: x = worst avg ÷ best baseline, y = worst p99 ÷ FIFO (training rows).
    W, H, L, B, T, R = 640, 420, 70, 50, 30, 150
    xs = [p[2][0] for p in points] + [1.0, AVG_GOAL] + ([las[0]] if las else [])
    ys = [p[2][1] for p in points] + [1.0, P99_GOAL] + ([las[1]] if las else [])
    x0, x1 = 0.95, max(xs) * 1.05
    y0, y1 = min(ys) - 0.05, max(ys) * 1.05

    def X(v):
        return L + (v - x0) / (x1 - x0) * (W - L - R)

    def Y(v):
        return H - B - (v - y0) / (y1 - y0) * (H - B - T)

    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="DejaVu Sans, sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<rect x="{X(x0):.1f}" y="{Y(P99_GOAL):.1f}" width="{X(AVG_GOAL) - X(x0):.1f}" height="{Y(y0) - Y(P99_GOAL):.1f}" fill="#d8f0d8"/>',
         f'<text x="{X(x0) + 4:.1f}" y="{Y(P99_GOAL) + 14:.1f}" fill="#2a7a2a">the goals</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
         f'<text x="{(L + W - R) / 2:.0f}" y="{H - 12}" text-anchor="middle">worst average JCT ÷ best baseline (training rows)</text>',
         f'<text x="16" y="{(T + H - B) / 2:.0f}" transform="rotate(-90 16 {(T + H - B) / 2:.0f})" text-anchor="middle">worst p99 JCT ÷ FIFO</text>']
    step = 0.5 if x1 - x0 > 1.5 else 0.1
    v = round(x0, 1)
    while v <= x1:
        if v >= x0:
            s.append(f'<line x1="{X(v):.1f}" y1="{H - B}" x2="{X(v):.1f}" y2="{H - B + 4}" stroke="black"/><text x="{X(v):.1f}" y="{H - B + 16}" text-anchor="middle">{v:.1f}</text>')
        v = round(v + step, 2)
    v = round(y0, 1)
    while v <= y1:
        if v >= y0:
            s.append(f'<line x1="{L - 4}" y1="{Y(v):.1f}" x2="{L}" y2="{Y(v):.1f}" stroke="black"/><text x="{L - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
        v = round(v + 0.1, 2)
    colors = {"18h": "#8e44ad", "24h": "#1f5fbf", "36h": "#16a085", "72h": "#c0392b"}
    for max_runtime, color in colors.items():
        pts = [p for p in points if p[1] == max_runtime and p[0] != "off"]
        path = " ".join(f"{X(p[2][0]):.1f},{Y(p[2][1]):.1f}" for p in pts)
        s.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-dasharray="3,3"/>')
        for p in pts:
            s.append(f'<circle cx="{X(p[2][0]):.1f}" cy="{Y(p[2][1]):.1f}" r="4" fill="{color}"/>')
            s.append(f'<text x="{X(p[2][0]) + 6:.1f}" y="{Y(p[2][1]) - 5:.1f}" fill="{color}">{p[0]}</text>')
    for p in points:
        if p[0] == "off":
            s.append(f'<circle cx="{X(p[2][0]):.1f}" cy="{Y(p[2][1]):.1f}" r="4" fill="none" stroke="black"/>')
            s.append(f'<text x="{X(p[2][0]) + 6:.1f}" y="{Y(p[2][1]) + 12:.1f}">no guard</text>')
    if las:
        s.append(f'<rect x="{X(las[0]) - 4:.1f}" y="{Y(las[1]) - 4:.1f}" width="8" height="8" fill="#555"/>')
        s.append(f'<text x="{X(las[0]) + 7:.1f}" y="{Y(las[1]) + 4:.1f}" fill="#555">LAS</text>')
    lx = W - R + 12
    s.append(f'<text x="{lx}" y="{T + 10}" font-weight="bold">never promoted</text>')
    s.append(f'<text x="{lx}" y="{T + 24}" font-weight="bold">past (run time)</text>')
    for i, (max_runtime, color) in enumerate(colors.items()):
        s.append(f'<circle cx="{lx + 5}" cy="{T + 40 + i * 18}" r="4" fill="{color}"/><text x="{lx + 14}" y="{T + 44 + i * 18}">{max_runtime}</text>')
    s.append(f'<text x="{lx}" y="{T + 130}">labels: the guard\'s</text><text x="{lx}" y="{T + 144}">age (after)</text>')
    s.append("</svg>")
    open(out, "w").write("\n".join(s) + "\n")


if __name__ == "__main__":
    main()
