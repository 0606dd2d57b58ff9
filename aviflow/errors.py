"""Exceptions raised by Aviflow. Every message says what was wrong and how to fix it."""

from __future__ import annotations


class AviflowError(Exception):
    """Base class for every error Aviflow raises on purpose."""


class SpecError(AviflowError, ValueError):
    """A TrainJob spec (or an option that builds one) is invalid.

    ``problems`` holds one line per problem, each naming the offending key.
    """

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        head = "invalid TrainJob spec" if len(self.problems) != 1 else "invalid TrainJob spec:"
        if len(self.problems) == 1:
            super().__init__(f"{head} {self.problems[0]}")
        else:
            super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


class JobNotFound(AviflowError, LookupError):
    """No job with this id exists in the run store."""


class BackendError(AviflowError):
    """A backend refused or failed an operation (capacity, missing executables, ...)."""
