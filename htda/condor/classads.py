"""The one place HTDA touches HTCondor's ClassAd code (``classad2`` from the ``htcondor`` wheel).

Parsing and printing are HTCondor's own.  Importing ``classad2`` costs tens of
milliseconds, so the hook executables never import this module: the submit
agent (a long-running node component) does the ClassAd work for them.
"""

from __future__ import annotations

from typing import Any

import classad2

__all__ = ["AdError", "ClassAd", "ExprTree", "parse_job", "parse_route", "print_old", "print_attributes",
           "evaluate", "expr", "quote", "affinity_expression", "follow_copies", "numeric_rank"]

ClassAd = classad2.ClassAd
ExprTree = classad2.ExprTree

class AdError(ValueError):
    """The text is not a well-formed ClassAd."""


def parse_job(text: str) -> classad2.ClassAd:
    """Parse an old-format ad; raise :class:`AdError` when any line is not ``Name = expression``.

    ``classad2`` stops silently at the first bad line, so the names it
    returned are checked against the names in the text.
    """
    if "\r" in text:  # HTCondor ends lines with "\n" alone; an answer would mix line ends
        raise AdError("the ad has carriage returns")
    names = set()
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, eq, _ = stripped.partition("=")
        if not eq or not name.strip():
            raise AdError(f"line {number} is not 'Name = expression': {stripped[:80]!r}")
        names.add(name.strip().lower())
    ad = classad2.parseOne(text, classad2.ParserType.Old)
    parsed = {key.lower() for key in ad.keys()}
    if parsed != names:
        bad = sorted(names - parsed)[:3]
        raise AdError(f"HTCondor's parser did not accept the attribute(s) {', '.join(bad)}")
    return ad


def parse_route(text: str) -> classad2.ClassAd | None:
    """The route ad (new syntax, one line); None when there is none or it does not parse."""
    if not text or not text.strip():
        return None
    try:
        return classad2.parseOne(text, classad2.ParserType.New)
    except (classad2.ClassAdException, ValueError, SyntaxError):
        return None


def print_old(ad: classad2.ClassAd) -> str:
    """The ad in old format, ``Name = expression`` per line, as HTCondor prints it.

    Raises :class:`AdError` when a value holds a control character: old ClassAd syntax has no
    escape for a line break (HTCondor prints it raw, and the next line becomes an attribute of its
    own to whoever reads the ad), so such an ad cannot be printed safely at all.
    """
    text = ad.printOld()
    if text.count("\n") != len(ad) or _has_control(text.replace("\n", "")):
        bad = next((name for name in ad.keys() if _has_control(_one(ad, name).printOld()[:-1])), "?")
        raise AdError(f"attribute {bad} holds a line break or control character, which old ClassAd "
                      "syntax cannot carry")
    return text


def print_attributes(ad: classad2.ClassAd, names: list[str]) -> str:
    """Only the attributes ``names`` of ``ad``, in old format (see :func:`print_old`)."""
    return print_old(_one(ad, *names))


def _one(ad: classad2.ClassAd, *names: str) -> classad2.ClassAd:
    part = classad2.ClassAd()
    for name in names:
        part[name] = ad.lookup(name)
    return part


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or c == "\x7f" for c in text)


def evaluate(ad: classad2.ClassAd, name: str, default: Any = None) -> Any:
    """The value of attribute ``name`` evaluated in ``ad`` (expressions too); ``default`` if
    missing, undefined or an error."""
    if name not in ad:
        return default
    try:
        value = ad.eval(name)
    except (classad2.ClassAdException, ValueError, TypeError, RuntimeError):
        return default
    if isinstance(value, classad2.Value):  # Undefined or Error (an Undefined compares equal to 2!)
        return default
    return value


def expr(text: str) -> classad2.ExprTree:
    """An expression to assign into an ad."""
    return classad2.ExprTree(text)


def quote(text: str) -> str:
    """``text`` as a ClassAd string literal."""
    return classad2.quote(text)


def affinity_expression(fractions: list[tuple[str, float]], node_attr: str) -> str:
    """An expression worth each node's fraction when the matched machine is that node, else 0.0.

    ``node_attr`` names the job attribute that evaluates to the machine's HTDA
    node name.  Nested ``ifThenElse`` with ``=?=`` (case-sensitive, never
    undefined) so it evaluates to a real in every negotiator.
    """
    result = "0.0"
    for node, fraction in reversed(fractions):
        result = f"ifThenElse({node_attr} =?= {quote(node)}, {float(fraction)!r}, {result})"
    return result


def follow_copies(key_attr: str, groups_attr: str, otherwise: str) -> str:
    """``otherwise``, or 1.0 on a machine whose string list ``groups_attr`` names the job's ``key_attr``: a node
    holding the job's whole input set, whenever it came to hold it.  A machine without the list (``undefined``)
    gives ``otherwise``."""
    return f"ifThenElse(stringListMember({key_attr}, TARGET.{groups_attr}) =?= true, 1.0, {otherwise})"


def numeric_rank(attr: str) -> str:
    """An expression giving the numeric value of the expression in ``attr`` (booleans as 1/0,
    anything not a number as 0), so a user's Rank can be added to the affinity term."""
    return (f"ifThenElse(isBoolean({attr}), ifThenElse({attr}, 1.0, 0.0), "
            f"ifThenElse(isReal({attr}) || isInteger({attr}), real({attr}), 0.0))")
