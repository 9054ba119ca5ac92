"""A model folder is untrusted input: what rlid checks before (and right after) loading one.

Loading a Hugging Face folder can run code in two ways: a ``config.json`` or
``tokenizer_config.json`` whose ``auto_map`` names Python files shipped in the folder
(transformers runs them when asked to trust remote code, and on a terminal asks
whether to), and pickle weight files (``pytorch_model.bin``, ``*.pt``), which run code
when unpickled. rlid loads with ``trust_remote_code=False`` and safetensors weights
only, and refuses such folders up front with one line each, naming the field or file,
instead of a prompt or a transformers message that recommends an unsafe switch.
The other checks turn a malformed folder into one line: ``config.json`` that is not a
JSON object, no tokenizer files, non-finite weights.

>>> check_model_folder(Path("checkpoint/model"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from rlid.runs.dir import read_json
from rlid.runs.files import refuse_link
from rlid.runs.integrity import verify_files

CUSTOM_CODE_FIELDS = ("auto_map",)
"""Config fields through which a folder asks transformers to import its own Python code."""
CONFIG_FILES = ("config.json", "tokenizer_config.json", "adapter_config.json")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")
"""Any one of them (or another ``*.model`` / ``vocab*`` file) lets a tokenizer be built,
with ``tokenizer_config.json`` beside it."""


class UntrustedModelError(ValueError):
    """A model folder rlid will not load (custom code, pickle weights, malformed)."""


def read_config(path: Path) -> dict[str, Any]:
    """A JSON object file of a model folder; anything else is one line naming it."""
    try:
        data = json.loads(Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise UntrustedModelError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise UntrustedModelError(
            f"{path} holds a JSON {type(data).__name__}, not the object (mapping of fields) "
            "a model config is"
        )
    return data


CLOSED_RECORDS = (
    ("interface.json", "the exported agent"),
    ("manifest.json", "the start"),
    ("pretrain.json", "the warm start"),
)
"""Records by which rlid lists every file of a folder it wrote (an exported agent, the
shipped start, a warm start built by ``rlid pretrain``) with its sha256, the first one
present (with a ``files`` table) deciding. Such a folder is a closed set."""


def check_closed_set(path: Path) -> bool:
    """A folder rlid wrote and listed (:data:`CLOSED_RECORDS`) holds exactly the files
    its record lists, each with its sha256; else one line naming the file (an unlisted
    adapter, chat template or config would change what loads). Returns whether a record
    was found (False: a folder of an earlier version, or of another tool)."""
    path = Path(path)
    present = tuple(name for name, _ in CLOSED_RECORDS if (path / name).exists())
    for name, what in CLOSED_RECORDS:
        record = path / name
        if name not in present:
            continue
        refuse_link(record)
        if not record.is_file():
            raise UntrustedModelError(f"{record} is not a regular file")
        try:
            data = read_json(record, sealed=name == "interface.json")
        except ValueError as err:
            raise UntrustedModelError(str(err)) from None
        if not isinstance(data, dict) or "files" not in data:
            continue
        # every other file, another record included, must be listed
        verify_files(path, data["files"], record=record, closed=True, skip=(name,), what=what)
        return True
    return False


def check_model_folder(path: Path, *, adapters: bool = False) -> None:
    """Refuse a folder whose loading would run its code or read pickles, or that cannot
    load (see the module docstring); a folder rlid listed must hold exactly its listed
    files (:func:`check_closed_set`). ``adapters``: a LoRA adapter folder (weights
    ``adapter_model.safetensors``, no tokenizer needed)."""
    path = Path(path)
    check_closed_set(path)
    for name in CONFIG_FILES:
        if not (path / name).is_file():
            continue
        config = read_config(path / name)
        for field in CUSTOM_CODE_FIELDS:
            if config.get(field):
                raise UntrustedModelError(
                    f"{path / name} asks for custom code ({field!r}: Python files shipped "
                    "with the model); rlid never runs code from a model folder: use a model "
                    "of an architecture transformers has built in, or remove the field if "
                    "the built-in class is meant"
                )
    for entry in sorted(path.iterdir()):
        named = entry.name in (*CONFIG_FILES, *TOKENIZER_FILES) or entry.suffix == ".safetensors"
        if named and entry.exists() and not entry.is_file():
            kind = "a directory" if entry.is_dir() else "not a regular file (a FIFO or device)"
            raise UntrustedModelError(
                f"{entry} is {kind}; a model folder holds its weights, config and tokenizer "
                "as files"
            )
    files = sorted(p.name for p in path.iterdir() if p.is_file())
    if not any(name.endswith(".safetensors") for name in files):
        pickles = [name for name in files if name.endswith(PICKLE_SUFFIXES)]
        if pickles:
            raise UntrustedModelError(
                f"{path} holds its weights only as {', '.join(pickles[:3])} (pickle, which "
                "can run code when loaded); rlid loads safetensors weights only: where you "
                "trust the source, save the model with save_pretrained(DIR, "
                "safe_serialization=True) and pass DIR"
            )
        raise UntrustedModelError(f"{path} holds no weights (*.safetensors)")
    if "tokenizer.json" in files:
        check_tokenizer_file(path / "tokenizer.json")
    vocabulary = [
        n for n in files if n in TOKENIZER_FILES or n.endswith(".model") or n.startswith("vocab")
    ]
    if not adapters and not vocabulary:
        raise UntrustedModelError(
            f"{path} has no tokenizer files (one of {', '.join(TOKENIZER_FILES)}): copy "
            "them from where the model came from"
        )


def check_tokenizer_file(path: Path) -> None:
    """A ``tokenizer.json`` has the shape the tokenizers library reads (an object whose
    ``model`` is a table, ``added_tokens`` a list of tables), else one line naming the
    file and field (the library's own error was "added_tokens")."""
    data = read_config(path)

    def bad(what: str) -> UntrustedModelError:
        return UntrustedModelError(f"{path} is not a tokenizer file ({what})")

    if not isinstance(data.get("model"), dict):
        raise bad("its 'model' must be a table")
    added = data.get("added_tokens", [])
    if not isinstance(added, list) or not all(isinstance(t, dict) for t in added):
        raise bad("its 'added_tokens' must be a list of tables")
    for name in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        if data.get(name) is not None and not isinstance(data[name], dict):
            raise bad(f"its {name!r} must be a table or null")


def check_finite_weights(model: Any, where: Path | str) -> None:
    """Refuse a loaded model with a NaN or infinite weight (it would train or play on
    NaN probabilities), naming the folder and the first such tensor."""

    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise UntrustedModelError(
                    f"the weights in {where} are not finite ({name} holds NaN or infinite "
                    "values): restore them from a copy, or start from another model"
                )


def first_line(err: BaseException) -> str:
    """The first non-empty line of an error's message (transformers' run to several)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
