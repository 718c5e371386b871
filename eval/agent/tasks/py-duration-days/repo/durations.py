"""Human-readable durations such as "2h 5m 30s"."""

import re

_UNITS = [("h", 3600), ("m", 60), ("s", 1)]
_PART = re.compile(r"(\d+)([hms])")


def format_duration(seconds):
    """Format whole seconds as "2h 5m 30s", leaving out zero parts."""
    if seconds < 0:
        raise ValueError("negative duration")
    parts = []
    for unit, size in _UNITS:
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{n}{unit}")
    return " ".join(parts) or "0s"


def parse_duration(text):
    """Parse "2h 5m 30s" (parts in any order, spaces optional) to seconds."""
    text = text.strip()
    pos = 0
    total = 0
    sizes = dict(_UNITS)
    for match in _PART.finditer(text):
        if text[pos:match.start()].strip():
            break
        total += int(match.group(1)) * sizes[match.group(2)]
        pos = match.end()
    if not text or text[pos:].strip():
        raise ValueError(f"bad duration: {text!r}")
    return total
