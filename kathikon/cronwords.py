"""Internal: cron expressions in words for the admin ("every day at 09:00")."""

from __future__ import annotations

DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
MONTHS = ["", "January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
NICKNAMES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
             "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
             "@hourly": "0 * * * *"}


def describe(expression: str) -> str:
    """A short English reading of a five-field expression; the expression itself if unusual."""
    text = NICKNAMES.get(expression.strip().lower(), expression.strip())
    fields = text.split()
    if len(fields) != 5:
        return expression
    minute, hour, day, month, weekday = fields
    when = _time(minute, hour)
    if when is None:
        return expression
    if (day != "*" or month != "*" or weekday != "*") and when.startswith("every day "):
        when = when[len("every day "):]
    parts = [when]
    if day != "*":
        if not day.isdigit():
            return expression
        parts.append(f"on day {day} of the month")
    if month != "*":
        if not month.isdigit() or not 1 <= int(month) <= 12:
            return expression
        parts.append(f"in {MONTHS[int(month)]}")
    if weekday != "*":
        names = _weekdays(weekday)
        if names is None:
            return expression
        parts.append(f"on {names}")
    return " ".join(parts)


def _time(minute: str, hour: str) -> str | None:
    if minute == "*" and hour == "*":
        return "every minute"
    if minute.startswith("*/") and minute[2:].isdigit() and hour == "*":
        return f"every {minute[2:]} minutes"
    if minute.isdigit() and hour == "*":
        return f"every hour at minute {int(minute)}"
    if minute.isdigit() and hour.startswith("*/") and hour[2:].isdigit():
        return f"every {hour[2:]} hours at minute {int(minute)}"
    if minute.isdigit() and all(part.isdigit() for part in hour.split(",")):
        times = ", ".join(f"{int(h):02d}:{int(minute):02d}" for h in hour.split(","))
        return f"every day at {times}"
    return None


def _weekdays(field: str) -> str | None:
    if field in ("1-5", "mon-fri", "MON-FRI"):
        return "weekdays"
    names = []
    for part in field.split(","):
        if part.isdigit() and 0 <= int(part) <= 7:
            names.append(DAYS[int(part) % 7])
        elif part[:3].capitalize() in [d[:3] for d in DAYS]:
            names.append(DAYS[[d[:3] for d in DAYS].index(part[:3].capitalize())])
        else:
            return None
    return ", ".join(names)
