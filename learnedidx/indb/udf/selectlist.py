"""SQL select lists, as the training functions take them: items split at top-level commas,
identifiers, MADlib's ``ARRAY[1, x1, x2]`` form of the independent variables."""
from __future__ import annotations

import re

from learnedidx.errors import SQLSyntaxError

_IDENT = re.compile(r'\s*(?:([A-Za-z_][A-Za-z0-9_$]*)|"((?:[^"]|"")+)")\s*$')
_ARRAY = re.compile(r"(?is)\s*array\s*\[(.*)\]\s*$")


def split_top(text: str) -> list[str]:
    """The comma-separated items of a select list (or of MADlib's ``name=value`` parameter
    strings), commas inside (), [], {} or quotes aside: ``'lambda=[0.1, 1], class_weight={-1:1,
    1:10}'`` has two items."""
    items: list[str] = []
    cur: list[str] = []
    depth, quote = 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    return items + ["".join(cur).strip()]


def ident(item: str) -> str | None:
    """The name an identifier item means (folded to lower case unless quoted), or None when
    the item is not one identifier."""
    m = _IDENT.match(item)
    if m is None:
        return None
    return m.group(1).lower() if m.group(1) else m.group(2).replace('""', '"')


def feature_items(indep: str) -> tuple[list[str], bool | None]:
    """The items of ``indep`` and the intercept it states: MADlib's ``'ARRAY[1, x1, x2]'``
    states one (true with a 1 among the items, which is left out, false without); any other
    form states none (None)."""
    listed = array_items(indep)
    items = split_top(indep) if listed is None else listed
    if "" in items:
        raise SQLSyntaxError(f"indep lists an empty item: {indep!r}")
    if listed is None:
        return items, None
    return (items[1:] if items and items[0] == "1" else items), "1" in items


def array_items(indep: str) -> list[str] | None:
    """The items of MADlib's ``'ARRAY[...]'`` form of ``indep`` (None for another form)."""
    array_form = _ARRAY.match(indep)
    return None if array_form is None else split_top(array_form.group(1))


def one_expression(item: str, what: str) -> str:
    """``item`` (stripped), checked to be one SQL expression as written: quotes closed,
    parentheses and brackets balanced and never closing what it did not open, and no statement
    separator, comment or dollar quote outside quotes; so that, parenthesized, it stays one
    expression of the statement it is put in.  SQLSyntaxError (42601) otherwise, naming ``what``."""
    text = item.strip()
    depth, quote, prev = 0, None, ""
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            if ch == "'" and prev in "eE" and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] in "_$")):
                break  # an escape string: E'\'' closes where the scan cannot tell
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth < 0:
                break
        elif ch == ";" or text.startswith(("--", "/*"), i) or \
                (ch == "$" and not (prev.isalnum() or prev in "_$")):
            break
        prev = ch
    else:
        if text and depth == 0 and quote is None:
            return text
    raise SQLSyntaxError(f"{what} must be SQL expressions, comma-separated: {item!r} is not one")
