"""Aviflow notebook magics and the job panel (see issue 4)."""
