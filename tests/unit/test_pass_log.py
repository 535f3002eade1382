"""The pass log keeps rows appended one by one and coalesced runs' per-field arrays, in order."""

from __future__ import annotations

import numpy as np

from simmodel.metrics.records import PassLog, PassRecord


def record(index: int, tokens: int) -> PassRecord:
    """Pass ``index`` of worker 1, rank 0: it runs 10·index to 10·index + 7 ns."""
    return PassRecord("aggregated", 1, 0, index, 10 * index, 10 * index + 7, tokens, 0, 0, tokens, tokens, 3, 0, 7, 5,
                      "fixed")


def test_rows_and_runs_read_back_in_order_across_joins():
    """Runs of two passes between single rows, with a join every three runs: every row reads back as
    written (a run's constant fields given as one int), and the latest end is the last pass's, 10·10 + 7."""
    log = PassLog()
    log.MAX_RUN_BLOCKS = 3
    expected, index = [], 0
    for k in range(7):
        if k % 2:
            expected.append(record(index, 4))
            log.append(expected[-1])
            index += 1
            continue
        passes = np.arange(index, index + 2)
        log.extend("aggregated", ["fixed", "fixed"],
                   (1, 0, passes, 10 * passes, 10 * passes + 7, np.array([2, 2]), 0, 0, np.array([2, 2]),
                    np.array([2, 2]), np.array([3, 3]), 0, np.array([7, 7]), 5), int(10 * passes[-1] + 7))
        expected += [record(int(i), 2) for i in passes]
        index += 2
        assert log.max_end_ns() == 10 * (index - 1) + 7
    assert list(log) == expected and len(log) == 11
    assert log.column("end_ns").tolist() == [10 * i + 7 for i in range(11)]
    assert log.max_end_ns() == 107


def test_an_empty_log_has_no_end():
    log = PassLog()
    assert log.max_end_ns(default=-1) == -1 and log.column("start_ns").size == 0
