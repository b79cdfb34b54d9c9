"""Silence kafka-python's import-time DeprecationWarnings (it is imported to
sanity-check the workload), so the benchmark output stays readable."""


def pytest_configure(config):
    for msg in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{msg}:DeprecationWarning")
