"""Test-only helpers shared by kwire's test suites (real peers, never mocks)."""
