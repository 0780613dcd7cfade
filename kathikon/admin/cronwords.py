"""Internal: cron expressions in words for the admin, in Django's active language.

The words come from cron-descriptor. Django's language code is mapped to one of
its locales (``de`` → ``de_DE``, ``zh-hans`` → ``zh_CN``); a language it does not
have is shown in English. Day and month names follow the server's ``LC_TIME``
(cron-descriptor takes them from :mod:`calendar`).
"""

from __future__ import annotations

import functools
from importlib import resources

from cron_descriptor import (
    ExpressionDescriptor,
    FormatException,
    MissingFieldException,
    Options,
    WrongArgumentException,
)
from django.utils.translation import get_language, to_locale

from kathikon.crontab import NICKNAMES

FALLBACK = "en_US"
# Django's script-tagged codes name no country; cron-descriptor's files do.
ALIASES = {"zh_Hans": "zh_CN", "zh_Hant": "zh_TW", "no": "nb_NO"}
_UNDESCRIBABLE = (FormatException, MissingFieldException, WrongArgumentException,
                  ValueError, IndexError)


def describe(expression: str, language: str | None = None) -> str:
    """``expression`` in words in ``language`` (default: the active one); as written if odd."""
    text = " ".join(expression.split())
    text = NICKNAMES.get(text.lower(), text)
    if len(text.split(" ")) != 5:  # cron-descriptor reads six fields as seconds first
        return expression
    words = _describe(text, locale_for(get_language() if language is None else language))
    return expression if words is None else words


@functools.lru_cache(maxsize=1024)  # admin lists repeat a few expressions; each read loads a .mo
def _describe(text: str, locale_code: str) -> str | None:
    try:
        # Options built here, not by keywords: its default reads the process locale first.
        options = Options(locale_code=locale_code)  # 12- or 24-hour clock as the locale uses
        return ExpressionDescriptor(text, options).get_description()
    except _UNDESCRIBABLE:
        return None


def locale_for(language: str | None) -> str:
    """cron-descriptor's locale for a Django language code; ``en_US`` when it has none."""
    if not language:
        return FALLBACK
    name = to_locale(language)
    name = ALIASES.get(name, name)
    available = _locales()
    if name in available:
        return name
    base = name.split("_")[0].lower()
    same_language = sorted(code for code in available if code.split("_")[0] == base)
    if f"{base}_{base.upper()}" in same_language:  # de → de_DE, es → es_ES (not es_MX)
        return f"{base}_{base.upper()}"
    if base == "en" or not same_language:
        return FALLBACK
    return same_language[0]


@functools.cache
def _locales() -> frozenset[str]:
    folder = resources.files("cron_descriptor").joinpath("locale")
    return frozenset(entry.name.removesuffix(".mo") for entry in folder.iterdir()
                     if entry.name.endswith(".mo"))
