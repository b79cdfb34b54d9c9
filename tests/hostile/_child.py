"""Runs one hostile-broker scenario in a fresh interpreter and reports its
figures, so a test's memory never pollutes another's and a crash is a
failed test, not a dead run.

``python _child.py MODULE FUNCTION TIMEOUT`` with the scenario's parameters
as JSON on stdin. It imports ``MODULE`` (``hostile.test_...``), counts the
records the ``kwire`` loggers emit (INFO and above), reads the peak RSS
(VmHWM) before and after ``FUNCTION(params)`` and prints one line
``KWIRE-HOSTILE-RESULT {json}`` with them and what the scenario returned.
The address space is capped (``KWIRE_HOSTILE_RLIMIT_AS``, default 4 GiB) so
a runaway allocation fails here instead of taking the machine's memory.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import logging
import os
import resource
import sys
import threading
import time
import traceback

MARK = "KWIRE-HOSTILE-RESULT "


def peak_rss_mib() -> float:
    """This process's peak resident set size so far (VmHWM), in MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self.by_level: dict = {}
        self.with_traceback = 0
        self.first: list = []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.by_level[record.levelname] = self.by_level.get(record.levelname, 0) + 1
        if record.exc_info:
            self.with_traceback += 1
        if len(self.first) < 20:
            try:
                self.first.append(f"{record.levelname} {record.name}: {record.getMessage()}"[:300])
            except Exception:  # noqa: BLE001 - a bad log call is itself worth seeing
                self.first.append(f"{record.levelname} {record.name}: <unformattable {record.msg!r}>")


def main() -> int:
    module_name, func_name, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    params = json.loads(sys.stdin.read() or "{}")
    limit = int(os.environ.get("KWIRE_HOSTILE_RLIMIT_AS", str(4 << 30)))
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    faulthandler.enable()                                                    # a crash shows where
    faulthandler.dump_traceback_later(max(1.0, timeout - 1.0), exit=False)   # and so does a hang
    counter = _Counter()
    kwire_log = logging.getLogger("kwire")
    kwire_log.addHandler(counter)
    kwire_log.setLevel(logging.INFO)
    kwire_log.propagate = False

    import kwire

    func = getattr(importlib.import_module(module_name), func_name)
    base = peak_rss_mib()
    t0 = time.monotonic()
    error = None
    try:
        result = func(params)
    except BaseException as e:  # noqa: BLE001 - reported to the test, which fails
        result = None
        error = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:]
    seconds = time.monotonic() - t0
    report = {
        "kwire_file": kwire.__file__,
        "seconds": seconds,
        "base_rss_mib": base,
        "peak_rss_mib": peak_rss_mib(),
        "logs": counter.count,
        "logs_by_level": counter.by_level,
        "logs_with_traceback": counter.with_traceback,
        "first_logs": counter.first,
        "threads": sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()),
        "result": result,
        "error": error,
    }
    sys.stdout.write("\n" + MARK + json.dumps(report, default=repr) + "\n")
    sys.stdout.flush()
    faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)     # a thread the scenario left behind is reported above, not waited for
