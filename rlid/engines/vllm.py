"""vLLM as rlid's inference engine: decision readouts, action scoring, generation, weight sync.

One :class:`VLLMEngine` serves the three planes from one ``vllm.LLM`` built with
``logprobs_mode="processed_logprobs"``:

* **decision readout** (:meth:`VLLMEngine.readout`): one prefill per prompt
  (``max_tokens=1``) asking for the log-probabilities of exactly the menu's label ids
  (``logprob_token_ids``) at temperature 1, i.e. ``log_softmax(logits)[labels]`` over the
  full vocabulary. rlid renormalises them over the labels in float32:
  ``log π_T(a|s) = log_softmax(lp[labels] / T)``, the same event as
  :func:`rlid.lm.readout.readout_from_ids` (``lp`` and the logits differ by a constant, so
  dividing either by T gives one distribution), and ``label_mass = Σ exp(lp[labels])``
  (the leakage is its complement). Asking vLLM for ``allowed_token_ids`` instead would
  return the distribution already normalised but lose the label mass, and tie the
  temperature to the engine; the token sampled by the request is never used (rows are
  drawn by the caller with the run's generator, as on the torch path).
* **scoring** (:meth:`VLLMEngine.score`): ``prompt_logprobs`` of each
  ``prompt + completion`` sequence; the completion's tokens' log-probs are read at
  temperature 1 (vLLM's prompt log-probs never see sampling parameters), as
  :func:`rlid.baselines.engine.completion_logprobs` computes them. vLLM skips the prefix
  cache for such requests by default (it scores only the tokens it computes); rlid
  runs the prompts first, then lets the K completions of a prompt read its cached
  blocks, and runs again without the cache any sequence whose hit reached past its
  prompt (a hit covering completion tokens would leave them unscored).
* **generation** (:meth:`VLLMEngine.generate`, the ``rlid.baselines.engine.RolloutEngine``
  protocol): sampling at temperature T with no top-k / top-p, each sampled token's
  log-prob from the processed distribution ``log_softmax(logits / T)`` (the behaviour
  distribution, what TIS / IcePop compare with π_old). Greedy decoding reports
  temperature-1 log-probs, so it is refused at T ≠ 1.
* **weight sync** (:meth:`VLLMEngine.sync_weights`): full weights (LoRA merged out of
  place, :mod:`rlid.engines.weights`) through a safetensors file that the worker
  extension (:mod:`rlid.engines.vllm_worker`) reloads, then ``reset_prefix_cache()``;
  with a :class:`~rlid.engines.probe.Probe`, the probe check follows.

The engine starts vLLM's engine core in a **spawned** process (the CPU build always
spawns; a CUDA build does once CUDA is initialised), which re-imports the calling
script: a script that builds an engine must do it under ``if __name__ == "__main__":``
(``rlid``'s own commands and pytest already are). ``vllm`` is imported when an engine is
built, never at module import, so this module costs nothing without it.

Example (a script)::

    from rlid.engines import VLLMEngine, VLLMOptions

    if __name__ == "__main__":
        engine = VLLMEngine("path/to/model", VLLMOptions(max_model_len=512))
        result = engine.readout([prompt_ids], [label_ids])   # result.logp: (1, K)
        engine.close()
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlid.engines.probe import Probe, compare_probe, trainer_probe_logp
from rlid.engines.vllm_options import (
    MAX_LABELS,
    TORCH_DTYPES,
    EngineUnavailable,
    SyncReport,
    VLLMOptions,
    import_vllm,
)
from rlid.engines.weights import base_model, engine_state_dict, write_safetensors
from rlid.lm.readout import ReadoutResult, pad_label_ids

__all__ = ["EngineUnavailable", "SyncReport", "VLLMEngine", "VLLMOptions"]


def _on_cpu_build() -> bool:
    """Whether vLLM runs on its CPU platform here."""
    # optional dependency: vllm (the vllm extra)
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMEngine:
    """A vLLM engine serving a local Hugging Face model directory (see the module docstring).

    Args:
        model_dir: a directory ``save_pretrained`` wrote (config and weights); vLLM
            supports the architecture (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ...).
        options: :class:`VLLMOptions`.

    Raises:
        EngineUnavailable: ``vllm`` is not installed (the message names the extra).
    """

    name = "vllm"
    same_as_trainer = False
    """The trainer re-scores π_old itself (TIS / IcePop see the engine's μ)."""

    def __init__(self, model_dir: str | os.PathLike[str], options: VLLMOptions | None = None):
        vllm = import_vllm()
        self.options = options or VLLMOptions()
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise ValueError(f"{str(self.model_dir)!r} is not a model directory (no config.json)")
        self._sampling_params = vllm.SamplingParams
        # without a tokenizer vLLM's renderer warns (with a traceback) that it has none
        logging.getLogger("vllm.renderers.base").setLevel(logging.ERROR)
        try:
            cpu = _on_cpu_build()
            self._llm = vllm.LLM(model=str(self.model_dir), **self.options.llm_kwargs(cpu=cpu))
        except Exception as err:
            raise RuntimeError(
                f"the vLLM engine did not start: {err}. (vLLM starts its engine in a spawned "
                "process, which re-imports the calling script: a script that builds the "
                'engine at its top level must do so under `if __name__ == "__main__":`)'
            ) from err
        self.vocab_size = int(self._llm.llm_engine.model_config.get_vocab_size())
        shm = Path("/dev/shm")
        self._sync_dir = Path(
            tempfile.mkdtemp(prefix="rlid-vllm-sync-", dir=shm if shm.is_dir() else None)
        )
        self._cleanups = [weakref.finalize(self, shutil.rmtree, self._sync_dir, True)]

    @classmethod
    def from_model(
        cls,
        model: torch.nn.Module,
        tokenizer: Any,
        options: VLLMOptions | None = None,
        *,
        directory: str | os.PathLike[str] | None = None,
    ) -> VLLMEngine:
        """An engine serving the torch ``model`` as it is now (LoRA merged), written first
        to ``directory`` (default: a temporary directory removed with the engine)."""
        options = options or VLLMOptions()
        owned = directory is None
        target = Path(directory or tempfile.mkdtemp(prefix="rlid-vllm-model-"))
        target.mkdir(parents=True, exist_ok=True)
        try:
            base_model(model).config.save_pretrained(target)
            tokenizer.save_pretrained(target)
            state = engine_state_dict(model, TORCH_DTYPES[options.dtype])
            write_safetensors(state, target / "model.safetensors")
            engine = cls(target, options)
        except BaseException:
            if owned:
                shutil.rmtree(target, ignore_errors=True)
            raise
        if owned:
            engine._cleanups.append(weakref.finalize(engine, shutil.rmtree, target, True))
        return engine

    # ------------------------------------------------------------------ decision plane
    def readout(
        self,
        prompt_ids: Sequence[Sequence[int]],
        label_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> ReadoutResult:
        """Label log-probs of each prompt's menu, as :func:`rlid.lm.readout.readout_from_ids`.

        Returns ``logp`` (B, K_max) float32 at ``temperature`` (``-inf`` past row b's
        K_b labels), ``label_mass`` (B,) at temperature 1, ``hidden=None`` (the engine
        has no value head) and ``num_tokens``, the prompt tokens sent.
        """
        if len(prompt_ids) != len(label_ids):
            raise ValueError(f"{len(prompt_ids)} prompts but {len(label_ids)} rows of labels")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        label_pad, label_valid = pad_label_ids(label_ids, self.vocab_size)  # checks the ids
        if label_pad.shape[1] > MAX_LABELS:
            raise ValueError(
                f"a menu of {label_pad.shape[1]} labels; the engine reads <= {MAX_LABELS}"
            )
        self._check_lengths(prompt_ids, 1)
        params = [
            self._sampling_params(
                max_tokens=1,
                temperature=1.0,
                logprob_token_ids=[int(i) for i in row],
                detokenize=False,
            )  # fmt: skip
            for row in label_ids
        ]
        outputs = self._run(prompt_ids, params)
        full = torch.full(label_pad.shape, float("-inf"))  # (B, K) log p over the vocabulary
        for b, (out, row) in enumerate(zip(outputs, label_ids)):
            step = out.outputs[0].logprobs[0]  # {token id: Logprob}, the labels + the sampled
            full[b, : len(row)] = torch.tensor([step[int(i)].logprob for i in row])
        logp = torch.log_softmax(full / temperature, dim=-1)  # (B, K) over the labels
        label_mass = torch.logsumexp(full, dim=-1).exp()  # (B,)
        return ReadoutResult(
            logp=logp, label_mass=label_mass, hidden=None, num_tokens=sum(map(len, prompt_ids))
        )

    # ------------------------------------------------------------------- scoring plane
    def score(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[Sequence[int]]],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of each completion's tokens after its prompt (temperature 1).

        ``completion_ids[b]`` are prompt b's completions. Returns ``logp`` (N, C) and
        ``mask`` (N, C) for the N completions in order, **left-aligned** (token j in
        column j), as :func:`rlid.baselines.engine.shared_prompt_logprobs`; 0 where masked.
        """
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(
                f"{len(prompt_ids)} prompts but {len(completion_ids)} completion lists"
            )
        rows = [(b, list(c)) for b, comps in enumerate(completion_ids) for c in comps]
        if not rows or any(not c for _, c in rows) or any(not p for p in prompt_ids):
            raise ValueError("every prompt and every completion needs at least one token")
        sequences = [list(prompt_ids[b]) + c for b, c in rows]
        self._check_lengths(sequences, 1)
        starts = [len(prompt_ids[b]) for b, _ in rows]  # position of each completion
        shared = self.options.prefix_caching
        if shared:  # the prompts once, so that their K completions find them cached
            self._run(
                prompt_ids,
                [self._sampling_params(max_tokens=1, detokenize=False)] * len(prompt_ids),
            )
        outputs = self._score_sequences(sequences, read_cache=shared)
        # a cache hit past a prompt's last token leaves completion positions unscored
        # (vLLM computes prompt log-probs from the first uncached token): run those again
        again = [n for n, out in enumerate(outputs) if (out.num_cached_tokens or 0) >= starts[n]]
        for n, out in zip(
            again, self._score_sequences([sequences[n] for n in again], read_cache=False)
        ):
            outputs[n] = out
        width = max(len(c) for _, c in rows)
        logp = torch.zeros(len(rows), width)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for n, ((_, comp), out) in enumerate(zip(rows, outputs)):
            # prompt_logprobs[i]: log p(token i | tokens < i)
            values = [out.prompt_logprobs[starts[n] + j][t].logprob for j, t in enumerate(comp)]
            logp[n, : len(comp)] = torch.tensor(values)
            mask[n, : len(comp)] = True
        return logp, mask

    def _score_sequences(self, sequences: list[list[int]], *, read_cache: bool) -> list[Any]:
        """One request per sequence with its prompt log-probs (the actual tokens only)."""
        params = self._sampling_params(
            max_tokens=1, prompt_logprobs=0, detokenize=False,
            skip_reading_prefix_cache=not read_cache,
        )  # fmt: skip
        return self._run(sequences, [params] * len(sequences)) if sequences else []

    # --------------------------------------------------------------------- token plane
    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        generator: torch.Generator,
        stop_ids: Sequence[int],
        *,
        temperature: float = 1.0,
        greedy: bool = False,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Sample a completion per prompt (``rlid.baselines.engine.RolloutEngine``).

        Each completion ends with (and includes) its first stop token, or after
        ``max_new_tokens``; EOS stops it only when it is among ``stop_ids``. Each
        request's seed is drawn from ``generator``, so a seed gives the same tokens.
        Returns the completions' ids and log μ of each token under softmax(logits / T).
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if greedy and temperature != 1.0:
            raise ValueError(
                "greedy decoding with the vLLM engine records temperature-1 log-probs; "
                f"pass temperature=1.0 (got {temperature})"
            )
        self._check_lengths(prompt_ids, max_new_tokens)
        seeds = torch.randint(0, 2**31 - 1, (len(prompt_ids),), generator=generator).tolist()
        params = [
            self._sampling_params(
                max_tokens=max_new_tokens,
                temperature=0.0 if greedy else temperature,
                top_p=1.0,
                top_k=0,
                seed=int(seed),
                stop_token_ids=[int(i) for i in stop_ids],
                ignore_eos=True,
                logprobs=0,
                detokenize=False,
                skip_special_tokens=False,
            )  # fmt: skip
            for seed in seeds
        ]
        outputs = self._run(prompt_ids, params)
        completions: list[list[int]] = []
        logps: list[list[float]] = []
        for out in outputs:
            sample = out.outputs[0]
            tokens = [int(t) for t in sample.token_ids]
            completions.append(tokens)
            logps.append([float(step[t].logprob) for t, step in zip(tokens, sample.logprobs)])
        return completions, logps

    # --------------------------------------------------------------------- weight sync
    def sync_weights(self, model: torch.nn.Module, *, probe: Probe | None = None) -> SyncReport:
        """Push ``model``'s current weights (LoRA merged) to the engine, reset the prefix
        cache, and with ``probe`` run :meth:`check_probe` (raises on a mismatch)."""
        start = time.perf_counter()
        state = engine_state_dict(model, TORCH_DTYPES[self.options.dtype])
        path = write_safetensors(state, self._sync_dir / "weights.safetensors")
        try:
            loaded = self._llm.collective_rpc("rlid_reload_weights", args=(str(path),))
        finally:
            path.unlink(missing_ok=True)
        self._llm.reset_prefix_cache()
        gap = self.check_probe(model, probe) if probe is not None else None
        return SyncReport(
            tensors=int(loaded[0]), seconds=time.perf_counter() - start, probe_gap=gap
        )

    def check_probe(
        self, model: torch.nn.Module, probe: Probe, tolerance: float | None = None
    ) -> float:
        """max |log π_engine − log π_trainer| over the probe's labels (float32 readouts);
        :class:`~rlid.engines.probe.StaleEngineError` above the tolerance (default
        ``options.probe_tolerance_or_default``)."""
        engine_logp = self.readout([probe.prompt_ids], [probe.label_ids]).logp[0]
        limit = tolerance if tolerance is not None else self.options.probe_tolerance_or_default
        return compare_probe(engine_logp, trainer_probe_logp(model, probe), limit)

    def worker_info(self) -> dict[str, Any]:
        """The engine worker's device and torch thread count."""
        return dict(self._llm.collective_rpc("rlid_worker_info")[0])

    def reset_prefix_cache(self) -> None:
        """Forget every cached prompt prefix (a sync does this itself)."""
        self._llm.reset_prefix_cache()

    @property
    def block_size(self) -> int:
        """Tokens per KV cache block (prefix-cache hits are whole blocks)."""
        return int(self._llm.llm_engine.vllm_config.cache_config.block_size)

    # ------------------------------------------------------------------------ plumbing
    def _check_lengths(self, sequences: Sequence[Sequence[int]], new_tokens: int) -> None:
        """Each prompt plus ``new_tokens`` must fit ``max_model_len`` (a clear error)."""
        longest = max((len(s) for s in sequences), default=0)
        if longest == 0 or any(len(s) == 0 for s in sequences):
            raise ValueError("every prompt needs at least one token")
        if longest + new_tokens > self.options.max_model_len:
            raise ValueError(
                f"a prompt of {longest} tokens plus {new_tokens} new token(s) exceeds the "
                f"engine's max_model_len={self.options.max_model_len}; raise max_model_len"
            )

    def _run(self, sequences: Sequence[Sequence[int]], params: list[Any]) -> list[Any]:
        prompts = [{"prompt_token_ids": [int(t) for t in s]} for s in sequences]
        return list(self._llm.generate(prompts, params, use_tqdm=False))

    def close(self) -> None:
        """Stop the engine's processes and remove its files (also at exit)."""
        llm = getattr(self, "_llm", None)
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        for cleanup in getattr(self, "_cleanups", []):
            cleanup()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
