#!/usr/bin/env bash
# Every bench/bench_*.py --smoke (tests/checks/test_bench.py) needs nothing beyond the suite's
# setup.
exit 0
