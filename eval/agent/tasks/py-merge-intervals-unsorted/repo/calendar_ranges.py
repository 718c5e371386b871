"""Time ranges for the booking calendar."""


def merge(intervals):
    """Merge overlapping (start, end) intervals.

    Intervals that overlap or touch, such as (1, 3) and (3, 5), become one.
    The result is sorted by start.
    """
    merged = []
    for start, end in intervals:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total_length(intervals):
    """The time covered by the intervals, overlaps counted once."""
    return sum(end - start for start, end in merge(intervals))
