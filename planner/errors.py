"""Errors the CLI turns into exit codes (2: bad input, 1: infeasible)."""
from __future__ import annotations


class PlannerError(Exception):
    exit_code = 3


class SpecError(PlannerError):
    """Bad input: names the file, the field and what is wrong."""

    exit_code = 2

    def __init__(self, file: str | None, field: str | None, reason: str):
        self.file, self.field, self.reason = file, field, reason
        where = ": ".join(p for p in (file, field) if p)
        super().__init__(f"{where}: {reason}" if where else reason)


class InfeasibleError(PlannerError):
    """No plan satisfies the constraints; the message names the binding one and by how much."""

    exit_code = 1
