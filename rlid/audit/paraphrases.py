"""Wording sets: several texts a policy could write for one text-game action.

The marginalization audit (``rlid audit``) needs, for each legal action, the set of
commands y with f(y) = a. Two styles, each a function from action to wordings with
the canonical action text first:

* ``synonyms`` (:func:`paraphrases`): common text-game verb synonyms ("go east",
  "walk east", "head east", "east"; "take", "get", "pick up"; "examine", "look at",
  "x" ...). Many are accepted by Inform-style game parsers; the project's own
  token-plane parse rule (``rlid.baselines.token.parse``) accepts none of them, so this style
  audits a text policy whose f is a forgiving parser.
* ``surface`` (:func:`surface_variants`): case, article and trailing-punctuation
  variants ("open chest", "open the chest", "Open chest", "open chest."), exactly the
  variants the project's parse rule maps to the same legal action.

    >>> paraphrases("go east")[:3]
    ('go east', 'walk east', 'head east')
    >>> paraphrases("take rusty key")[:3]
    ('take rusty key', 'get rusty key', 'pick up rusty key')
    >>> surface_variants("open chest")
    ('open chest', 'open the chest', 'Open chest', 'open chest.')
"""

from __future__ import annotations

from collections.abc import Callable

DIRECTIONS = ("north", "south", "east", "west", "up", "down")

# Verb -> templates; "{obj}" is the rest of the action text. The canonical verb comes
# first so the canonical action is always the first wording.
VERB_TEMPLATES: dict[str, tuple[str, ...]] = {
    "go": ("go {obj}", "walk {obj}", "head {obj}", "move {obj}"),
    "take": ("take {obj}", "get {obj}", "pick up {obj}", "grab {obj}"),
    "drop": ("drop {obj}", "put down {obj}", "discard {obj}"),
    "open": ("open {obj}", "open the {obj}", "pull open {obj}"),
    "close": ("close {obj}", "close the {obj}", "shut {obj}"),
    "examine": ("examine {obj}", "look at {obj}", "inspect {obj}", "x {obj}"),
    "eat": ("eat {obj}", "consume {obj}", "eat the {obj}"),
    "unlock": ("unlock {obj}", "unlock the {obj}"),
    "read": ("read {obj}", "read the {obj}"),
}

# Whole-command synonyms for actions without an object.
COMMAND_SYNONYMS: dict[str, tuple[str, ...]] = {
    "look": ("look", "look around", "l"),
    "inventory": ("inventory", "i", "check inventory"),
    "wait": ("wait", "z"),
}

# Verbs that mean "go" in the action text itself ("walk east" is the action "go east").
_GO_ALIASES = ("walk", "head", "move")


def paraphrases(action: str) -> tuple[str, ...]:
    """All wordings of ``action`` known to this module, canonical action first.

    A bare direction ("east") is treated as "go east" (the direction alone is one of
    its wordings). An action whose verb has no paraphrase set has one wording: itself.
    Raises ``ValueError`` on an empty action.
    """
    text = " ".join(action.split())
    if not text:
        raise ValueError("an action must be non-empty text")
    if text in COMMAND_SYNONYMS:
        return COMMAND_SYNONYMS[text]
    if text in DIRECTIONS:
        return _dedupe((text, *_expand("go", text), text))
    verb, _, obj = text.partition(" ")
    if verb in _GO_ALIASES:
        verb = "go"
    if verb not in VERB_TEMPLATES or not obj:
        return (text,)
    wordings = _expand(verb, obj)
    if verb == "go" and obj in DIRECTIONS:
        wordings = (*wordings, obj)  # "east" alone is a standard command
    return _dedupe((text, *wordings))


def _expand(verb: str, obj: str) -> tuple[str, ...]:
    return tuple(template.format(obj=obj) for template in VERB_TEMPLATES[verb])


def _dedupe(wordings: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(wordings))


def surface_variants(action: str) -> tuple[str, ...]:
    """The action, with "the" before its object, capitalised, and with a full stop.

    All of them normalise to the same command under the token plane's parse rule
    (lowercase, articles dropped, trailing punctuation stripped).
    """
    text = " ".join(action.split())
    if not text:
        raise ValueError("an action must be non-empty text")
    verb, _, obj = text.partition(" ")
    takes_article = obj and obj not in DIRECTIONS and obj.split()[0] not in ("the", "a", "an")
    with_article = f"{verb} the {obj}" if takes_article else text
    return _dedupe((text, with_article, text[0].upper() + text[1:], text + "."))


WORDING_STYLES: dict[str, Callable[[str], tuple[str, ...]]] = {
    "synonyms": paraphrases,
    "surface": surface_variants,
}
"""Wording style name -> function from an action to its wordings (canonical first)."""
