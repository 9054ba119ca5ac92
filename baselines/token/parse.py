"""Generated text -> a legal action, by one documented normalisation rule.

The token plane writes free text; the env only accepts its legal actions. A
command is mapped to a legal action like this:

1. the text before the first newline is the command (``rlid.menus.parse_command``);
2. if the stripped command *is* a legal action, that action;
3. otherwise the command and every legal action are normalised by
   :func:`normalise_command` and compared exactly: one matching legal action
   is the answer; none or several (ambiguity) make the command **invalid**
   (``None``), and the env receives the raw text (a no-op step flagged
   ``invalid_action``).

Normalisation, applied until nothing changes:

* lowercase (``str.lower``);
* whitespace runs (any Unicode whitespace) collapse to one space, ends stripped;
* trailing punctuation (``string.punctuation``) is stripped;
* the articles ``the``, ``a``, ``an`` are dropped as whole words.

So ``"Take  the Brass key."`` matches ``"take brass key"`` and ``"take the brass
key"``. Nothing else is forgiven: no synonyms, no word order, no prefix matching.

Example::

    >>> parse_action("Go East!", ["go east", "look"])
    'go east'
    >>> parse_action("take key", ["take the key", "take a key"]) is None  # ambiguous
    True
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from rlid.menus.prompt import parse_command

ARTICLES = frozenset({"the", "a", "an"})
TRAILING_PUNCTUATION = string.punctuation


def _normalise_once(text: str) -> str:
    words = text.lower().split()  # split() with no argument: any whitespace run
    text = " ".join(w for w in words if w not in ARTICLES)
    return text.rstrip(TRAILING_PUNCTUATION + string.whitespace)


def normalise_command(text: str) -> str:
    """The normal form of a command (see the module docstring); idempotent."""
    while True:
        normal = _normalise_once(text)
        if normal == text:
            return normal
        text = normal


def parse_action(generated: str, legal_actions: Sequence[str]) -> str | None:
    """The legal action ``generated`` names, or ``None`` when it names none or several.

    Args:
        generated: the decoded completion (text after the first newline is ignored).
        legal_actions: the state's legal actions, exactly as the env accepts them.
    """
    command = parse_command(generated)
    if command in legal_actions:
        return command
    target = normalise_command(command)
    if not target:
        return None
    matches = [a for a in legal_actions if normalise_command(a) == target]
    return matches[0] if len(matches) == 1 else None
