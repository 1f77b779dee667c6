"""Time as status writes it: RFC 3339 strings and whole UTC seconds."""

from datetime import UTC, datetime


def parse_time(rfc3339: str) -> float:
    """Unix seconds of an RFC 3339 time (0 for one that does not parse)."""
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def utc(at: float) -> datetime:
    """Unix seconds as a status time (whole seconds, so repeated passes write the same)."""
    return datetime.fromtimestamp(round(at), UTC)
