"""The job list as a feed of changes (aviflow_jupyter.feed), and the first login's example
notebook (aviflow_jupyter.welcome): pure, exact."""

from __future__ import annotations

import json
from pathlib import Path

from aviflow.examples.notebook import EXAMPLE_NAME, example_notebook
from aviflow_jupyter.feed import MAX_REMOVED, JobFeed
from aviflow_jupyter.welcome import MARKER, write_example


def job(job_id: str, state: str = "QUEUED", **more: object) -> dict[str, object]:
    return {"id": job_id, "state": state, **more}


def test_a_first_read_is_everything_then_only_changes() -> None:
    feed = JobFeed(base=1000)
    feed.update([job("b"), job("a")])
    first = feed.since(0)
    assert (first.jobs, first.removed, first.next, first.reset) == (
        [job("b"), job("a")],
        [],
        1002,
        True,
    )
    feed.update([job("b"), job("a")])  # nothing changed: no new version
    assert feed.since(1002).jobs == [] and feed.cursor == 1002

    feed.update([job("c"), job("b", "RUNNING"), job("a")])
    changes = feed.since(1002)
    assert (changes.jobs, changes.removed, changes.next, changes.reset) == (
        [job("c"), job("b", "RUNNING")],
        [],
        1004,
        False,
    )
    # an older cursor sees everything after it, in list order
    assert [j["id"] for j in feed.since(1001).jobs] == ["c", "b", "a"]


def test_jobs_that_leave_the_list_are_removed_and_can_come_back() -> None:
    feed = JobFeed(base=0)
    feed.update([job("b"), job("a")])
    feed.update([job("b")])
    gone = feed.since(2)
    assert (gone.jobs, gone.removed, gone.next) == ([], ["a"], 3)
    feed.update([job("b"), job("a", "FAILED")])
    back = feed.since(3)
    assert (back.jobs, back.removed) == ([job("a", "FAILED")], [])
    assert feed.since(0).removed == []  # a reset is the whole list, with nothing to remove


def test_a_cursor_this_feed_never_gave_resets_the_client() -> None:
    feed = JobFeed(base=5000)
    feed.update([job("a")])
    for cursor in (0, 4999, 5002, 10**15):
        answer = feed.since(cursor)
        assert answer.reset is True and answer.jobs == [job("a")], cursor
    assert feed.since(5000).reset is False and feed.since(5001).reset is False


def test_a_client_older_than_the_removals_remembered_resets() -> None:
    feed = JobFeed(base=0)
    feed.update([job(str(i)) for i in range(MAX_REMOVED + 2)])
    start = feed.cursor
    feed.update([])  # every job leaves: the oldest two removals are forgotten
    old = feed.since(start)
    assert (old.jobs, old.removed, old.reset) == ([], [], True)
    assert feed.since(start + 2).reset is False
    assert len(feed.since(start + 2).removed) == MAX_REMOVED


def test_a_job_listed_twice_counts_once() -> None:
    feed = JobFeed(base=0)
    feed.update([job("a"), job("a", "RUNNING")])
    assert feed.since(0).jobs == [job("a")] and feed.cursor == 1


def test_the_example_is_written_once_and_never_again(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    assert write_example(home, data) == home / EXAMPLE_NAME
    assert json.loads((home / EXAMPLE_NAME).read_text()) == example_notebook()
    assert (data / MARKER).read_text() == f"{home / EXAMPLE_NAME}\n"
    (home / EXAMPLE_NAME).unlink()
    assert write_example(home, data) is None
    assert not (home / EXAMPLE_NAME).exists()


def test_a_users_own_file_of_that_name_is_kept(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    (home / EXAMPLE_NAME).write_text("mine")
    assert write_example(home, data) == home / EXAMPLE_NAME
    assert (home / EXAMPLE_NAME).read_text() == "mine"


def test_a_read_only_home_is_not_an_error(tmp_path: Path) -> None:
    home, data = tmp_path / "missing-home", tmp_path / "data"
    assert write_example(home, data) is None
    assert not (data / MARKER).exists()  # tried again next time


def test_the_example_notebook_is_valid_nbformat() -> None:
    import nbformat

    nb = nbformat.from_dict(example_notebook())
    nbformat.validate(nb)
    sources = ["".join(c["source"]) for c in example_notebook()["cells"]]
    assert sources[1] == "%load_ext aviflow"
    assert sources[2].splitlines()[0] == (
        "%%aviflow_train --nodes 2 --gpus-per-node 2 --time-limit 10m --name tiny-regression"
        " --out job"
    )
