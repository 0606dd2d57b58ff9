"""Who may see and act on which job: pure functions over a principal, a job and the config.

Rules (DESIGN.md): users see and act on their own jobs; team admins on their team's jobs;
hub admins on every job. Team membership comes from JupyterHub groups
(group -> team -> Kueue LocalQueue). A token also needs the action's scope.

>>> cfg = HubConfig.from_dict({"teams": [{"name": "a", "groups": ["a"], "queue": "qa"}]})
>>> alice = Principal("alice", groups=frozenset({"a"}), scopes=frozenset({READ_SCOPE}))
>>> decide(alice, "read", JobRef("j-1", user="alice", team="a"), cfg).allowed
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from aviflow_hub.config import HubConfig, Team

READ_SCOPE = "custom:aviflow:read"
SUBMIT_SCOPE = "custom:aviflow:submit"
CUSTOM_SCOPES = {
    READ_SCOPE: {"description": "List and read your Aviflow jobs, queues and usage."},
    SUBMIT_SCOPE: {"description": "Submit and cancel Aviflow jobs on your behalf."},
}
Action = Literal["read", "cancel", "submit"]
_SCOPE_FOR: dict[str, str] = {"read": READ_SCOPE, "cancel": SUBMIT_SCOPE, "submit": SUBMIT_SCOPE}


@dataclass(frozen=True)
class Principal:
    """An authenticated hub user as the service sees them."""

    name: str
    groups: frozenset[str] = frozenset()
    admin: bool = False
    scopes: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class JobRef:
    """What authorization needs to know about a job."""

    id: str
    user: str
    team: str | None = None
    queue: str | None = None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    status: int = 200
    reason: str = ""


ALLOW = Decision(True)


def member_teams(principal: Principal, cfg: HubConfig) -> list[Team]:
    """Teams whose groups the principal is in, or which the principal administers."""
    admin_of = set(administered_teams(principal, cfg))
    return [t for t in cfg.teams if principal.groups & set(t.groups) or t.name in admin_of]


def administered_teams(principal: Principal, cfg: HubConfig) -> list[str]:
    return [
        t.name
        for t in cfg.teams
        if principal.name in t.admins or principal.groups & set(t.admin_groups)
    ]


def scope_for(action: Action) -> str:
    """The token scope ``action`` needs."""
    return _SCOPE_FOR[action]


def has_scope(principal: Principal, action: Action) -> bool:
    return _SCOPE_FOR[action] in principal.scopes


def can_see(principal: Principal, job: JobRef, cfg: HubConfig) -> bool:
    """Own job, a job of a team the principal administers, or any job for hub admins."""
    if principal.admin or job.user == principal.name:
        return True
    return job.team is not None and job.team in administered_teams(principal, cfg)


def decide(principal: Principal, action: Action, job: JobRef, cfg: HubConfig) -> Decision:
    """May ``principal`` do ``action`` ("read" or "cancel") on ``job``?

    A job the principal may not see is answered 404, so its existence does not leak; a
    visible job without the action's scope is 403.
    """
    if not can_see(principal, job, cfg):
        return Decision(False, 404, f"no job {job.id!r}")
    if not has_scope(principal, action):
        return Decision(False, 403, f"this token lacks the scope {_SCOPE_FOR[action]}")
    return ALLOW


@dataclass(frozen=True)
class QueueChoice:
    decision: Decision
    team: Team | None = None


def choose_queue(principal: Principal, requested: str, cfg: HubConfig, gpus: int) -> QueueChoice:
    """The team (and LocalQueue) a submission goes to, or why it may not.

    ``requested`` is the spec's ``queue``; ``"default"`` picks the principal's only team.
    """
    if not has_scope(principal, "submit"):
        return QueueChoice(Decision(False, 403, f"this token lacks the scope {SUBMIT_SCOPE}"))
    mine = member_teams(principal, cfg)
    if requested == "default":
        if len(mine) != 1:
            if not mine:
                return QueueChoice(
                    Decision(
                        False,
                        403,
                        f"{principal.name} is in no team; ask an admin to add you to a team's group",
                    )
                )
            names = ", ".join(t.queue for t in mine)
            return QueueChoice(
                Decision(False, 400, f"you are in several teams; set spec.queue to one of: {names}")
            )
        team = mine[0]
    else:
        found = cfg.team_for_queue(requested)
        if found is None:
            names = ", ".join(t.queue for t in mine) or "(none)"
            return QueueChoice(
                Decision(False, 400, f"no queue {requested!r}; your queues: {names}")
            )
        if not principal.admin and found not in mine:
            return QueueChoice(
                Decision(
                    False,
                    403,
                    f"queue {requested!r} belongs to team {found.name!r}, which you are not in",
                )
            )
        team = found
    if gpus > team.gpu_quota:
        return QueueChoice(
            Decision(
                False,
                400,
                f"the job needs {gpus} GPUs but queue {team.queue!r} has a quota of {team.gpu_quota}",
            )
        )
    return QueueChoice(ALLOW, team)


@dataclass(frozen=True)
class Visibility:
    """Which ledger rows a principal may see: everything, or some users and teams."""

    everything: bool
    users: frozenset[str]
    teams: frozenset[str]

    def allows(self, user: str, team: str | None) -> bool:
        return self.everything or user in self.users or (team is not None and team in self.teams)


def visibility(principal: Principal, cfg: HubConfig) -> Visibility:
    return Visibility(
        principal.admin, frozenset({principal.name}), frozenset(administered_teams(principal, cfg))
    )


def visible_queues(principal: Principal, cfg: HubConfig) -> list[Team]:
    return list(cfg.teams) if principal.admin else member_teams(principal, cfg)
