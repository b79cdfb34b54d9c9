"""The test suite's broker: kwire.devbroker's bundled Tansu (see there)."""

from kwire.devbroker import Broker, TansuStartError, TansuUnavailable, find_tansu, free_port, start_tansu

__all__ = ["Broker", "TansuStartError", "TansuUnavailable", "find_tansu", "free_port", "start_tansu"]
