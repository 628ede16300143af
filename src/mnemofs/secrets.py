"""Credentials in memory content, found at write time (issue 12).

Memories outlive sessions and are read by other agents and users, so a credential written into
one spreads. A store's ``secrets`` policy (``refuse``, the default for new stores, or
``allow``) decides whether a save whose content holds one is refused. The detection is
detect-secrets' (Yelp), a library made for this, limited to its high-confidence detectors:
cloud and service keys with a fixed shape, private keys, tokens of the common services and
URLs that carry a password. Its keyword and entropy detectors, which flag ordinary prose, are
not used, nor any verification (that would send the secret over the network). A password
that is a placeholder (``user:password@``, ``${PASSWORD}``, ``<password>``) is not a secret.

Only the kind and the line of a finding ever leave this module, never the secret itself.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

# detect-secrets' detectors that name a credential by its shape (see the module docstring).
DETECTORS = (
    "aws.AWSKeyDetector",
    "azure_storage_key.AzureStorageKeyDetector",
    "basic_auth.BasicAuthDetector",
    "discord.DiscordBotTokenDetector",
    "github_token.GitHubTokenDetector",
    "gitlab_token.GitLabTokenDetector",
    "jwt.JwtTokenDetector",
    "mailchimp.MailchimpDetector",
    "npm.NpmDetector",
    "openai.OpenAIDetector",
    "private_key.PrivateKeyDetector",
    "pypi_token.PypiTokenDetector",
    "sendgrid.SendGridDetector",
    "slack.SlackDetector",
    "square_oauth.SquareOAuthDetector",
    "stripe.StripeDetector",
    "telegram_token.TelegramBotTokenDetector",
    "twilio.TwilioKeyDetector",
)
# Passwords in example URLs: words, not secrets.
PLACEHOLDERS = frozenset(
    {"password", "passwd", "pass", "pwd", "secret", "changeme", "example", "xxx", "xxxx", "***"}
)
_TEMPLATED = re.compile(r"^(\$\{.*\}|\$\w+|<.*>|\{\{.*\}\}|\{.*\}|%\(?\w+\)?s?|\*+|x+|\.\.\.)$")


@dataclass(frozen=True)
class Finding:
    """A credential's kind and the line it is on (1-based); never the credential."""

    kind: str
    line: int

    def __str__(self) -> str:
        return f"{self.kind} on line {self.line}"


class _Literal:
    """A need that is plain text: ``in`` finds it in 4 KiB faster than the regex engine does
    (0.5 against 1.3 µs for ``aws``), and a screening asks for several."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def search(self, haystack: str) -> str | None:
        return self.text if self.text in haystack else None


_Need = re.Pattern[str] | _Literal


# Speed, not detection: the library's slowest patterns begin with a character class or are
# case-insensitive, so the regex engine tries them at every position (up to 150 µs each for
# 4 KiB). Each match must contain something that starts with a literal, which the engine finds
# fast; a text without it cannot match, and the pattern is skipped. Keyed by the library's own
# pattern text: a pattern this table does not know (a new release) always runs, so an update
# can make a save slower, never a secret missed.
_NEEDS: dict[str, _Need] = {
    r"[0-9a-z]{32}-us[0-9]{1,2}": re.compile(r"-us[0-9]"),
    r"\d{8,10}:[0-9A-Za-z_-]{35}": re.compile(r":[0-9A-Za-z_-]{35}"),
    r"xox(?:a|b|p|o|s|r)-(?:\d+-)+[a-z0-9]+": _Literal("xox"),
    r"[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}": re.compile(
        r"\.[a-zA-Z\d_-]{6}\."
    ),
    r"(?:r|s)k_live_[0-9a-zA-Z]{24}": _Literal("k_live_"),
    r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+": _Literal(
        "hooks.slack.com"
    ),
}
_AWS_NAMED = "aws.{0,20}?"  # the named-secret pattern of the AWS detector begins so
# mnemofs's own credentials (store/credentials.py): an API key or a session token.
_OWN = re.compile(r"mnemofs-(?:key|token)-[0-9A-HJKMNP-TV-Z]{26}-[A-Za-z0-9_-]{43}")
OWN_KIND = "mnemofs API key or session token"


# Text several patterns need, each found once per screening: a pattern whose text holds one
# of these in a part every match has (``_required_runs``) is skipped when the text does not.
# A screening is one scan of the text per pattern (~1.3 µs per 4 KiB, twice that when the text
# is not Latin-1); these leave one scan for six private keys, one for six GitLab tokens and
# one for two PyPI tokens.
_SHARED = {text: _Literal(text) for text in ("PRIVATE KEY", "gl", "pypi-AgE")}
_AWS_NEED = _Literal("aws")


def _need(pattern: Any) -> _Need | None:
    """What a match of ``pattern`` must contain; searched in the lowercased text when the
    pattern ignores case (a case-blind search of a literal is as slow as the pattern)."""
    if pattern.pattern.startswith(_AWS_NAMED):
        return _AWS_NEED
    if pattern.pattern in _NEEDS:
        return _NEEDS[pattern.pattern]
    if not pattern.flags & re.IGNORECASE:
        for run in _required_runs(pattern):
            for text, needle in _SHARED.items():
                if text in run:
                    return needle
    return None


def _required_runs(pattern: Any) -> list[str]:
    """The runs of literal text every match of ``pattern`` has, from the regex parser's tree:
    characters in sequence at the top level or in a group that is not repeated or optional.
    Empty where the parser is not the one this knows (then every pattern simply runs)."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = _parser.parse(pattern.pattern, pattern.flags)
    except (ImportError, AttributeError, re.error):
        return []
    runs: list[str] = []

    def walk(items: Any) -> None:
        run = ""
        for op, arg in items:
            if op is _parser.LITERAL:
                run += chr(arg)
                continue
            runs.append(run)
            run = ""
            if op is _parser.SUBPATTERN and not arg[1] & re.IGNORECASE:  # not (?i:...)
                walk(arg[-1])
        runs.append(run)

    walk(tree)
    return [run for run in runs if run]


# Characters from the most common in notes, prose and code to the rarest (any character not
# listed is rarer still): a gate holds the rarest of a pattern's characters.
_COMMON = " etaoinsrhldcu\nmfpgwyb.,v-k/_:0123456789x'\"()=jqz#*@"
_GATE_CHARS = 3


def _gate(pattern: Any) -> frozenset[str]:
    """Up to ``_GATE_CHARS`` characters every match of ``pattern`` contains, the rarest;
    none for a pattern that ignores case. Whether a text holds a character is a ``memchr``
    (~0.05 µs for 4 KiB) where the regex engine's scan for a pattern's literal start takes
    ~1.5 µs: a text that lacks one skips the pattern, and a screening asks the text for each
    character of every gate once (``_gate_chars``)."""
    if pattern.flags & re.IGNORECASE:
        return frozenset()
    chars = set("".join(_required_runs(pattern)))
    rarest = sorted(chars, key=lambda c: (-_COMMON.find(c) if c in _COMMON else -len(_COMMON), c))
    return frozenset(rarest[:_GATE_CHARS])


_OWN_GATE = _gate(_OWN)


@functools.cache
def _detectors() -> list[Any]:
    """The detectors, loaded on first use (importing detect-secrets takes ~0.2 s)."""
    import importlib

    found = []
    for name in DETECTORS:
        module, cls = name.rsplit(".", 1)
        found.append(getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), cls)())
    return found


class _Check(NamedTuple):
    """One pattern of a detector (``pattern`` None: a detector with a check of its own, run
    whole), and what lets a screening skip it: ``gate``, characters every match contains,
    and ``needs``, text every match contains (searched lowercased when ``blind``)."""

    detector: Any
    pattern: Any
    gate: frozenset[str]
    needs: _Need | None
    blind: bool


# Detectors whose own check only filters what their patterns match (the JWT one decodes it):
# a text that none of their patterns can match gives nothing.
_FILTERS_ITS_MATCHES = frozenset({"JwtTokenDetector"})


@functools.cache
def _checks() -> list[_Check]:
    """Every pattern of every detector, with its shortcuts (``_Check``)."""
    from detect_secrets.plugins.base import RegexBasedDetector

    checks: list[_Check] = []
    for detector in _detectors():
        if type(detector).analyze_string is RegexBasedDetector.analyze_string:
            checks += [
                _Check(detector, p, _gate(p), _need(p), bool(p.flags & re.IGNORECASE))
                for p in detector.denylist
            ]
        else:
            patterns = list(getattr(detector, "denylist", ()))
            known = type(detector).__name__ in _FILTERS_ITS_MATCHES and len(patterns) == 1
            gate = _gate(patterns[0]) if known else frozenset()
            checks.append(_Check(detector, None, gate, None, False))
    return checks


@functools.cache
def _gate_chars() -> str:
    """Every character some gate has: a screening asks the text for each of them once."""
    return "".join(sorted(set().union(_OWN_GATE, *(c.gate for c in _checks()))))


def load_checks() -> None:
    """Load the detectors now rather than at the first screening (for a long-lived process,
    from a thread of its own)."""
    _checks()


def find_secrets(text: str, *, known: str | None = None) -> list[Finding]:
    """Every credential in ``text``, in line order (one finding per kind and line). With
    ``known`` (what was stored before), only lines that are not in it are looked at: every
    detector matches within one line, and an append or an edit then costs what it changed."""
    if known is None:
        return _find(text)
    seen = set(known.split("\n"))
    lines = text.split("\n")
    numbers = [n for n, line in enumerate(lines, 1) if line not in seen]
    if not numbers:
        return []
    found = _find("\n".join(lines[n - 1] for n in numbers))
    return [Finding(f.kind, numbers[f.line - 1]) for f in found]


def _find(text: str) -> list[Finding]:
    findings: set[Finding] = set()
    lines = _Lines(text)
    lowered = text.lower()
    present: dict[tuple[_Need, bool], bool] = {}  # a need several patterns share
    held = {c for c in _gate_chars() if c in text}
    for detector, pattern, gate, needs, blind in _checks():
        if not held >= gate:
            continue
        if needs is not None:
            key = (needs, blind)
            if key not in present:
                present[key] = needs.search(lowered if blind else text) is not None
            if not present[key]:
                continue
        found = detector.analyze_string(text) if pattern is None else _matches(pattern, text)
        for secret in set(found):  # each text once: it is looked for wherever it is
            if _placeholder(secret):
                continue
            for line in lines.of(secret):
                findings.add(Finding(detector.secret_type, line))
    if held >= _OWN_GATE:
        for match in _OWN.finditer(text):
            findings.add(Finding(OWN_KIND, text.count("\n", 0, match.start()) + 1))
    return sorted(findings, key=lambda f: (f.line, f.kind))


def _matches(pattern: Any, text: str) -> Iterator[str]:
    """What the detector's ``analyze_string`` yields for one of its patterns: each match's
    groups that matched something, or the whole match where none did (the library yields an
    empty string there, a "secret" found on every line: GitLab's ``glcbt-`` tokens without
    their optional prefix)."""
    needle = _LINEWISE.get(pattern.pattern)
    found = pattern.finditer(text) if needle is None else _linewise(pattern, text, needle)
    for match in found:
        yield from [group for group in match.groups() if group] or [match.group()]


# Patterns that begin ``//.+``: ``.+`` stays on the line, so from a later ``//`` of a line a
# pattern matches only if it does from the first (that ``.+`` reaches every place a later
# start's can). ``finditer`` tries every ``//`` of a line that does not match, each a walk back
# over the line: 0.74 s for 100 KiB of npm's registry prefix, one line. So only the first
# ``//`` of a line is tried, and then the next line: the same matches (one may go on past its
# line, through the ``\s*`` after the needle; the next is looked for after it).
_LINEWISE = {r"\/\/.+\/:_authToken=\s*((npm_.+)|([A-Fa-f0-9-]{36})).*": "/:_authToken="}


def _linewise(pattern: Any, text: str, needle: str) -> Iterator[Any]:
    at = 0
    found = -1  # the next needle after the ``//`` tried, which a match's line must hold
    while (start := text.find("//", at)) >= 0:
        if found < start and (found := text.find(needle, start)) < 0:
            return
        end = text.find("\n", start)
        if 0 <= end < found:  # not on this line: on to the needle's, at once
            at = text.rfind("\n", 0, found) + 1
        elif (match := pattern.match(text, start)) is not None:
            yield match
            at = match.end()
        elif end < 0:
            return
        else:
            at = end + 1


def _placeholder(secret: str) -> bool:
    value = secret.strip("'\"")
    return value.lower() in PLACEHOLDERS or bool(_TEMPLATED.match(value))


class _Lines:
    """The lines a text holds something on. A text made of one credential-shaped run over and
    over (``AKIA`` x 4,000) is thousands of matches, each found again everywhere: counting
    newlines from the start for every place, at every place of every match, took 23 s for
    16 KiB (a save holding the mount's or the server's one thread all that time). Now each
    text is looked for once, from where its last place ended (a place that overlaps one found
    is on its line: no credential spans lines), and a place's line is a bisection of the
    newlines' offsets, found once."""

    __slots__ = ("_newlines", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._newlines: list[int] | None = None

    def of(self, secret: str) -> Iterator[int]:
        text, step = self.text, max(len(secret), 1)
        start = text.find(secret)
        while start >= 0:
            if self._newlines is None:
                self._newlines = [m.start() for m in re.finditer("\n", text)]
            yield bisect.bisect_left(self._newlines, start) + 1
            start = text.find(secret, start + step)
