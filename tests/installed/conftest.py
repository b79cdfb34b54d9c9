"""tests/installed: kwire as users get it. ``smoke/`` runs inside fresh
virtualenvs (test_installed.py starts it there), never in the test session
itself."""

collect_ignore = ["smoke"]
