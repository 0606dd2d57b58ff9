"""A waiting job's expected start and the numbers behind its wait, in words.

One formatter for every place that shows a queued job: ``aviflow ls`` (its START column,
:func:`start_short`) and ``aviflow status``, the notebook panel, the JupyterLab job view and
aviflow-api's pages (:func:`waiting_lines`), so the words are the same everywhere. The
JupyterLab sidebar mirrors it in TypeScript (``extensions/labextension/src/waiting.ts``), and
both are tested on the same samples. Pure: the estimate and the numbers come from the job's
status (:class:`~aviflow.estimate.Estimate`, :class:`~aviflow.estimate.WaitNumbers`); ``now``
is the reader's clock.

>>> est = Estimate("j", 1300.0, 1720.0)
>>> start_words(est, 1000.0), start_short(est, 1000.0)
('starts in about 5-12 min', '5-12 min')
>>> wait_words(WaitNumbers("vision", 8, 8, 0, 4, 2, 12))
'queue vision: quota 8 GPUs, holds 8 (0 borrowed), 4 idle in the cohort to borrow; 2 jobs ahead (12 GPUs)'
"""

from __future__ import annotations

import math

from aviflow.estimate import Estimate, WaitNumbers

NO_ESTIMATE = "-"  # the START column of a job without an estimate
SOON = 30.0  # seconds: a start this close (or past) is "any moment"


def _round(x: float) -> int:
    """Half up, as JavaScript's ``Math.round`` (the TypeScript mirror's)."""
    return math.floor(x + 0.5)


def amount(seconds: float) -> str:
    """A duration as a person reads a wait: minutes under 90 minutes, hours under two days,
    then days.

    >>> amount(290), amount(5400), amount(200000)
    ('5 min', '2 h', '2 d')
    """
    seconds = max(0.0, seconds)
    if seconds < 90 * 60:
        return f"{_round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{_round(seconds / 3600)} h"
    return f"{_round(seconds / 86400)} d"


def _span(low: float, high: float) -> str:
    """``low``..``high`` seconds from now: ``5-12 min``, ``20 min-2 h``, ``about 5 min``,
    ``within 12 min``."""
    a, b = amount(low), amount(max(low, high))
    if a == b:
        return f"about {a}"
    if a == "0 min":
        return f"within {b}"
    unit_a, unit_b = a.split(" ")[1], b.split(" ")[1]
    return f"{a.split(' ')[0]}-{b}" if unit_a == unit_b else f"{a}-{b}"


def start_short(est: Estimate | None, now: float) -> str:
    """A column's worth: ``5-12 min``, ``now``, ``never``, ``any moment``, ``5 min+`` (no
    later bound), ``unknown`` (no bound at all: a job ahead has no time limit),
    :data:`NO_ESTIMATE` without an estimate.

    >>> [start_short(e, 0.0) for e in (None, Estimate("j", 0.0, 0.0, now=True),
    ...  Estimate("j", None, None, "too big"), Estimate("j", 300.0, None))]
    ['-', 'now', 'never', '5 min+']
    """
    if est is None or (est.never is None and not est.now and est.low is est.high is None):
        return NO_ESTIMATE
    if est.never is not None:
        return "never"
    if est.now:
        return "now"
    low = (est.low or now) - now
    if est.high is None:
        return "unknown" if amount(low) == "0 min" else f"{amount(low)}+"
    if est.high - now < SOON:
        return "any moment"
    return _span(low, est.high - now)


def start_words(est: Estimate | None, now: float) -> str:
    """A sentence: ``starts in about 8 min (5-12 min)`` (its expected start, then its range;
    ``starts in about 5-12 min`` from a status with no expected start), ``starts now``,
    ``never at this quota: <the limit>``, ``starts any moment``, ``starts in 5 min or later
    (a job ahead has no time limit)``, ``start unknown: a job ahead has no time limit``;
    empty without an estimate.

    >>> start_words(Estimate("j", 300.0, 720.0, expected=480.0), 0.0)
    'starts in about 8 min (5-12 min)'

    >>> start_words(Estimate("j", None, None, "needs 16 GPUs; queue 'a' may hold at most 8"), 0.0)
    "never at this quota: needs 16 GPUs; queue 'a' may hold at most 8"
    >>> start_words(Estimate("j", 300.0, None), 0.0)
    'starts in 5 min or later (a job ahead has no time limit)'
    """
    short = start_short(est, now)
    if est is None or short == NO_ESTIMATE:
        return ""
    if est.never is not None:
        return f"never at this quota: {est.never}"
    if est.now or short == "any moment":
        return f"starts {short}"
    if short == "unknown":
        return "start unknown: a job ahead has no time limit"
    if est.high is None:
        return f"starts in {short[:-1]} or later (a job ahead has no time limit)"
    expected = _expected(est, now)
    if expected is not None and not short.startswith("about "):
        return f"starts in about {expected} ({short})"
    if short.startswith("within "):
        return f"starts {short}"
    return f"starts in {short}" if short.startswith("about ") else f"starts in about {short}"


def _expected(est: Estimate, now: float) -> str | None:
    """The expected start from ``now`` in words (None: the estimate has none, or it rounds
    to no time at all)."""
    if est.expected is None:
        return None
    found = amount(est.expected - now)
    return None if found == "0 min" else found


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def wait_words(wait: WaitNumbers) -> str:
    """Why it waits, in numbers its owner may see (its own queue's; the jobs ahead only
    counted, never named).

    >>> wait_words(WaitNumbers("a", 4, 6, 2, 0, 1, 1))
    'queue a: quota 4 GPUs, holds 6 (2 borrowed), 0 idle in the cohort to borrow; 1 job ahead (1 GPU)'
    >>> wait_words(WaitNumbers("a", 4, 0, 0, 0, 0, 0))
    'queue a: quota 4 GPUs, holds 0 (0 borrowed), 0 idle in the cohort to borrow; no job ahead'
    """
    ahead = (
        f"{_count(wait.ahead, 'job', 'jobs')} ahead ({_count(wait.ahead_gpus, 'GPU', 'GPUs')})"
        if wait.ahead
        else "no job ahead"
    )
    return (
        f"queue {wait.queue}: quota {_count(wait.quota, 'GPU', 'GPUs')}, holds {wait.holds} "
        f"({wait.borrowed} borrowed), {wait.lendable} idle in the cohort to borrow; {ahead}"
    )


def waiting_lines(
    est: Estimate | None, wait: WaitNumbers | None, reason: str, now: float
) -> list[str]:
    """What a view shows of a queued job, one line each: when it starts, the numbers, and
    the reason in the queue's words (Kueue's on a cluster); a line without data is left out.

    >>> waiting_lines(Estimate("j", 0.0, 0.0, now=True), None, "waiting for 4 GPUs", 0.0)
    ['starts now', 'reason: waiting for 4 GPUs']
    """
    lines = [start_words(est, now), wait_words(wait) if wait is not None else ""]
    if reason:
        lines.append(f"reason: {reason}")
    return [line for line in lines if line]
