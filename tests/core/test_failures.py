"""Root-cause attribution when one rank's failure makes its peers fail."""

from __future__ import annotations

from aviflow.failures import first_failure, is_communication_error, launcher_root_causes

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

GLOO = {
    "rank": 2,
    "time": 1.0,
    "exception": "RuntimeError",
    "message": "[pair.cc:561] Connection closed by peer [127.0.0.1]:14987.",
    "traceback": "...",
}
USER = {
    "rank": 3,
    "time": 2.0,
    "exception": "ValueError",
    "message": "bad batch",
    "traceback": "tb",
}


def test_launcher_root_cause_is_parsed():
    assert launcher_root_causes(NODE_LOG) == [{"rank": 1, "exit_code": -9}]
    assert launcher_root_causes("no failures here") == []


def test_a_user_error_beats_earlier_communication_errors():
    assert first_failure([GLOO, USER], []) is USER


def test_a_killed_rank_beats_the_communication_errors_it_caused():
    found = first_failure([GLOO], launcher_root_causes(NODE_LOG))
    assert found == {
        "rank": 1,
        "exception": "Signal",
        "message": "rank 1 was killed by signal 9",
        "traceback": "",
        "exit_code": -9,
    }


def test_only_communication_errors_fall_back_to_the_earliest():
    assert first_failure([GLOO], []) is GLOO
    assert first_failure([], []) is None


def test_communication_error_detection():
    assert is_communication_error(GLOO)
    assert is_communication_error({"exception": "DistBackendError", "message": "x"})
    assert not is_communication_error(USER)
