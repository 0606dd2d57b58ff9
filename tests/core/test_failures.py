"""Root-cause attribution when one rank's failure makes its peers fail."""

from __future__ import annotations

from aviflow.failures import attribute, first_failure, launcher_root_causes
from aviflow.records import FailureInfo

NODE_LOG = """\
[W1130 01:37:47] Sending process 29176 closing signal SIGTERM
torch.distributed.elastic.multiprocessing.api: failed (exitcode: -9) local_rank: 1
============================================================
Failures:
[1]:
  time      : 2026-11-30_01:37:47
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 29176)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_01:37:47
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 29177)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 29177
============================================================
"""

GLOO = FailureInfo(
    rank=2,
    node=1,
    attempt=1,
    time=1.0,
    exception="RuntimeError",
    message="[pair.cc:561] Connection closed by peer [127.0.0.1]:14987.",
    traceback="...",
)
USER = FailureInfo(
    rank=3, node=1, attempt=1, time=2.0, exception="ValueError", message="bad batch", traceback="tb"
)


def test_launcher_root_cause_is_parsed():
    assert launcher_root_causes(NODE_LOG) == [(1, -9)]
    assert launcher_root_causes("no failures here") == []


def test_a_user_error_beats_earlier_communication_errors():
    assert first_failure([GLOO, USER], []) is USER


def test_a_killed_rank_beats_the_communication_errors_it_caused():
    found = first_failure([GLOO], launcher_root_causes(NODE_LOG))
    assert found == FailureInfo(
        rank=1, exception="Signal", message="rank 1 was killed by signal 9", exit_code=-9
    )


def test_only_communication_errors_fall_back_to_the_earliest():
    assert first_failure([GLOO], []) is GLOO
    assert first_failure([], []) is None


def test_communication_error_detection():
    assert GLOO.is_communication_error()
    assert FailureInfo(exception="DistBackendError", message="x").is_communication_error()
    assert not USER.is_communication_error()


def test_attribution_of_an_attempt():
    # a user error: its record, with the node it ran on
    assert attribute([GLOO, USER], {0: "", 1: ""}, {0: None, 1: 1}, 2) == USER
    # a rank killed by a signal: from the launcher's report, node from the rank, its log tail
    killed = attribute([], {0: NODE_LOG}, {0: 1, 1: None}, 2, {1: "last words"})
    assert (killed.rank, killed.node, killed.exception, killed.log_tail) == (
        1,
        0,
        "Signal",
        "last words",
    )
    # no record at all: the first node that exited non-zero, with the end of its output
    node = attribute([], {0: "ok", 1: "x" * 5000 + "Segmentation fault"}, {0: 0, 1: -11}, 2)
    assert (node.rank, node.node, node.exit_code) == (None, 1, -11)
    assert node.log_tail.endswith("Segmentation fault") and len(node.log_tail) == 4000
    assert node.where() == "node 1" and node.what() == "exit code -11"
