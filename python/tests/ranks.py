"""Helpers for tests that expect every MPI rank to fail."""
import re


def every_rank_error(done, ranks):
    """Each rank's error message in rank order; asserts that all `ranks` ranks reported one."""
    # Ranks write concurrently: two messages can share a line.
    errors = re.findall(r"moert: rank (\d+): error: (.*?)(?=moert: rank \d+: error: |$)",
                        done.stderr, re.M)
    assert sorted(int(r) for r, _ in errors) == list(range(ranks)), done.stderr
    return [m for _, m in sorted(errors, key=lambda e: int(e[0]))]
