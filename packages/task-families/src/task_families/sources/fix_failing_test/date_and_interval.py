"""Date and interval helpers for the shift scheduler (no datetime on purpose)."""


def _is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    """Number of days in month (1-12) of year."""
    if month == 2:
        return 29 if _is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def day_of_year(year, month, day):
    """1-based position of the date within its year."""
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def quarter(month):
    """Quarter (1-4) that month (1-12) falls in."""
    return (month - 1) // 3 + 1


def _minutes(hhmm):
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def duration(start, end):
    """Minutes from start to end ("HH:MM"); an end before start wraps past midnight."""
    return (_minutes(end) - _minutes(start)) % (24 * 60)


def overlap(a_start, a_end, b_start, b_end):
    """Length of the overlap of [a_start, a_end) and [b_start, b_end); 0 when none."""
    return max(0, min(a_end, b_end) - max(a_start, b_start))
