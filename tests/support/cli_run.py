"""The ``kwire`` command run in-process against one broker, its output
captured (pytest's ``capsys``): what the admin commands' tests share."""

from __future__ import annotations

from typing import Callable, Tuple

from kwire.__main__ import main


def cli_runner(capsys, bootstrap: str, check: bool = True) -> Callable[..., Tuple[int, str, str]]:
    """``run(*argv)`` -> (exit status, stdout, stderr) of ``kwire *argv -b
    bootstrap``; with ``check``, a non-zero status fails with its stderr."""
    def run(*argv: str) -> Tuple[int, str, str]:
        rc = main([*argv, "-b", bootstrap])
        out = capsys.readouterr()
        assert not check or rc == 0, out.err
        return rc, out.out, out.err

    return run
