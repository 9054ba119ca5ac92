"""Menu labels that are single tokens of the model's tokenizer (docs/design.md §4).

The decision plane reads the logits of the label tokens at the answer position,
so every label must be exactly one token *in the context where it is read*
(``"Answer:" + " " + "A"`` tokenises differently from ``"A"`` alone: leading-space
variants are distinct tokens), and no two labels may share a token id.

A label set is chosen from an ordered candidate pool, written as an alphabet spec:

* ``"A-Z"``, ``"a-z"``, ``"0-9"``: a character range; ranges concatenate
  (``"A-Za-z"``, ``"A-Z0-9"``);
* ``"auto"``: ``"A-Za-z0-9"`` (capitals first, then lower case, then digits);
* ``"yes,no,maybe"``: an explicit comma-separated list (labels may be words);
* or, in Python, an explicit list of label strings.

:meth:`LabelSet.for_tokenizer` keeps, in pool order, every candidate that is a
single token in context and whose token id no earlier kept label uses. That is
the largest valid label set the pool allows (each token id can serve one label),
and it is deterministic. Candidates left out are recorded in
:attr:`LabelSet.rejected`; ``strict=True`` raises instead.

Example::

    >>> labels = LabelSet.for_tokenizer(tokenizer, "A-Z")   # doctest: +SKIP
    >>> labels.labels[:3], labels.ids_for(["A", "B"])      # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlid.menus.tokens import encode_prompt

AUTO_ALPHABET = "A-Za-z0-9"
DEFAULT_CONTEXT = "Answer:"
DEFAULT_PREFIX = " "


class LabelError(ValueError):
    """A label set that does not hold for a tokenizer (names the offending labels)."""


def parse_alphabet(spec: str | Sequence[str]) -> tuple[str, ...]:
    """The ordered candidate labels of an alphabet spec (see the module docstring).

    >>> parse_alphabet("A-C0-1")
    ('A', 'B', 'C', '0', '1')
    >>> parse_alphabet("yes,no")
    ('yes', 'no')
    """
    if not isinstance(spec, str):
        labels = tuple(spec)
        if not all(isinstance(label, str) for label in labels):
            raise TypeError(f"explicit labels must be strings, got {labels!r}")
    elif spec == "auto":
        labels = parse_alphabet(AUTO_ALPHABET)
    elif "," in spec:
        labels = tuple(part.strip() for part in spec.split(","))
    else:
        labels = _parse_ranges(spec)
    if not labels:
        raise ValueError(f"alphabet spec {spec!r} gives no labels")
    bad = [label for label in labels if not label or label != label.strip()]
    if bad:
        raise ValueError(
            f"labels must be non-empty and carry no surrounding whitespace "
            f"(the prefix adds the space), got {bad!r} from {spec!r}"
        )
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"alphabet spec {spec!r} repeats labels {duplicates}")
    return labels


def _parse_ranges(spec: str) -> tuple[str, ...]:
    usage = (
        "write ranges like 'A-Z', 'a-z', '0-9' (concatenated: 'A-Za-z'), 'auto', "
        "or a comma-separated list like 'yes,no'"
    )
    if len(spec) == 0 or len(spec) % 3 != 0:
        raise ValueError(f"cannot parse alphabet spec {spec!r}: {usage}")
    labels: list[str] = []
    for start in range(0, len(spec), 3):
        first, dash, last = spec[start], spec[start + 1], spec[start + 2]
        same_class = any(
            first in group and last in group
            for group in ("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz", "0123456789")
        )
        if dash != "-" or not same_class or first > last:
            raise ValueError(
                f"cannot parse alphabet spec {spec!r} at {spec[start : start + 3]!r}: {usage}"
            )
        labels.extend(chr(code) for code in range(ord(first), ord(last) + 1))
    return tuple(labels)


def label_token(tokenizer: Any, label: str, context: str, prefix: str) -> tuple[int | None, str]:
    """``(token_id, problem)``: the label's single token id in context, or ``None``
    and why not. The label is valid iff
    ``encode(context + prefix + label) == encode(context) + [one token]``, both encoded
    as prompts (``rlid.menus.tokens.encode_prompt``: with the tokenizer's BOS), so the id is
    the token the model reads after the context in the text.
    """
    context_ids = encode_prompt(tokenizer, context)
    full_ids = encode_prompt(tokenizer, context + prefix + label)
    if full_ids[: len(context_ids)] != context_ids:
        return None, f"merges with the end of {context!r} (tokens {full_ids[-4:]})"
    tail = full_ids[len(context_ids) :]
    if len(tail) != 1:
        return None, f"is {len(tail)} tokens {tail}"
    return tail[0], ""


@dataclass(frozen=True)
class LabelSet:
    """Ordered labels, each one token of a tokenizer in a fixed reading context.

    A menu of ``n`` rows uses ``labels[:n]``; ``token_ids[i]`` is the id whose
    logit at the answer position scores ``labels[i]``.
    """

    labels: tuple[str, ...]
    """The label strings, in the order menus use them (``"A"``, ``"B"``, ...)."""
    token_ids: tuple[int, ...]
    """The single token id of each label, read as ``context + prefix + label``."""
    context: str = DEFAULT_CONTEXT
    """The text the prompt ends with, right before the label token (see ``rlid.menus.prompt``)."""
    prefix: str = DEFAULT_PREFIX
    """Text between the context and the label (``" "`` in the plain template, ``""`` in chat)."""
    rejected: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    """Candidates ``for_tokenizer`` left out, as ``(label, reason)``; informational."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "token_ids", tuple(int(i) for i in self.token_ids))
        object.__setattr__(self, "rejected", tuple(tuple(r) for r in self.rejected))
        if not self.labels:
            raise LabelError("a label set needs at least one label")
        if len(set(self.labels)) != len(self.labels):
            raise LabelError(f"labels must be distinct, got {self.labels}")
        if len(self.token_ids) != len(self.labels):
            raise LabelError(
                f"{len(self.labels)} labels but {len(self.token_ids)} token ids; "
                "build label sets with LabelSet.for_tokenizer"
            )
        collisions = _collisions(self.labels, self.token_ids)
        if collisions:
            raise LabelError(f"labels share token ids: {_describe_collisions(collisions)}")

    def __len__(self) -> int:
        return len(self.labels)

    @classmethod
    def for_tokenizer(
        cls,
        tokenizer: Any,
        candidates: str | Sequence[str] = "auto",
        *,
        context: str = DEFAULT_CONTEXT,
        prefix: str = DEFAULT_PREFIX,
        strict: bool = False,
    ) -> LabelSet:
        """The largest valid label set from ``candidates`` (pool order kept).

        Args:
            tokenizer: any Hugging Face tokenizer (or raw ``tokenizers.Tokenizer``).
            candidates: an alphabet spec or explicit labels (module docstring).
            context: text right before the label; use ``rlid.menus.prompt.label_context``
                so it matches the renderer.
            prefix: text between context and label.
            strict: raise :class:`LabelError` if any candidate is invalid, instead of
                leaving it out (and recording it in ``rejected``).
        """
        pool = parse_alphabet(candidates)
        kept: list[str] = []
        kept_ids: list[int] = []
        owner: dict[int, str] = {}
        rejected: list[tuple[str, str]] = []
        for label in pool:
            token_id, problem = label_token(tokenizer, label, context, prefix)
            if token_id is None:
                rejected.append((label, problem))
            elif token_id in owner:
                rejected.append((label, f"collides with {owner[token_id]!r} (token {token_id})"))
            else:
                owner[token_id] = label
                kept.append(label)
                kept_ids.append(token_id)
        if rejected and (strict or not kept):
            raise LabelError(
                f"candidate labels {candidates!r} are not all single distinct tokens after "
                f"{context + prefix!r}: "
                + "; ".join(f"{label!r} {why}" for label, why in rejected)
                + (
                    ""
                    if kept
                    else ". No valid label is left: try other candidates (e.g. 'A-Z', 'a-z', "
                    "'0-9') or another prefix"
                )
            )
        return cls(tuple(kept), tuple(kept_ids), context, prefix, tuple(rejected))

    def validate(self, tokenizer: Any) -> None:
        """Raise :class:`LabelError` unless every label is one token of ``tokenizer``
        in context, the ids are pairwise distinct, and they equal ``token_ids``."""
        problems: list[str] = []
        found: list[int | None] = []
        for label in self.labels:
            token_id, problem = label_token(tokenizer, label, self.context, self.prefix)
            found.append(token_id)
            if token_id is None:
                problems.append(f"{label!r} {problem}")
        pairs = _collisions(self.labels, found)
        if pairs:
            problems.append(f"colliding labels {_describe_collisions(pairs)}")
        if not problems and tuple(found) != self.token_ids:
            changed = [
                f"{label!r}: {old} -> {new}"
                for label, old, new in zip(self.labels, self.token_ids, found)
                if old != new
            ]
            problems.append(
                "token ids differ from the stored ones (another tokenizer?): " + ", ".join(changed)
            )
        if problems:
            raise LabelError(
                f"label set invalid for this tokenizer in context {self.context + self.prefix!r}: "
                + "; ".join(problems)
            )

    def ids_for(self, labels: Sequence[str]) -> tuple[int, ...]:
        """Token ids of ``labels`` (e.g. ``menu.labels``), in that order."""
        index = {label: i for i, label in enumerate(self.labels)}
        missing = [label for label in labels if label not in index]
        if missing:
            raise KeyError(f"labels {missing} are not in this label set {self.labels}")
        return tuple(self.token_ids[index[label]] for label in labels)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; token ids are kept to be checked on load."""
        return {
            "labels": list(self.labels),
            "context": self.context,
            "prefix": self.prefix,
            "token_ids": list(self.token_ids),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], tokenizer: Any) -> LabelSet:
        """Rebuild from :meth:`to_dict`, recomputing the token ids with ``tokenizer``.

        Raises :class:`LabelError` if a label is no longer a single distinct token,
        or if stored token ids differ from the recomputed ones.
        """
        rebuilt = cls.for_tokenizer(
            tokenizer,
            list(data["labels"]),
            context=data.get("context", DEFAULT_CONTEXT),
            prefix=data.get("prefix", DEFAULT_PREFIX),
            strict=True,
        )
        stored = data.get("token_ids")
        if stored is not None:
            cls(rebuilt.labels, tuple(stored), rebuilt.context, rebuilt.prefix).validate(tokenizer)
        return rebuilt


def _collisions(labels: Sequence[str], ids: Sequence[int | None]) -> list[tuple[str, ...]]:
    groups: dict[int, list[str]] = {}
    for label, token_id in zip(labels, ids):
        if token_id is not None:
            groups.setdefault(token_id, []).append(label)
    return [tuple(group) for group in groups.values() if len(group) > 1]


def _describe_collisions(groups: list[tuple[str, ...]]) -> str:
    return ", ".join(" = ".join(repr(label) for label in group) for group in groups)
