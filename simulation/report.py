"""The report of a scenario run: timeline plots (PNG) and an ``index.html`` that shows them with the summary.

Made from the ``summary.json`` and ``timeline.json`` that :class:`~simulation.runner.Runner` writes, so
``python -m simulation report DIR`` can render a run again. Plots (matplotlib, no display needed):

* ``throughput.png``: records/s of every exchange, as its queue's monitor saw them;
* ``offered.png``: records/s the publishers of each queue were sending (their scenario's rates) beside what
  each subscriber group received;
* ``exchanges.png``: how many exchanges each queue had;
* ``latency.png``: end-to-end latency p50 and p99 of every subscriber, per second;
* ``gaps.png``: records every subscriber group found missing in gaps (dropped on the way), cumulative.

Faults are red vertical lines on every plot; relocations grey ticks, scale-outs and scale-ins green and
orange ticks.
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

from roq.errors import ConfigError

__all__ = ["render", "latency_by_exchanges", "PLOTS"]

PLOTS = ("throughput.png", "offered.png", "exchanges.png", "latency.png", "gaps.png")
_MARKS = {"relocated": ("grey", 0.4), "scale_out": ("green", 0.8), "scale_in": ("orange", 0.8)}


def _read(out_dir: str, name: str) -> dict[str, Any]:
    path = os.path.join(out_dir, name)
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: not a results document")
    return document


def latency_by_exchanges(timeline: dict[str, Any]) -> list[dict[str, Any]]:
    """End-to-end latency of the subscribers that keep up, by how many exchanges their queue had (pure).

    Every per-second point of a keep-up subscriber is filed under the exchange count of the monitor
    sample taken last before it. Returns one row per queue and count: the seconds behind it and the
    median over those seconds of the per-second p50 and p99 (ms): "is latency flat as the queue scales?".
    """
    started = float(timeline.get("started") or 0.0)
    samples = timeline.get("samples") or []
    counts: dict[str, list[tuple[float, int]]] = {q: [] for s in samples for q in (s.get("queues") or {})}
    for s in samples:
        for queue, seen in counts.items():  # 0: the monitor was not heard then (restarting, moving)
            seen.append((float(s["t"]), len(((s.get("queues") or {}).get(queue) or {}).get("exchanges") or {})))
    cells: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for curve in timeline.get("subscribers") or []:
        queue = curve.get("queue")
        if not curve.get("keeps_up", True) or queue not in counts:
            continue
        for p in curve.get("points") or []:
            p50, p99 = p.get("p50_ms"), p.get("p99_ms")
            if not isinstance(p50, (int, float)) or not isinstance(p99, (int, float)):
                continue
            t = float(p["time"]) - started
            before = [n for at, n in counts[queue] if at <= t]
            if not before or not before[-1]:
                continue  # before the first sample, or the monitor was not heard then
            p50s, p99s = cells.setdefault((queue, before[-1]), ([], []))
            p50s.append(float(p50))
            p99s.append(float(p99))
    return [{"queue": queue, "exchanges": n, "seconds": len(p50s), "p50_ms": round(_median(p50s), 3),
             "p99_ms": round(_median(p99s), 3)}
            for (queue, n), (p50s, p99s) in sorted(cells.items())]


def _median(values: list[float]) -> float:
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def render(out_dir: str) -> list[str]:
    """Write the plots and ``index.html`` of the run in ``out_dir``; return the files written.

    Raises:
        ConfigError: ``out_dir`` holds no readable ``summary.json`` and ``timeline.json``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, timeline = _read(out_dir, "summary.json"), _read(out_dir, "timeline.json")
    started = float(timeline.get("started") or 0.0)
    samples = timeline.get("samples") or []
    faults = timeline.get("faults") or []
    marks = [(float(e["time"]) - started, e["kind"]) for e in timeline.get("events") or []
             if isinstance(e, dict) and e.get("kind") in _MARKS and isinstance(e.get("time"), (int, float))]
    written = []

    def figure(title: str, ylabel: str) -> Any:
        fig, ax = plt.subplots(figsize=(10, 3.6), dpi=100)
        ax.set_title(title)
        ax.set_xlabel("seconds since the load started")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        return fig, ax

    def finish(fig: Any, ax: Any, name: str) -> None:
        for f in faults:
            ax.axvline(float(f.get("t", 0.0)), color="red", linewidth=1.2, alpha=0.8)
            ax.annotate(str(f.get("kind", "")), (float(f.get("t", 0.0)), 1.0), xycoords=("data", "axes fraction"),
                        rotation=90, va="top", ha="right", fontsize=7, color="red")
        for t, kind in marks:
            color, alpha = _MARKS[kind]
            ax.axvline(t, ymax=0.06, color=color, alpha=alpha, linewidth=1.5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", ncols=2)
        fig.tight_layout()
        path = os.path.join(out_dir, name)
        fig.savefig(path)
        plt.close(fig)
        written.append(path)

    fig, ax = figure("records/s per exchange (as its monitor saw them)", "records/s")
    series: dict[str, tuple[list[float], list[float]]] = {}
    for s in samples:
        for queue, q in (s.get("queues") or {}).items():
            for x, rate in (q.get("exchanges") or {}).items():
                ts, rs = series.setdefault(f"{queue}/{x}", ([], []))
                ts.append(float(s["t"]))
                rs.append(float(rate))
    for label, (ts, rs) in sorted(series.items()):
        ax.plot(ts, rs, label=label, linewidth=1.2)
    finish(fig, ax, "throughput.png")

    fig, ax = figure("records/s offered by the publishers and delivered to each subscriber", "records/s")
    for queue in sorted({q for s in samples for q in (s.get("queues") or {})}):
        points = [(float(s["t"]), s["queues"][queue].get("offered")) for s in samples if queue in s.get("queues", {})]
        if any(isinstance(r, (int, float)) and r > 0 for _, r in points):
            ax.step([t for t, _ in points], [r for _, r in points], where="post", label=f"{queue} offered",
                    linewidth=2.0, alpha=0.5)
    for name, points in _delivered(timeline.get("subscribers") or []).items():
        ax.plot([t - started for t, _ in points], [r for _, r in points], label=f"{name} delivered", linewidth=1.0)
    finish(fig, ax, "offered.png")

    fig, ax = figure("exchanges per queue", "exchanges")
    for queue in sorted({q for s in samples for q in (s.get("queues") or {})}):
        points = [(float(s["t"]), len(s["queues"][queue]["exchanges"])) for s in samples if queue in s.get("queues", {})]
        ax.step([t for t, _ in points], [n for _, n in points], where="post", label=queue)
    ax.set_ylim(bottom=0)
    finish(fig, ax, "exchanges.png")

    groups = _groups(timeline.get("subscribers") or [])
    fig, ax = figure("end-to-end latency per subscriber group (per second: median p50, worst p99)", "ms (log scale)")
    for name, group in groups.items():
        measured = [(t - started, p50, p99) for t, p50, p99, _ in group if p50 is not None and p99 is not None]
        line, = ax.plot([t for t, _, _ in measured], [p50 for _, p50, _ in measured], linewidth=1.2,
                        label=f"{name} p50")
        ax.plot([t for t, _, _ in measured], [p99 for _, _, p99 in measured], linewidth=0.8, linestyle="--",
                color=line.get_color(), label=f"{name} p99")
    if any(groups.values()):
        ax.set_yscale("log")
    finish(fig, ax, "latency.png")

    fig, ax = figure("records each subscriber group found missing in gaps (dropped on the way), cumulative", "records")
    for name, group in groups.items():
        ax.plot([t - started for t, _, _, _ in group], [dropped for _, _, _, dropped in group], label=name)
    finish(fig, ax, "gaps.png")

    path = os.path.join(out_dir, "index.html")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(_page(summary))
    os.replace(path + ".tmp", path)
    written.append(path)
    return written


def _groups(curves: list[dict[str, Any]]) -> dict[str, list[tuple[float, float | None, float | None, int]]]:
    """Each subscriber group's points: (time, median p50 of its members, worst p99, records its members found
    missing in gaps)."""
    members: dict[str, list[list[dict[str, Any]]]] = {}
    for c in curves:
        name = (f"{c.get('queue')}/{c.get('prefix')!r}{'' if c.get('keeps_up', True) else ' slow'} "
                f"(group {int(c.get('group', 0)) + 1})")
        members.setdefault(name, []).append([p for p in c.get("points") or [] if isinstance(p, dict)])
    out = {}
    for name, lists in members.items():
        rows = []
        for i in range(min((len(points) for points in lists), default=0)):
            at = [points[i] for points in lists]
            p50s = sorted(p["p50_ms"] for p in at if isinstance(p.get("p50_ms"), (int, float)))
            p99s = [p["p99_ms"] for p in at if isinstance(p.get("p99_ms"), (int, float))]
            rows.append((sum(float(p["time"]) for p in at) / len(at), p50s[len(p50s) // 2] if p50s else None,
                         max(p99s) if p99s else None, sum(int(p.get("dropped") or 0) for p in at)))
        out[f"{name}, {len(lists)} subscriber{'s' if len(lists) > 1 else ''}"] = rows
    return out


def _delivered(curves: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Each subscriber group's delivered rate, records/s per member: (time, rate) between its points."""
    out = {}
    for c in curves:
        name = f"{c.get('queue')}/{c.get('prefix')!r} (group {int(c.get('group', 0)) + 1})"
        if name in out:
            continue  # one member shows its group's
        points = [(float(p["time"]), float(p["received"])) for p in c.get("points") or []
                  if isinstance(p, dict) and isinstance(p.get("time"), (int, float))
                  and isinstance(p.get("received"), (int, float))]
        out[name] = [(t1, (r1 - r0) / (t1 - t0)) for (t0, r0), (t1, r1) in zip(points, points[1:]) if t1 > t0]
    return out


def _page(summary: dict[str, Any]) -> str:
    e = html.escape
    audit = summary.get("keep_up_audit", {})
    rows = [
        ("scenario", f"{summary.get('scenario')} ({summary.get('source')})"),
        ("duration", f"{summary.get('duration_s')} s{' (interrupted)' if summary.get('interrupted') else ''}"),
        ("published", f"{summary.get('published', 0):,} records"),
        ("delivered", f"{summary.get('delivered', 0):,} records ({summary.get('delivered_records_per_s', 0):,.0f} records/s)"),
        ("exchanges at most", summary.get("exchanges_peak")),
        ("relocations", f"{summary.get('relocations')} (fail-overs {summary.get('failovers')})"),
        ("scale-outs / scale-ins", f"{summary.get('scale_outs')} / {summary.get('scale_ins')}"),
        ("audit of subscribers that keep up",
         f"{'clean' if audit.get('clean') else 'NOT CLEAN'}: lost {audit.get('lost')}, duplicated "
         f"{audit.get('duplicated')}, reordered {audit.get('reordered')}"),
    ]
    scaled = summary.get("latency_by_exchanges") or []
    if scaled:
        rows.append(("latency of subscribers that keep up, by exchanges in the queue (median of per-second p50 / p99)",
                     "; ".join(f"{r.get('queue')} with {r.get('exchanges')}: {_ms(r.get('p50_ms'))} / "
                               f"{_ms(r.get('p99_ms'))} ms ({r.get('seconds')} s)" for r in scaled)))
    ref = summary.get("reference")
    if isinstance(ref, dict):
        ours = summary.get("delivered_records_per_minute_peak", 0)
        theirs = ref.get("delivered_records_per_minute") or 0
        rows.append((f"delivered per minute (best minute): ours / {ref.get('source')}",
                     f"{ours:,.0f} / {theirs:,.0f}" + (f" ({ours / theirs:.2f}x)" if theirs else "")))
        if ref.get("note"):
            rows.append((f"{ref.get('source')} reported", ref["note"]))
    subs = []
    for x in summary.get("subscribers", []):
        a, lat = x.get("audit") or {}, x.get("latency_ms") or {}
        subs.append(
            f"<tr><td>{e(str(x.get('queue')))}</td><td>{e(repr(x.get('prefix')))}</td>"
            f"<td>{'yes' if x.get('keeps_up') else 'no (slow)'}</td><td>{a.get('expected', '-')}</td>"
            f"<td>{a.get('received', '-')}</td><td>{a.get('lost', '-')}</td><td>{a.get('dropped', '-')}</td>"
            f"<td>{a.get('undelivered', '-')}</td><td>{a.get('duplicated', '-')}</td>"
            f"<td>{a.get('reordered', '-')}</td><td>{x.get('gaps', '-')}</td>"
            f"<td>{_ms(lat.get('p50'))}</td><td>{_ms(lat.get('p99'))}</td><td>{e(x.get('error', ''))}</td></tr>")
    faults = "".join(f"<li>{float(f.get('t', 0)):.1f} s: {e(str(f.get('kind')))} "
                     f"{e(json.dumps({k: v for k, v in f.items() if k not in ('t', 'kind')}))}</li>"
                     for f in summary.get("faults", []))
    images = "".join(f'<p><img src="{name}" alt="{name}"></p>' for name in PLOTS)
    table = "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>RoQ-Py run: {e(str(summary.get('scenario')))}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}img{{max-width:100%}}</style></head>
<body><h1>RoQ-Py run: {e(str(summary.get('scenario')))}</h1>
<table>{table}</table>
<h2>Subscribers</h2>
<table><tr><th>queue</th><th>prefix</th><th>keeps up</th><th>expected</th><th>received</th><th>lost</th>
<th>of which dropped in gaps</th><th>of which still queued at the stop</th>
<th>duplicated</th><th>reordered</th><th>gaps</th><th>p50 ms</th><th>p99 ms</th><th>error</th></tr>{''.join(subs)}</table>
<h2>Faults</h2><ul>{faults or '<li>none</li>'}</ul>
<h2>Timeline</h2>{images}
<p>Every figure is in <a href="summary.json">summary.json</a>; the samples behind the plots in
<a href="timeline.json">timeline.json</a>.</p>
</body></html>
"""


def _ms(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"
