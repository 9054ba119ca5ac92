"""What a run produces: evaluate it, export it as an agent directory, load it back.

* :func:`evaluate_run` plays a run's last checkpoint (``rlid eval --run``);
  :func:`evaluate_model` plays a model as it is, before any training, exactly as a run's
  "before" row does (``rlid eval --model``). Both take an :class:`EvalRequest`.
* ``rlid export RUN OUT [--merge-lora]`` (:func:`export_run`) writes::

    OUT/config.json, model.safetensors, tokenizer files   (save_pretrained; a LoRA run
                                                           without --merge-lora: the adapters)
    OUT/interface.json    everything to rebuild the exact prompt and label set
    OUT/README.md         a model card: env, plane, algorithm, budget, held-out results

  ``load_agent(OUT)`` (or ``load_policy(OUT)`` for the batched policy) rebuilds the
  policy from those files alone: the same prompt, labels and weights, so greedy play
  reproduces the run's held-out evaluation exactly.

A LoRA run exported without ``--merge-lora`` keeps its adapters; ``interface.json``
and ``adapter_config.json`` record the base model (``base_model_name_or_path``), which
must then exist where it was. ``--merge-lora`` folds the adapters into the weights
(a plain model directory; logits then match the unmerged model to float rounding).
The acting policy of a run's plane comes from the plane registry (:mod:`rlid.config.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from transformers import AutoTokenizer

from rlid import envs as envs_pkg
from rlid.agents.card import model_card
from rlid.config import TrainConfig
from rlid.config.limits import check_field, check_machine_limits
from rlid.config.registry import get_plane
from rlid.core.evaluate import evaluate, follow_walkthroughs, write_episodes
from rlid.core.protocols import MenuPolicy
from rlid.core.rollout import Episode
from rlid.lm.hardware import Precision
from rlid.lm.lora import attach_adapters
from rlid.lm.model_folder import check_closed_set
from rlid.lm.models import own_memory
from rlid.lm.starts import base_model_path, load_dtype, load_policy_model, load_run_model
from rlid.menus import make_memory
from rlid.runs import dir as rundir
from rlid.runs.files import refuse_link, staged_dir, write_errors_as_os_errors
from rlid.runs.history import checkpointed_rows
from rlid.runs.integrity import FILES, file_digests
from rlid.runs.log import RunLog, check_checkpoint, read_run_config
from rlid.runs.outdir import claim_output_dir

FORMAT = "rlid-agent"
FORMAT_VERSION = 1
INTERFACE = "interface.json"


@dataclass(frozen=True)
class EvalRequest:
    """What to evaluate on, checked before any model loads.

    Attributes:
        env, env_options: the env to play (None: the run's or config's own env and
            options); options given here are added to the env's.
        split: ``"heldout"`` or ``"train"`` games.
        episodes: episodes to play (``walkthrough``: games to walk).
        greedy: play the most likely action (False: sample at temperature 1).
        seed: the evaluation's randomness stream.
        walkthrough: follow each game's walkthrough instead of playing
            (:func:`rlid.core.evaluate.follow_walkthroughs`).
        episodes_out: also write every episode played to this new JSON-lines file.
        progress: show the episodes' progress on stderr while they play.
    """

    env: str | None = None
    env_options: dict[str, Any] | None = None
    split: str = "heldout"
    episodes: int = 32
    greedy: bool = True
    seed: int = 0
    walkthrough: bool = False
    episodes_out: Path | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {self.episodes}")
        check_field("eval", "episodes", self.episodes)
        split = (self.env_options or {}).get("split")
        if split is not None and split != self.split:
            raise ValueError(
                f"-o split={str(split)[:40]} would do nothing: --split {self.split} picks the "
                "games an evaluation plays; give --split instead"
            )
        check_field("eval", "seed", self.seed)
        path = self.episodes_out
        if path is not None:
            if self.walkthrough:
                raise ValueError(
                    "--episodes-out writes the episodes played; --walkthrough plays none (it "
                    "walks each game's walkthrough): drop one of them"
                )
            if path.exists():
                raise FileExistsError(
                    f"--episodes-out {path} exists; give a new file (nothing is overwritten)"
                )
            if not path.parent.is_dir():
                raise FileNotFoundError(f"--episodes-out {path}: no directory {path.parent}")
        if self.walkthrough and not self.greedy:
            raise ValueError(
                "--walkthrough follows each game's walkthrough and reads the policy's greedy "
                "choice and its probabilities at every state; it samples nothing: drop --sample"
            )

    def check_plane(self, config: TrainConfig) -> None:
        """A walk reads a menu policy's greedy row and probabilities."""
        if self.walkthrough and get_plane(config.plane).generates_text:
            raise ValueError(
                "--walkthrough reads a policy's distribution over the menu of legal actions: "
                "the decision or scoring plane, not the token plane (free text)"
            )


def evaluate_run(run: Path, request: EvalRequest = EvalRequest()) -> dict[str, Any]:
    """Load ``run``'s last checkpoint and play the request's episodes (or walk its games'
    walkthroughs); read-only: no lock, so a running training can be evaluated alongside."""
    config, _ = read_run_config(Path(run))
    request.check_plane(config)
    ckpt = Path(run) / rundir.CHECKPOINT
    if not (ckpt / "state.json").exists():
        raise FileNotFoundError(f"{run} has no checkpoint yet; nothing to evaluate")
    check_checkpoint(ckpt, config, action="evaluate")
    log = RunLog(Path(run), config, resuming=True)
    _set_threads(config)
    model, tokenizer = load_run_model(config, log)
    stats = _play(config, model, tokenizer, request)
    state = rundir.read_json(log.path / rundir.CHECKPOINT / "state.json")
    return {"env": stats.pop("env"), "split": request.split, "iteration": state["iteration"],
            **stats}  # fmt: skip


def evaluate_model(config: TrainConfig, request: EvalRequest = EvalRequest()) -> dict[str, Any]:
    """Play ``config.model`` as it is (no run, no training).

    The same evaluation as a run's "before" row: the config's plane, interface,
    device and precision, the trainer's held-out resets. With ``config`` equal to a
    run's, ``success`` etc. equal that run's ``eval.json["before"]`` (tested).
    """
    request.check_plane(config)
    _set_threads(config)
    loaded, tokenizer = load_policy_model(str(config.model), dtype=load_dtype(config))
    model = own_memory(loaded)  # as a run loads it (the same last bits)
    stats = _play(config, model, tokenizer, request)
    origin = getattr(model, "rlid_origin", "local")
    return {"env": stats.pop("env"), "split": request.split, "model": str(config.model),
            "origin": origin, **stats}  # fmt: skip


def _set_threads(config: TrainConfig) -> None:
    check_machine_limits(config)  # e.g. a run recorded with more threads than cores here
    if config.threads is not None:  # unset: torch's default (OMP_NUM_THREADS)
        torch.set_num_threads(config.threads)


def _play(config: TrainConfig, model: Any, tokenizer: Any, request: EvalRequest) -> dict[str, Any]:
    """``model`` on the config's device and precision, as the config's plane, on the
    request's games (default: the config's env and options)."""
    precision = Precision.from_config(config)
    model = precision.place(model)
    model.eval()
    policy = get_plane(config.plane).make_policy(
        config, model, tokenizer, autocast=precision.autocast
    )
    env_id = request.env or config.env
    options = dict(config.env_options) if request.env is None else {}
    options.update(request.env_options or {})
    options["split"] = request.split
    episodes = request.episodes
    env_list = [envs_pkg.make(env_id, **options) for _ in range(min(episodes, 16))]
    interface, seed = config.interface, request.seed
    with torch.no_grad():
        if request.walkthrough:
            menu_policy = cast("MenuPolicy", policy)  # not the token plane: checked first
            stats = follow_walkthroughs(
                menu_policy, env_list, episodes, interface=interface, seed=seed
            )
        else:
            played: list[Episode] = []
            stats = evaluate(
                policy, env_list, episodes, interface=interface, seed=seed,
                greedy=request.greedy, keep=played,
                progress=f"{request.split} eval" if request.progress else None,
            )  # fmt: skip
            if request.episodes_out is not None:
                write_episodes(request.episodes_out, played, tokenizer)
    return {"env": env_id, **stats}


# --------------------------------------------------------------------------- export
def export_run(run: Path, out: Path, *, merge_lora: bool = False) -> Path:
    """Write the agent of ``run``'s last checkpoint to the new directory ``out``."""
    # the rule every writing command follows: a link named OUT is followed to its target
    run = Path(run)
    out = claim_output_dir(
        Path(out), flag="OUT", is_own=lambda _: False, ignore=(), create_target=True
    )
    # Read-only, as `rlid eval`: no lock, so a running training can be exported alongside.
    config, _ = read_run_config(run)
    ckpt = run / rundir.CHECKPOINT
    if not (ckpt / "state.json").exists():
        raise FileNotFoundError(f"{run} has no checkpoint yet; nothing to export")
    check_checkpoint(ckpt, config, action="export")
    log = RunLog(run, config, resuming=True)
    lora = config.lora_rank > 0
    if merge_lora and not lora:
        raise ValueError(f"--merge-lora: {run} was trained without LoRA (lora_rank = 0)")
    model, tokenizer = load_run_model(config, log)
    base = base_model_path(config) if lora else None
    if lora and merge_lora:
        model = model.merge_and_unload()
    elif lora:
        model.peft_config["default"].base_model_name_or_path = base
    policy = get_plane(config.plane).make_policy(config, model, tokenizer)
    labels = getattr(policy, "labels", None)

    # a full disk names the export directory (not a bare "No space left on device")
    with write_errors_as_os_errors(out), staged_dir(out) as tmp:  # an empty `out` is replaced
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        interface = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "plane": config.plane,
            "env": config.env,
            "env_options": dict(config.env_options),
            "interface": config.interface.to_dict(),
            "labels": list(labels.labels) if labels is not None else None,
            "label_token_ids": list(labels.token_ids) if labels is not None else None,
            "padding_side": tokenizer.padding_side,
            "lora": None
            if not lora
            else {"merged": merge_lora, "base_model_name_or_path": None if merge_lora else base},
            "train_config": config.to_dict(),
        }
        evals = (
            rundir.read_json(run / "eval.json", sealed=True) if (run / "eval.json").exists() else {}
        )
        rundir.atomic_write_text(
            tmp / "README.md", model_card(config, evals, checkpointed_rows(run, ckpt), interface)
        )
        # a closed set: every other file with its sha256, checked (and nothing else
        # accepted) wherever the agent is loaded (rlid.lm.model_folder.check_closed_set)
        interface[FILES] = file_digests(tmp, skip=(INTERFACE,))
        rundir.write_json(tmp / INTERFACE, interface, sealed=True)
    return out


# ------------------------------------------------------------------------- loading
# ------------------------------------------------------------------------- loading
def read_interface(path: Path) -> dict[str, Any]:
    """An exported agent's ``interface.json``, checked: its own sha256, and every file of
    the agent against the digests it lists, no other file accepted (an agent exported
    by an earlier version lists none)."""
    path = Path(path)
    file = path / INTERFACE
    refuse_link(file)
    if not file.is_file():
        raise FileNotFoundError(
            f"{path} is not an exported rlid agent (no interface.json); write one with "
            "`rlid export RUN OUT`"
        )
    data = rundir.read_json(file, sealed=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(
        data.get("format_version", 0), int
    ) or data.get("format_version", 0) > FORMAT_VERSION:  # fmt: skip
        raise ValueError(f"{file} is not an rlid agent of format version <= {FORMAT_VERSION}")
    check_closed_set(path)
    return data


def load_exported_model(path: Path, *, dtype: torch.dtype = torch.float32) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, config)`` of an exported agent directory."""
    path = Path(path)
    data = read_interface(path)
    config = TrainConfig.from_record(data["train_config"])
    lora = data.get("lora")
    model: Any
    if lora and not lora["merged"]:
        model, _ = load_policy_model(lora["base_model_name_or_path"], dtype=dtype)
        model = attach_adapters(model, path)
        tokenizer = _tokenizer(path)
    else:
        model, tokenizer = load_policy_model(str(path), dtype=dtype)
    model.eval()
    return model, tokenizer, config


def _tokenizer(path: Path) -> Any:
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(path: Path, **kw: Any) -> Any:
    """The run's batched menu policy (``DecisionPolicy`` for the decision plane)."""
    model, tokenizer, config = load_exported_model(path)
    policy = get_plane(config.plane).make_policy(config, model, tokenizer, **kw)
    data = read_interface(path)
    labels = getattr(policy, "labels", None)
    if labels is not None and data["labels"] is not None and list(labels.labels) != data["labels"]:
        raise ValueError(
            f"{path}: the tokenizer now yields labels {list(labels.labels)} but the agent was "
            f"trained with {data['labels']}"
        )
    return policy


class Agent:
    """One env, one action at a time: memory kept, greedy by default.

    >>> agent = load_agent("OUT")                       # doctest: +SKIP
    >>> obs, info = env.reset(seed=0); agent.reset()    # doctest: +SKIP
    >>> action = agent.act(obs, info)                   # doctest: +SKIP
    """

    def __init__(self, policy: Any, interface: Any, *, seed: int = 0) -> None:
        self.policy = policy
        self.interface = interface
        self.memory = make_memory(interface.memory, interface.memory_size)
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(seed)
        self._last: str | None = None

    def reset(self) -> None:
        self.memory.reset()
        self._last = None

    def act(self, obs: str, info: dict[str, Any], *, greedy: bool = True) -> str:
        """The command to send for this observation (call on every step after ``reset``).

        The memory is updated with what the previous action led to (``obs``, ``info``)
        before the prompt is rendered, as in training rollouts.
        """
        if self._last is None:  # an episode's first observation, as in a rollout
            self.memory.reset(obs, info)
        else:
            self.memory.update(obs, self._last, info)
        (decision,) = self.policy.act(
            [obs], [info], [self.memory.render() or None],
            rng=self.rng, generator=self.generator, greedy=greedy,
        )  # fmt: skip
        self._last = decision.action
        return decision.action


def load_agent(path: str | Path, *, seed: int = 0) -> Agent:
    """A single-env :class:`Agent` from an exported directory."""
    policy = load_policy(Path(path))
    return Agent(policy, policy.interface, seed=seed)
