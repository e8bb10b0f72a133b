#!/usr/bin/env python3
"""Reads the variants' rows.json written by scripts/policy-frontier.sh and
prints a Markdown table of each variant's worst ratios, then draws them as
an SVG scatter with the goal's corner and plain LAS for reference.

usage: policy_frontier.py DIR OUT.svg
"""
import json
import os
import sys


def worst(rows, policy):
    avg = max(r["runs"][policy]["avg_jct_s"] / r["runs"]["srtf"]["avg_jct_s"] for r in rows)
    p99 = max(r["runs"][policy]["p99_jct_s"] / r["runs"]["fifo"]["p99_jct_s"] for r in rows)
    return avg, p99


def main():
    src, out = sys.argv[1], sys.argv[2]
    points = []
    las = None
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name, "rows.json")
        if not os.path.exists(path):
            continue
        rows = json.load(open(path))
        within, guard = name.split("_", 1)
        avg, p99 = worst(rows, "default")
        misses = sum(1 for r in rows if r["misses"])
        points.append((within, guard, avg, p99, misses, len(rows)))
        las = worst(rows, "las")
    order = {"40h": 0, "60h": 1, "80h": 2, "100h": 3, "150h": 4, "200h": 5, "off": 6}
    points.sort(key=lambda p: (p[0], order.get(p[1], 99)))
    print("| within a level | guard after | worst avg ÷ SRTF | worst p99 ÷ FIFO | rows missing a goal |")
    print("|---|---|---:|---:|---:|")
    for w, g, a, p, m, n in points:
        print(f"| {w} | {g} | {a:.3f} | {p:.3f} | {m} of {n} |")
    if las:
        print(f"| plain LAS (reference) | none | {las[0]:.3f} | {las[1]:.3f} | |")
    print("\nGoal: avg ÷ SRTF ≤ 1.3 and p99 ÷ FIFO ≤ 1.0 on every row.")

    # SVG: x = worst avg ÷ SRTF, y = worst p99 ÷ FIFO.
    W, H, L, B, T, R = 640, 420, 70, 50, 30, 150
    xs = [p[2] for p in points] + [1.0, 1.3] + ([las[0]] if las else [])
    ys = [p[3] for p in points] + [0.95, 1.0] + ([las[1]] if las else [])
    x0, x1 = 1.0, max(xs) * 1.05
    y0, y1 = min(ys) - 0.05, max(ys) * 1.05

    def X(v):
        return L + (v - x0) / (x1 - x0) * (W - L - R)

    def Y(v):
        return H - B - (v - y0) / (y1 - y0) * (H - B - T)

    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="DejaVu Sans, sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<rect x="{X(x0):.1f}" y="{Y(1.0):.1f}" width="{X(1.3) - X(x0):.1f}" height="{Y(y0) - Y(1.0):.1f}" fill="#d8f0d8"/>',
         f'<text x="{X(x0) + 4:.1f}" y="{Y(1.0) + 14:.1f}" fill="#2a7a2a">the goals</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
         f'<text x="{(L + W - R) / 2:.0f}" y="{H - 12}" text-anchor="middle">worst average JCT ÷ SRTF (ITP training rows)</text>',
         f'<text x="16" y="{(T + H - B) / 2:.0f}" transform="rotate(-90 16 {(T + H - B) / 2:.0f})" text-anchor="middle">worst p99 JCT ÷ FIFO</text>']
    step = 0.5 if x1 - x0 > 1.5 else 0.25
    v = x0
    while v <= x1:
        s.append(f'<line x1="{X(v):.1f}" y1="{H - B}" x2="{X(v):.1f}" y2="{H - B + 4}" stroke="black"/><text x="{X(v):.1f}" y="{H - B + 16}" text-anchor="middle">{v:.2f}</text>')
        v += step
    v = round(y0, 1)
    while v <= y1:
        if v >= y0:
            s.append(f'<line x1="{L - 4}" y1="{Y(v):.1f}" x2="{L}" y2="{Y(v):.1f}" stroke="black"/><text x="{L - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
        v = round(v + 0.1, 2)
    colors = {"submit": "#1f5fbf", "gittins": "#c0392b"}
    for within in ("submit", "gittins"):
        pts = [p for p in points if p[0] == within]
        path = " ".join(f"{X(p[2]):.1f},{Y(p[3]):.1f}" for p in pts)
        s.append(f'<polyline points="{path}" fill="none" stroke="{colors[within]}" stroke-dasharray="3,3"/>')
        for p in pts:
            s.append(f'<circle cx="{X(p[2]):.1f}" cy="{Y(p[3]):.1f}" r="4" fill="{colors[within]}"/>')
            s.append(f'<text x="{X(p[2]) + 6:.1f}" y="{Y(p[3]) - 5:.1f}" fill="{colors[within]}">{p[1]}</text>')
    if las:
        s.append(f'<rect x="{X(las[0]) - 4:.1f}" y="{Y(las[1]) - 4:.1f}" width="8" height="8" fill="#555"/>')
        s.append(f'<text x="{X(las[0]) + 7:.1f}" y="{Y(las[1]) + 4:.1f}" fill="#555">LAS</text>')
    lx = W - R + 12
    s.append(f'<text x="{lx}" y="{T + 10}" font-weight="bold">within a level</text>')
    for i, (within, label) in enumerate((("submit", "submit order (default)"), ("gittins", "Gittins index"))):
        s.append(f'<circle cx="{lx + 5}" cy="{T + 28 + i * 18}" r="4" fill="{colors[within]}"/><text x="{lx + 14}" y="{T + 32 + i * 18}">{label}</text>')
    s.append(f'<text x="{lx}" y="{T + 80}">labels: starvation</text><text x="{lx}" y="{T + 94}">guard age</text>')
    s.append("</svg>")
    open(out, "w").write("\n".join(s) + "\n")


if __name__ == "__main__":
    main()
