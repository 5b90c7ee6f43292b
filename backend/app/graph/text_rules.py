"""Text that can be stored, sent and written as UTF-8: the checks every input path shares.

A JSON body may carry a lone surrogate as an escape ("\\ud800"): Python decodes it into a str that
no UTF-8 encoder accepts, so it fails far from where it came in (the database driver, a model
request, a report file). Input is refused at the door instead, naming the field.
"""

from __future__ import annotations

import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a valid pair never reaches a str: JSON joins it


def lone_surrogate_problem(text: str) -> str | None:
    """Why `text` is not valid Unicode (a lone surrogate), or None."""
    found = _LONE_SURROGATE.search(text)
    if found is None:
        return None
    return (f"is not valid Unicode: it holds a lone surrogate (U+{ord(found.group()):04X}) "
            f"at character {found.start()}")


def first_invalid_text(value: Any, path: str = "") -> str | None:
    """A message naming the first string of a decoded JSON value, key or item, that is not valid
    Unicode ("'facts[0].source' is not valid Unicode: ..."); None when all are. `path` names
    `value` itself ("" for a whole body, "line 3" for a JSONL line); nesting is appended."""
    if isinstance(value, str):
        problem = lone_surrogate_problem(value)
        return f"{repr(path) if path else 'the text'} {problem}" if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = lone_surrogate_problem(key)
            if problem:
                return f"a key of {f'{path!r}' if path else 'the body'} {problem}"
            found = first_invalid_text(item, f"{path}.{key}" if path else key)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = first_invalid_text(item, f"{path}[{index}]")
            if found:
                return found
    return None
