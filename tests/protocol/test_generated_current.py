"""The checked-in generated code is what the generator makes now, from a
vendored copy of the definitions that matches the shared one."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENDORED = os.path.join(ROOT, "scripts", "kafka-protocol", "message")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "kafka-protocol", "message")


def test_generated_module_is_current():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_protocol.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="no ../shared/kafka-protocol beside the project")
def test_vendored_definitions_match_the_shared_ones():
    names = sorted(os.listdir(VENDORED))
    assert names, "no vendored definitions"
    match, mismatch, errors = filecmp.cmpfiles(VENDORED, SHARED, names, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
