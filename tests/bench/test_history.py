"""The benchmark history (benchmarks/history.py) and its publishing to a
results branch (scripts/bench-publish): lines appended and replaced, a gate
file's companions kept beside its counts (and an older file without them
still read), the compare scripts' --json files read back, the trend plots
drawn, and a
publish round trip against a local bare repository standing in for
GitHub's (the branch made, appended to, kept to one commit, and a lost race
retried). No valgrind and no network."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import history  # noqa: E402

ENV = {"where": "test", "python": "CPython 3.x", "machine": "Linux x86_64", "cc": "cc 1", "valgrind": "vg 1"}
COMMIT = {"commit": "a" * 40, "date": "2026-11-24T00:00:00+00:00", "subject": "one"}


def line(sha: str, figures, env=ENV, kind="icount", script=None):
    return history.make_line(kind, dict(COMMIT, commit=sha * 40), figures, env, script=script)


def test_append_adds_and_replaces_the_same_commit_and_environment(tmp_path):
    f = str(tmp_path / "h.jsonl")
    history.append(f, [line("a", {"send": 100.0}), line("b", {"send": 101.0})])
    history.append(f, [line("a", {"send": 99.0})])                          # measured again: replaces
    history.append(f, [line("a", {"send": 50.0}, env=dict(ENV, cc="cc 2"))])  # another compiler: its own line
    got = history.load(f)
    assert [(g["commit"][0], g["figures"]["send"]) for g in got] == [("a", 99.0), ("b", 101.0), ("a", 50.0)]
    per = history.series(got, "icount")
    assert len(per) == 2                                                    # one series per environment
    assert per[history.series_key(ENV)]["send"] == [("a" * 40, 99.0), ("b" * 40, 101.0)]


def test_load_refuses_what_is_not_a_history_line(tmp_path):
    f = tmp_path / "h.jsonl"
    f.write_text('{"kind": "icount", "commit": "x"}\n')
    with pytest.raises(SystemExit, match="not a history line"):
        history.load(str(f))
    f.write_text("{not json\n")
    with pytest.raises(SystemExit, match="not JSON"):
        history.load(str(f))
    assert history.load(str(tmp_path / "absent.jsonl")) == []


def test_steps_mark_commits_over_the_threshold():
    pts = [("a", 100.0), ("b", 103.0), ("c", 106.5), ("d", 90.0), ("e", 100.0)]
    marked = history.steps(pts, 3.0)
    assert [i for i, _ in marked] == [2, 4]                 # +3.0% is not over; +3.4% and +11.1% are
    assert marked[0][1] == pytest.approx(3.398, abs=1e-3)
    assert history.steps(pts, 3.0, down=True) == [(3, pytest.approx(-15.49, abs=0.01))]


def test_a_step_from_zero_counts_once_past_the_slack():
    pts = [("a", 0.0), ("b", 0.5), ("c", 0.0), ("d", 33.3), ("e", 33.9), ("f", 0.0)]
    assert history.steps(pts, 5.0, slack=1.0) == [(3, float("inf"))]      # 0.5 is within the slack
    assert history.steps(pts, 5.0, down=True, slack=1.0) == [(5, pytest.approx(-100.0))]
    assert [i for i, _ in history.steps(pts, 3.0)] == [1, 3]             # no slack: any step from 0


def companions(faults: float, syscalls: float = 0.0):
    """Two paths' companions as scripts/bench --json writes them."""
    return {p: {"faults": faults, "first_faults": 120.0, "peak": 0.0, "syscalls": syscalls, "first_syscalls": 9,
                "syscalls_by_name": {"mmap": syscalls}, "first_syscalls_by_name": {"mmap": 9}}
            for p in ("send", "decode-arrow/none/mixed")}


def gate_doc(sha: str, send: float, comp=None, dirty=False):
    doc = {"base": "0" * 40, "head": sha, "dirty": dirty, "threshold": 3.0, "base_figures": {},
           "head_figures": {"send": send}, "failed": False, "environment": ENV, "harness": "h-%d" % send}
    if comp is not None:                                    # an older gate file has no companions at all
        doc.update(base_companions={}, head_companions=comp)
    return doc


@pytest.mark.parametrize("comp, kinds", [(companions(33.3, 0.2), ["icount", "memstat"]),
                                         (None, ["icount"]),          # a gate file from before the companions
                                         ({}, ["icount"])])           # scripts/bench --no-companions
def test_append_gate_keeps_the_companions_beside_the_counts(tmp_path, capsys, comp, kinds):
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], stdout=subprocess.PIPE, text=True,
                         check=True).stdout.strip()
    gate, f = tmp_path / "figures.json", str(tmp_path / "h.jsonl")
    gate.write_text(json.dumps(gate_doc(sha, 1000.0, comp)))
    assert history.main(["append-gate", "--repo", ROOT, "--file", f, "--gate", str(gate)]) == 0
    got = history.load(f)
    assert [g["kind"] for g in got] == kinds and {g["commit"] for g in got} == {sha}
    assert got[0]["figures"] == {"send": 1000.0}
    if comp:
        assert got[1]["figures"] == {f"{p} {k}": v for p in ("send", "decode-arrow/none/mixed")
                                     for k, v in (("faults", 33.3), ("first_faults", 120.0), ("peak", 0.0),
                                                  ("syscalls", 0.2))}
        assert got[1]["harness"] == "h-1000" and got[1]["env"] == ENV
        text = history.show(got, kind="memstat")
        assert "send faults/1k rec" in text and "decode-arrow/none/mixed syscalls/call" in text and "33.3" in text
    else:
        assert history.show(got, kind="memstat") == "no memstat lines"


def test_show_is_a_table_of_recent_commits():
    lines = [line(c, {"send": 100.0 + i, "encode/none/mixed": 2000.0}) for i, c in enumerate("abc")]
    text = history.show(lines, last=2)
    assert "aaaaaaaa" not in text and "bbbbbbbb" in text and "cccccccc" in text
    assert "102.0" in text and "2,000.0" in text


def test_results_files_round_trip(tmp_path):
    f = str(tmp_path / "r.json")
    history.write_results(f, "compare_x", {"records": 5}, [{"raw": 1}], {"decode vs peer": 2.5})
    script, ratios, env = history.read_results(f)
    assert script == "compare_x" and ratios == {"decode vs peer": 2.5}
    assert set(env) == set(history.ENV_KEYS)                # the measuring machine's, for the series
    (tmp_path / "bad.json").write_text('{"results": []}')
    with pytest.raises(SystemExit, match="not a compare script"):
        history.read_results(str(tmp_path / "bad.json"))


def test_compare_protocol_writes_its_ratios(tmp_path):
    out = tmp_path / "p.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compare_protocol", "--quick", "--partitions", "10",
                           "--json", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    script, ratios, _ = history.read_results(str(out))
    assert script == "compare_protocol"
    assert set(ratios) == {"decode Fetch response vs kafka-python", "encode Produce request vs kafka-python"}
    assert all(r > 0 for r in ratios.values())


def _is_png(path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_draws_a_png_per_path_an_overview_and_per_script(tmp_path):
    lines = [line("z", {"send": 1.0, "gone": 1.0}, env=dict(ENV, cc="old"))]   # an older environment: not drawn
    lines += [history.make_line("icount", dict(COMMIT, commit=c * 40), {"send": v, "decode-records/none/mixed": 3000.0},
                                ENV, harness="h2" if c == "d" else "h1")          # a dotted line before d
              for c, v in zip("abcd", (100, 101, 110, 108))]
    lines.append(line("d", {"codec/none/decode vs aiokafka": 2.5}, kind="ratios", script="compare_codecs"))
    written = history.plot(lines, str(tmp_path / "plots"))
    names = sorted(os.path.basename(p) for p in written)
    assert names == ["icount-decode-records-none-mixed.png", "icount-overview.png", "icount-send.png",
                     "ratios-compare-codecs.png"]
    assert all(_is_png(p) and os.path.getsize(p) > 5000 for p in written)


def test_plot_draws_a_png_per_companion(tmp_path):
    """Every path of a companion in one PNG; a step from 0 faults (the
    unrecycled columns' regression) is drawn like any other."""
    lines = [history.measurement_lines(dict(COMMIT, commit=c * 40), {"send": 100.0}, companions(f, s), ENV)[1]
             for c, f, s in zip("abcd", (0.0, 0.0, 33.3, 0.0), (0.0, 0.0, 0.2, 11.0))]
    written = history.plot(lines, str(tmp_path / "plots"))
    names = sorted(os.path.basename(p) for p in written)
    assert names == ["memstat-faults.png", "memstat-first-faults.png", "memstat-peak.png", "memstat-syscalls.png"]
    assert all(_is_png(p) and os.path.getsize(p) > 5000 for p in written)


# ------------------------------------------------------ scripts/bench-publish
def git(cwd, *args) -> str:
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True).stdout.strip()


@pytest.fixture
def repos(tmp_path):
    """A project repository with two commits and a bare 'origin'."""
    project, origin = tmp_path / "project", tmp_path / "origin.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(origin)], check=True)
    subprocess.run(["git", "init", "--quiet", str(project)], check=True)
    shas = []
    for i in range(2):
        (project / "f").write_text(str(i))
        git(project, "add", "f")
        git(project, "commit", "--quiet", "-m", f"commit {i}")
        shas.append(git(project, "rev-parse", "HEAD"))
    git(project, "remote", "add", "origin", str(origin))
    return project, origin, shas


def publish(project, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench-publish"), "--repo", str(project),
                           *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)


def gate_file(tmp_path, sha, send, dirty=False, comp=None):
    f = tmp_path / f"gate-{sha[:6]}-{send}.json"
    f.write_text(json.dumps(gate_doc(sha, send, comp, dirty)))
    return str(f)


def branch_file(origin, path) -> str:
    return git(origin, "show", f"bench-results:{path}")


def test_publish_makes_the_branch_then_appends_keeping_one_commit(repos, tmp_path):
    project, origin, shas = repos
    proc = publish(project, "--gate", gate_file(tmp_path, shas[0], 1000.0))
    assert proc.returncode == 0, proc.stderr
    proc = publish(project, "--gate", gate_file(tmp_path, shas[1], 1100.0, comp=companions(0.0)))  # +10%: red
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(t) for t in branch_file(origin, "history.jsonl").splitlines()]
    assert [(x["kind"], x["commit"], x["subject"], x["harness"]) for x in lines] == [
        ("icount", shas[0], "commit 0", "h-1000"), ("icount", shas[1], "commit 1", "h-1100"),
        ("memstat", shas[1], "commit 1", "h-1100")]
    assert [x["figures"]["send"] for x in lines[:2]] == [1000.0, 1100.0]
    assert git(origin, "rev-list", "--count", "bench-results") == "1"             # one parentless commit
    files = git(origin, "ls-tree", "-r", "--name-only", "bench-results").split()
    assert {"README.md", "history.jsonl", "plots/icount-overview.png", "plots/icount-send.png",
            "plots/memstat-faults.png", "plots/memstat-syscalls.png"} <= set(files)
    readme = branch_file(origin, "README.md")
    assert "icount-overview.png" in readme and "(plots/memstat-faults.png)" in readme
    # the project repository is left as it was: no worktree, no branch, no fetched ref
    assert git(project, "worktree", "list").count("\n") == 0
    assert git(project, "branch", "--list", "bench-publish-*") == ""
    assert git(project, "for-each-ref", "refs/bench-publish") == ""


def test_publish_refuses_a_dirty_measurement(repos, tmp_path):
    project, origin, shas = repos
    proc = publish(project, "--gate", gate_file(tmp_path, shas[1], 1.0, dirty=True))
    assert proc.returncode != 0 and "working tree with changes" in proc.stderr
    assert subprocess.run(["git", "-C", str(origin), "rev-parse", "--verify", "--quiet", "bench-results"],
                          stdout=subprocess.PIPE).returncode != 0


def test_publish_ratios(repos, tmp_path):
    project, origin, shas = repos
    results = str(tmp_path / "compare_codecs.json")
    history.write_results(results, "compare_codecs", {}, [], {"none/decode/kwire vs aiokafka": 2.4})
    proc = publish(project, "--ratios", results, "--commit", shas[0])
    assert proc.returncode == 0, proc.stderr
    (only,) = [json.loads(t) for t in branch_file(origin, "history.jsonl").splitlines()]
    assert only["kind"] == "ratios" and only["script"] == "compare_codecs" and only["commit"] == shas[0]
    assert "plots/ratios-compare-codecs.png" in git(origin, "ls-tree", "-r", "--name-only", "bench-results")


def test_a_push_that_loses_the_race_is_refused_then_retried(repos, tmp_path, monkeypatch):
    """Another run moves the branch between this run's read and its push:
    the lease refuses the push (nothing of the other run's is overwritten),
    and the next try reads the branch again and keeps both lines."""
    import importlib.machinery
    import importlib.util
    for var in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):       # what the script's main() sets when the
        monkeypatch.setenv(var, "t")                              # machine has no git identity (a fresh CI one)
    for var in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(var, "t@t")
    project, origin, shas = repos
    assert publish(project, "--gate", gate_file(tmp_path, shas[0], 1000.0)).returncode == 0
    loader = importlib.machinery.SourceFileLoader("bench_publish", os.path.join(ROOT, "scripts", "bench-publish"))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("bench_publish", loader))
    loader.exec_module(mod)
    args = mod.argparse.Namespace(gate=gate_file(tmp_path, shas[1], 1001.0), ratios=None, run=None,
                                  repo=str(project), remote="origin", branch="bench-results", no_push=False)
    dest = str(tmp_path / "wt")
    old = mod.prepare(str(project), "origin", "bench-results", dest)
    other = publish(project, "--gate", gate_file(tmp_path, shas[1], 1002.0))     # the other run wins
    assert other.returncode == 0, other.stderr
    try:
        assert mod.publish_once(args, dest, old) is False
        assert mod.publish_once(args, dest, mod.prepare(str(project), "origin", "bench-results", dest)) is True
    finally:
        mod.remove_worktree(str(project), dest)
    lines = [json.loads(t) for t in branch_file(origin, "history.jsonl").splitlines()]
    # the same commit and environment measured twice: the later line replaces the earlier one
    assert [(x["commit"], x["figures"]["send"]) for x in lines] == [(shas[0], 1000.0), (shas[1], 1001.0)]
