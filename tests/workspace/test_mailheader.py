"""The header date of a new patch is RFC 2822's, byte for byte what ``email.utils`` writes (which
``new`` no longer imports)."""

from __future__ import annotations

import datetime as dt
import email.utils
import random

from materialize.workspace.mailheader import mail_date


def test_mail_date_is_email_utils_format_datetime() -> None:
    rng = random.Random(7)
    for i in range(2000):
        zone = None if i % 9 == 0 else dt.timezone(dt.timedelta(minutes=rng.randint(-14 * 60, 14 * 60)))
        when = dt.datetime(rng.randint(1, 9999), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
                           rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999_999), tzinfo=zone)
        assert mail_date(when) == email.utils.format_datetime(when), when
    assert mail_date(dt.datetime(2026, 9, 21, 10, 0, tzinfo=dt.UTC)) == "Mon, 21 Sep 2026 10:00:00 +0000"


def test_date_now_is_what_mail_date_writes_for_now_in_every_zone(monkeypatch) -> None:
    """``new`` dates its header with ``time`` (not datetime): the same text as before, local offset
    included (half-hour zones, negative ones), and SOURCE_DATE_EPOCH in UTC."""
    import time

    from materialize.workspace.mailheader import date_now

    for zone in ("UTC", "America/St_Johns", "Asia/Kolkata", "Pacific/Chatham", "America/Los_Angeles", "Europe/Paris"):
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        for _ in range(3):
            before = mail_date(dt.datetime.now(dt.UTC).astimezone())
            now = date_now()
            if now == before:
                break
        assert now == before, zone
    monkeypatch.delenv("TZ")
    time.tzset()
    rng = random.Random(3)
    for _ in range(500):
        epoch = rng.randint(0, 2**33)
        assert date_now(str(epoch)) == mail_date(dt.datetime.fromtimestamp(epoch, tz=dt.UTC)), epoch
