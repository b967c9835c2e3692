"""`python -m lakelog.cli ...`: the same as the `lakelog` console script (tests and benchmarks start
servers this way)."""

from lakelog.cli import run

if __name__ == "__main__":  # pragma: no cover
    run()
