"""The benchmark history: one JSON line per measurement of a commit, and
the trend plots drawn from it.

Three kinds of line, all keyed by commit:

- ``icount``: a commit's instructions per record on every hot path
  (benchmarks/icount.py), as the gate measured it on main (or as
  ``scripts/bench --history`` measures a list of revisions);
- ``memstat``: the same measurement's companions (benchmarks/memstat.py),
  flat: ``"<path> <metric>"`` (a key of memstat's ``METRICS``: ``faults``,
  ``first_faults``, ``peak``, ``syscalls``) -> its figure; beside the
  icount line whenever the gate measured them (a gate file without
  ``head_companions``, or ``--no-companions``, gives the icount line alone);
- ``ratios``: the wall-clock ratios of one ``compare_*`` script's run
  against the peers (its ``--json`` output, see :func:`write_results`), from
  the scheduled peers job.

Every line carries the environment it was measured in (Python, machine,
compiler, valgrind, where): instruction counts are exact for one binary and
input, but another compiler or Python gives other counts, so the plots draw
one series per environment and never join points across them. Appending a
line for a (kind, commit, script, environment) already present replaces it.

    python -m benchmarks.history append-gate  --file H --gate figures.json [--where github]
    python -m benchmarks.history append-ratios --file H --commit SHA RESULTS.json ...
    python -m benchmarks.history show --file H [--last 12] [--kind memstat]
    python -m benchmarks.history plot --file H --out DIR [--threshold 3]

``plot`` writes one PNG per path (``icount-<path>.png``), one per compare
script (``ratios-<script>.png``), ``icount-overview.png`` (every path,
small multiples) and one such overview per companion
(``memstat-<metric>.png``: ``memstat-faults.png`` and so on); a point more
than the threshold above its predecessor is marked in red and labelled with
its commit (one more than the threshold below it, in green). A companion's
threshold is the gate's allowance for it (memstat's ``METRICS``: a
percentage or an absolute amount, whichever is larger), so a step from 0
faults is marked as soon as it passes the absolute amount. Needs matplotlib
(the ``bench`` extra); the rest needs nothing beyond the standard library.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from benchmarks import memstat

FORMAT = 1
KINDS = ("icount", "memstat", "ratios")
DEFAULT_THRESHOLD = 3.0


# ------------------------------------------------------------ environments
def _first_line(cmd: Sequence[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return "-"
    try:
        out = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "-"
    return out.strip().splitlines()[0] if out.strip() else "-"


def environment(where: Optional[str] = None, python: Optional[str] = None) -> Dict[str, str]:
    """What a measurement depends on besides the commit. ``python``: the
    interpreter the workloads ran on (default: this one)."""
    if python and os.path.realpath(python) != os.path.realpath(sys.executable):
        version = _first_line([python, "-c", "import platform; print(platform.python_version())"])
    else:
        version = platform.python_version()
    cc = os.environ.get("CC", "cc")
    return {
        "where": where or ("github" if os.environ.get("GITHUB_ACTIONS") == "true" else "local"),
        "python": f"{platform.python_implementation()} {version}",
        "machine": f"{platform.system()} {platform.machine()}",
        "cc": _first_line([cc, "--version"]),
        "valgrind": _first_line(["valgrind", "--version"]),
    }


ENV_KEYS = ("where", "python", "machine", "cc", "valgrind")


def series_key(env: Dict[str, str]) -> str:
    return " / ".join(f"{env.get(k, '-')}" for k in ENV_KEYS)


# -------------------------------------------------------------- the lines
def commit_info(rev: str, repo: Optional[str] = None) -> Dict[str, str]:
    """Full hash, committer date (ISO, UTC) and subject of ``rev``."""
    proc = subprocess.run(["git", *(["-C", repo] if repo else []), "show", "-s", "--format=%H%n%cI%n%s", rev],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"git show {rev}: {proc.stderr.strip()}")
    sha, date, subject = (proc.stdout.split("\n", 2) + ["", ""])[:3]
    return {"commit": sha.strip(), "date": date.strip(), "subject": subject.strip()[:120]}


def make_line(kind: str, commit: Dict[str, str], figures: Dict[str, float], env: Dict[str, str],
              script: Optional[str] = None, run: Optional[str] = None,
              harness: Optional[str] = None) -> Dict[str, Any]:
    """``harness``: icount's fingerprint of the workload code (see
    benchmarks/icount.harness_id); the plots mark where it changes."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: not one of {KINDS}")
    line: Dict[str, Any] = {"format": FORMAT, "kind": kind, **commit, "env": env,
                            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if script:
        line["script"] = script
    if run:
        line["run"] = run
    if harness:
        line["harness"] = harness
    line["figures"] = {str(k): float(v) for k, v in figures.items()}
    return line


def memstat_figures(companions: Dict[str, Dict[str, Any]]) -> Dict[str, float]:
    """A gate's companions (path -> memstat's figures for it) as a
    ``memstat`` line's figures: ``"<path> <metric>"`` -> value for each of
    memstat's ``METRICS`` measured (the system calls by name stay in the
    gate's JSON)."""
    return {f"{path} {key}": float(figs[key]) for path, figs in companions.items()
            for key in memstat.METRIC_KEYS if figs.get(key) is not None}


def split_name(name: str) -> Tuple[str, str]:
    """A ``memstat`` figure's name as (path, metric key)."""
    path, _, key = name.rpartition(" ")
    return path, key


def measurement_lines(commit: Dict[str, str], figures: Dict[str, float], companions: Dict[str, Dict[str, Any]],
                      env: Dict[str, str], run: Optional[str] = None,
                      harness: Optional[str] = None) -> List[Dict[str, Any]]:
    """One measurement of a commit's hot paths as history lines: its
    instructions per record (``icount``) and, when ``companions`` holds any
    (path -> memstat's figures), those (``memstat``)."""
    out = [make_line("icount", commit, figures, env, run=run, harness=harness)]
    flat = memstat_figures(companions or {})
    if flat:
        out.append(make_line("memstat", commit, flat, env, run=run, harness=harness))
    return out


def _identity(line: Dict[str, Any]) -> Tuple[str, str, str, str]:
    return line["kind"], line["commit"], line.get("script", ""), series_key(line["env"])


def load(path: str) -> List[Dict[str, Any]]:
    """The lines of a history file, in file order (an absent file is empty)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except ValueError as e:
                raise SystemExit(f"{path}:{n}: not JSON: {e}")
            missing = [k for k in ("kind", "commit", "env", "figures") if k not in line]
            if missing or line["kind"] not in KINDS:
                raise SystemExit(f"{path}:{n}: not a history line (missing {missing or 'a known kind'})")
            out.append(line)
    return out


def append(path: str, new: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Adds lines to the file; one for the same (kind, commit, script,
    environment) as an existing line replaces it in place."""
    lines = load(path)
    index = {_identity(line): i for i, line in enumerate(lines)}
    for line in new:
        key = _identity(line)
        if key in index:
            lines[index[key]] = line
        else:
            index[key] = len(lines)
            lines.append(line)
    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(tmp, "w") as f:
        for line in lines:
            f.write(json.dumps(line, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return lines


# ------------------------------------------- the compare_* scripts' results
def write_results(path: str, script: str, env: Dict[str, Any], results: Any, ratios: Dict[str, float]) -> None:
    """A compare script's ``--json`` file: its environment (with
    :func:`environment`'s keys, which tell the history's series apart), its
    raw results and the ratios that go into the history (name -> times
    faster than the peer named in it; above 1 means kwire is faster)."""
    env = dict(env, **environment())
    with open(path, "w") as f:
        json.dump({"script": script, "environment": env, "results": results,
                   "ratios": {k: float(v) for k, v in ratios.items()}}, f, indent=1)


def read_results(path: str) -> Tuple[str, Dict[str, float], Dict[str, str]]:
    """A results file's script, ratios, and the environment it was measured
    in (the keys the history tells series apart by)."""
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "script" not in doc or not isinstance(doc.get("ratios"), dict):
        raise SystemExit(f"{path}: not a compare script's --json output (no script or ratios)")
    env = doc.get("environment") or {}
    return (str(doc["script"]), {str(k): float(v) for k, v in doc["ratios"].items()},
            {k: str(env[k]) for k in ENV_KEYS if k in env})


# ----------------------------------------------------------------- series
def series(lines: Sequence[Dict[str, Any]], kind: str, script: Optional[str] = None
           ) -> Dict[str, Dict[str, List[Tuple[str, float]]]]:
    """environment -> figure name -> [(commit, value)] in file order (the
    order commits were appended: main's order)."""
    out: Dict[str, Dict[str, List[Tuple[str, float]]]] = {}
    for line in lines:
        if line["kind"] != kind or (script is not None and line.get("script") != script):
            continue
        per = out.setdefault(series_key(line["env"]), {})
        for name, value in line["figures"].items():
            per.setdefault(name, []).append((line["commit"], value))
    return out


def steps(points: Sequence[Tuple[str, float]], threshold: float, down: bool = False,
          slack: float = 0.0) -> List[Tuple[int, float]]:
    """(index, percent) of every point more than ``threshold`` percent, and
    more than ``slack``, above the one before it: the commits the gate would
    have failed (``down``: below it, the commits that made a path cheaper).
    A step from 0 is infinite percent: it counts when it passes ``slack``."""
    out = []
    for i in range(1, len(points)):
        prev, cur = points[i - 1][1], points[i][1]
        rise = prev - cur if down else cur - prev
        if rise > max(slack, abs(prev) * threshold / 100.0):
            out.append((i, (cur - prev) / prev * 100.0 if prev else math.copysign(math.inf, cur - prev)))
    return out


SHOWN = {"icount": "instructions/record",
         "memstat": "companions (" + "; ".join(m.label for m in memstat.METRICS) + ")"}
METRIC_LABELS = {m.key: m.label for m in memstat.METRICS}


def _row_name(kind: str, name: str) -> str:
    if kind != "memstat":
        return name
    path, key = split_name(name)
    return f"{path} {METRIC_LABELS.get(key, key)}"


def show(lines: Sequence[Dict[str, Any]], last: int = 12, kind: str = "icount") -> str:
    """The last ``last`` commits of each environment's ``kind`` series
    (``icount`` or ``memstat``) as a text table (a figure per row, a commit
    per column)."""
    blocks = []
    for env, per in series(lines, kind).items():
        commits: List[str] = []
        for pts in per.values():
            for c, _ in pts:
                if c not in commits:
                    commits.append(c)
        commits = commits[-last:]
        head = ["path"] + [c[:8] for c in commits]
        body = []
        for name, pts in per.items():
            got = dict(pts)
            body.append([_row_name(kind, name)] + [f"{got[c]:,.1f}" if c in got else "-" for c in commits])
        widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
        fmt = "  ".join(("{:<%d}" if i == 0 else "{:>%d}") % w for i, w in enumerate(widths))
        blocks.append("\n".join([f"{SHOWN[kind]}, {env}", fmt.format(*head)]
                                + [fmt.format(*r) for r in body]))
    return "\n\n".join(blocks) if blocks else f"no {kind} lines"


# ------------------------------------------------------------------ plots
def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def _draw(ax, points: Sequence[Tuple[str, float]], threshold: float, harness_changes: Sequence[str] = (),
          slack: float = 0.0) -> None:
    """``harness_changes``: commits measured with a changed workload harness
    (a dotted line before them: a step there may be the harness's);
    ``threshold`` and ``slack``: the steps marked (see :func:`steps`)."""
    xs = list(range(len(points)))
    for i, (commit, _) in enumerate(points):
        if i and commit in harness_changes:
            ax.axvline(i - 0.5, color="gray", linestyle=":", linewidth=1)
    ys = [v for _, v in points]
    ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2)
    # at least +-5% (or the slack) around the middle: a change too small for
    # the gate (a few instructions from code moving between commits) stays flat
    mid = sorted(ys)[len(ys) // 2]
    band = max(abs(mid) * 0.05, slack)
    lo, hi = min(min(ys), mid - band), max(max(ys), mid + band)
    lo = max(lo, 0.0) if min(ys) >= 0 else lo                     # counts: the axis starts at 0 at most
    pad = (hi - lo) * 0.1 or 1.0
    ax.set_ylim(lo - pad, hi + pad)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    for down, color, dy in ((False, "red", 8), (True, "green", -20)):
        for i, pct in steps(points, threshold, down, slack):
            change = f"{pct:+.1f}%" if math.isfinite(pct) else f"{ys[i - 1]:g} -> {ys[i]:,.1f}"
            ax.plot([i], [ys[i]], marker="o", markersize=6, color=color, zorder=5)
            ax.annotate(f"{points[i][0][:7]} {change}", (i, ys[i]), textcoords="offset points",
                        xytext=(0, dy), ha="center", fontsize=6, color=color)


def _xticks(ax, commits: Sequence[str], max_labels: int = 24) -> None:
    step = max(1, -(-len(commits) // max_labels))
    ticks = list(range(0, len(commits), step))
    ax.set_xticks(ticks)
    ax.set_xticklabels([commits[i][:7] for i in ticks], rotation=60, ha="right", fontsize=7, family="monospace")


def _aligned(per: Dict[str, List[Tuple[str, float]]], name: str, commits: Sequence[str]):
    """A series on the x positions of ``commits`` (the environment's commits
    in order), as (x, value) pairs."""
    pos = {c: i for i, c in enumerate(commits)}
    return [(pos[c], v) for c, v in per[name]]


def _save(plt, fig, path: str, env: str, dpi: int, rect=None) -> str:
    fig.text(0.01, 0.005, env, fontsize=6, color="gray")            # what the figures depend on
    fig.tight_layout(rect=rect or (0, 0.02, 1, 1))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _newest(lines: Sequence[Dict[str, Any]], kind: str, script: Optional[str] = None
            ) -> Tuple[str, List[Dict[str, Any]]]:
    """The newest environment of ``kind``'s lines (that of its last line)
    and its lines, in file order ('' and none when there are none)."""
    mine = [line for line in lines if line["kind"] == kind and (script is None or line.get("script") == script)]
    env = series_key(mine[-1]["env"]) if mine else ""
    return env, [line for line in mine if series_key(line["env"]) == env]


def _harness_changes(lines: Sequence[Dict[str, Any]]) -> set:
    """The commits whose line has another harness than the line before."""
    return {b["commit"] for a, b in zip(lines, lines[1:])
            if a.get("harness") and b.get("harness") and a["harness"] != b["harness"]}


def _overview(plt, points: Dict[str, List[Tuple[str, float]]], title: str, path: str, env: str,
              threshold: float, slack: float = 0.0, harness_changes: Sequence[str] = ()) -> str:
    """Every series of ``points`` (name -> [(commit, value)]) in one PNG, as
    small multiples."""
    cols, rows = 3, -(-len(points) // 3)
    fig, axes = plt.subplots(rows, cols, figsize=(13, 2.6 * rows), squeeze=False)
    cells = [a for row in axes for a in row]
    for ax, (name, pts) in zip(cells, points.items()):
        _draw(ax, pts, threshold, harness_changes, slack)
        ax.set_title(name, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.tick_params(axis="y", labelsize=7)
        _xticks(ax, [c for c, _ in pts], max_labels=8)
    for ax in cells[len(points):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    return _save(plt, fig, path, env, 100, (0, 0.02, 1, 0.97))


def _plot_icount(plt, lines: Sequence[Dict[str, Any]], out_dir: str, threshold: float) -> List[str]:
    """``icount-<path>.png`` per path and ``icount-overview.png``."""
    env, mine = _newest(lines, "icount")
    if not mine:
        return []
    points, changed = series(mine, "icount")[env], _harness_changes(mine)
    written = []
    for name, pts in points.items():
        fig, ax = plt.subplots(figsize=(9, 3.6))
        _draw(ax, pts, threshold, changed)
        ax.set_title(f"{name}: instructions per record", fontsize=10)
        ax.set_ylabel("instructions / record")
        ax.grid(True, alpha=0.3)
        _xticks(ax, [c for c, _ in pts])
        written.append(_save(plt, fig, os.path.join(out_dir, f"icount-{_slug(name)}.png"), env, 110))
    title = (f"kwire: instructions per record, commit by commit (red: more than +{threshold:g}% over the commit "
             f"before; green: more than -{threshold:g}%; dotted: the harness changed)")
    return written + [_overview(plt, points, title, os.path.join(out_dir, "icount-overview.png"), env, threshold,
                                harness_changes=changed)]


def _plot_memstat(plt, lines: Sequence[Dict[str, Any]], out_dir: str) -> List[str]:
    """``memstat-<metric>.png`` per companion (every path, small
    multiples), steps marked past the gate's allowance for it."""
    env, mine = _newest(lines, "memstat")
    if not mine:
        return []
    by_metric: Dict[str, Dict[str, List[Tuple[str, float]]]] = {}
    for name, pts in series(mine, "memstat")[env].items():
        path, key = split_name(name)
        by_metric.setdefault(key, {})[path] = pts
    changed, written = _harness_changes(mine), []
    for m in memstat.METRICS:
        if m.key in by_metric:
            title = (f"kwire: {m.label}, commit by commit (red: more than +{m.pct:g}% and +{m.slack:g} over the "
                     f"commit before, the gate's allowance; green: as much below; dotted: the harness changed)")
            written.append(_overview(plt, by_metric[m.key], title, os.path.join(out_dir, f"memstat-{_slug(m.key)}.png"),
                                     env, m.pct, m.slack, changed))
    return written


def _plot_ratios(plt, lines: Sequence[Dict[str, Any]], out_dir: str) -> List[str]:
    """``ratios-<script>.png`` per compare script."""
    written = []
    for script in sorted({line.get("script", "") for line in lines if line["kind"] == "ratios"}):
        env, mine = _newest(lines, "ratios", script)
        per = series(mine, "ratios")[env]
        commits = list(dict.fromkeys(line["commit"] for line in mine))
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for name in per:
            xs, ys = zip(*_aligned(per, name, commits))
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=name)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_title(f"{script}: kwire's speed over each peer (wall clock; above 1 = kwire faster)", fontsize=10)
        ax.set_ylabel("times faster")
        ax.grid(True, alpha=0.3)
        _xticks(ax, commits)
        ax.legend(fontsize=6, ncol=2, loc="best")
        written.append(_save(plt, fig, os.path.join(out_dir, f"ratios-{_slug(script)}.png"), env, 110))
    return written


def plot(lines: Sequence[Dict[str, Any]], out_dir: str, threshold: float = DEFAULT_THRESHOLD) -> List[str]:
    """Writes the PNGs; returns their paths. For each kind (and script) the
    newest environment's series is drawn (that of its last line); older
    environments' lines stay in the file, but their figures are not
    comparable with the newer ones. ``threshold``: the instruction counts'
    (the companions' are the gate's allowances)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    return (_plot_icount(plt, lines, out_dir, threshold) + _plot_memstat(plt, lines, out_dir)
            + _plot_ratios(plt, lines, out_dir))


# --------------------------------------------------------------------- CLI
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("append-gate", help="the head figures (and companions) of a scripts/bench --json file")
    g.add_argument("--file", required=True)
    g.add_argument("--gate", required=True, help="scripts/bench --json output")
    g.add_argument("--where", help="environment label (default: github on GitHub Actions, else local)")
    g.add_argument("--run", help="a link to the run that measured it")
    r = sub.add_parser("append-ratios", help="the ratios of compare scripts' --json files")
    r.add_argument("--file", required=True)
    r.add_argument("--commit", default="HEAD")
    r.add_argument("--where")
    r.add_argument("--run")
    r.add_argument("results", nargs="+")
    s = sub.add_parser("show", help="the recent instruction counts (or companions) as a table")
    s.add_argument("--file", required=True)
    s.add_argument("--last", type=int, default=12)
    s.add_argument("--kind", choices=("icount", "memstat"), default="icount")
    p = sub.add_parser("plot", help="the trend PNGs")
    p.add_argument("--file", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    for sp in (g, r):
        sp.add_argument("--repo", help="the git repository the commit is in (default: the current directory)")
    args = ap.parse_args(argv)
    if args.cmd == "append-gate":
        with open(args.gate) as f:
            gate = json.load(f)
        if gate.get("dirty"):
            raise SystemExit(f"{args.gate}: measured on a working tree with changes; history takes commits only")
        env = gate.get("environment") or environment(args.where)
        if args.where:
            env = dict(env, where=args.where)
        new = measurement_lines(commit_info(gate["head"], args.repo), gate["head_figures"],
                                gate.get("head_companions") or {}, env, run=args.run, harness=gate.get("harness"))
        append(args.file, new)
        print(f"{args.file}: {' and '.join(line['kind'] for line in new)} of {gate['head'][:10]} "
              f"({len(gate['head_figures'])} paths)")
    elif args.cmd == "append-ratios":
        info, new = commit_info(args.commit, args.repo), []
        for fn in args.results:
            script, ratios, env = read_results(fn)
            env = env or environment()
            if args.where:
                env = dict(env, where=args.where)
            new.append(make_line("ratios", info, ratios, env, script=script, run=args.run))
            print(f"{args.file}: {script} ratios of {info['commit'][:10]} ({len(ratios)})")
        append(args.file, new)
    elif args.cmd == "show":
        print(show(load(args.file), args.last, args.kind))
    else:
        for fn in plot(load(args.file), args.out, args.threshold):
            print(fn)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
