"""DecisionPolicy (menus + one-forward readout) and the warm-start pretraining."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from rlid import envs
from rlid.core.acting import sample_rows
from rlid.decision.policy import DecisionPolicy
from rlid.lm.models import build_tiny_model
from rlid.lm.pretrain import PretrainConfig, random_play_transcripts, transcripts
from rlid.lm.pretrain.build import pretrain
from rlid.lm.readout import label_logprobs
from rlid.lm.start_files import answered_labels
from rlid.lm.starts import load_policy_model
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus import Interface


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path / "cache"))


def _batch(n: int = 3):
    observations, infos = [], []
    for seed in range(n):
        env = envs.make("keydoor", size=3, game_seed=seed)
        obs, info = env.reset(seed=seed)
        observations.append(obs)
        infos.append(info)
    return observations, infos


def test_decisions_are_legal_and_rescore_exactly():
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=1)
    policy = DecisionPolicy(model, tokenizer, Interface(memory="none"))
    observations, infos = _batch()
    decisions = policy.act(
        observations, infos, [None] * 3,
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    for decision, info in zip(decisions, infos):
        assert decision.action in info["legal_actions"]
        assert decision.menu.rows[decision.chosen].action == decision.action
        assert sorted(decision.menu.permutation) == list(range(len(info["legal_actions"])))
    logp_all, label_mass, hidden = policy.score(decisions)  # (B, K), (B,), (B, d)
    for b, d in enumerate(decisions):
        assert logp_all[b, d.chosen].item() == pytest.approx(d.logp, abs=1e-5)
        assert torch.isinf(logp_all[b, d.num_rows :]).all()
        assert torch.exp(logp_all[b, : d.num_rows]).sum().item() == pytest.approx(1.0, abs=1e-5)
    assert ((label_mass > 0) & (label_mass <= 1)).all()
    assert hidden.shape == (3, model.config.hidden_size)
    assert policy.budget.decisions == 3 and policy.budget.forward_passes == 2


def test_policy_readout_matches_label_logprobs_on_the_rendered_prompts():
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=2)
    policy = DecisionPolicy(model, tokenizer, Interface(memory="none", shuffle=False))
    observations, infos = _batch(2)
    decisions = policy.act(
        observations, infos, [None, None],
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0), greedy=True,
    )  # fmt: skip
    prompts = [tokenizer.decode(d.prompt_ids) for d in decisions]
    reference = label_logprobs(model, tokenizer, prompts, [d.label_ids for d in decisions])
    for b, d in enumerate(decisions):
        assert d.chosen == int(reference.logp[b].argmax())
        assert d.logp == pytest.approx(float(reference.logp[b, d.chosen].detach()), abs=1e-5)


def test_sampling_respects_padding_and_greedy():
    logp = torch.log(torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]]))
    logp[1, 2] = float("-inf")
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        rows = sample_rows(logp, generator=gen, greedy=False)
        assert rows[0] == 1 and rows[1] in (0, 1)
    assert sample_rows(logp, generator=gen, greedy=True)[0] == 1


def test_pretraining_is_deterministic_saves_and_reloads_with_the_same_readout(tmp_path):
    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=2, max_episode_steps=3, steps=3, batch_size=4,
        threads=1,
    )  # fmt: skip
    tokenizer = build_tiny_tokenizer()
    texts = random_play_transcripts(config, tokenizer)
    assert texts == random_play_transcripts(config, tokenizer)
    assert any("Answer: " in t and "\nCommand: " in t for t in texts)
    first = pretrain(config, out=tmp_path / "a", progress=False)
    pretrain(config, out=tmp_path / "b", progress=False)
    assert first["final_loss"] < first["first_loss"] + 1.0
    # every decision answer is counted under its label, in the alphabet's order
    answers = [t.split("Answer: ")[-1][0] for t in texts if "Answer: " in t]
    assert first["answered_labels"] == {k: answers.count(k) for k in sorted(set(answers))}
    assert answered_labels(tmp_path / "a") == first["answered_labels"]
    assert answered_labels(tmp_path / "nowhere") is None
    model_a, tok_a = load_policy_model(str(tmp_path / "a"))
    model_b, _ = load_policy_model(str(tmp_path / "b"))
    for (name, pa), pb in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        assert torch.equal(pa, pb), name
    fresh = build_tiny_model(tok_a, seed=0)
    assert any(not torch.equal(p, q) for p, q in zip(fresh.parameters(), model_a.parameters()))
    prompts = ["Goal: x\nNow: y\nActions:\nA) go east\nB) look\nAnswer:"]
    ids = [[tok_a.encode(" A")[0], tok_a.encode(" B")[0]]]
    ra = label_logprobs(model_a, tok_a, prompts, ids)
    rb = label_logprobs(model_b, tok_a, prompts, ids)
    assert torch.allclose(ra.logp, rb.logp)


def test_walkthrough_episodes_add_the_solution_rows_and_leave_random_play_unchanged():
    tokenizer = build_tiny_tokenizer()
    base = dict(envs=("keydoor",), episodes_per_env=2, max_episode_steps=3)
    random_only = random_play_transcripts(PretrainConfig(**base), tokenizer)
    guided = random_play_transcripts(PretrainConfig(**base, walkthrough_episodes=2), tokenizer)
    assert guided[: len(random_only)] == random_only  # its own random stream
    extra = guided[len(random_only) :]
    decision = [t for t in extra if "\nAnswer: " in t]
    # Replay the walkthrough env the corpus played: every decision picks the row whose
    # command is the solution's next command, and the label is that row's label.
    rng = np.random.default_rng([0, 1])
    env = envs.make("keydoor", split="train", max_episode_steps=64)
    expected = []
    for seed in rng.integers(2**31 - 1, size=2).tolist():
        _, info = env.reset(seed=seed)
        expected += list(info["walkthrough"])
    assert len(decision) == len(expected) == len(extra) // 2
    for text, command in zip(decision, expected):
        answer = text.rsplit("\nAnswer: ", 1)[1]
        label, chosen = answer.split("\nCommand: ")
        assert chosen.strip() == command
        assert f"\n{label.strip()}) {command}" in text  # the menu row carries that label


def test_random_answers_off_trains_on_random_prompts_and_walkthrough_answers_only():
    from rlid.lm.pretrain import training_sequences, transcripts

    tokenizer = build_tiny_tokenizer()
    base = dict(envs=("keydoor",), episodes_per_env=2, max_episode_steps=3, walkthrough_episodes=1)
    corpus = transcripts(PretrainConfig(**base), tokenizer)
    every = training_sequences(PretrainConfig(**base), tokenizer)
    assert all(w == [1.0] * len(ids) for ids, w in every)  # the default: every token trained
    answered: dict[str, int] = {}
    masked = training_sequences(
        PretrainConfig(**base, random_answers=False), tokenizer, answered=answered
    )
    assert [ids for ids, _ in masked] == [ids for ids, _ in every]
    guided = [t.label for t in corpus if t.guided and t.label]  # the answers trained on
    assert answered == {k: guided.count(k) for k in set(guided)} and guided
    assert any(t.guided for t in corpus) and any(not t.guided for t in corpus)
    weighted = training_sequences(PretrainConfig(**base, answer_weight=5.0), tokenizer)
    for t, (ids, w), (_, w5) in zip(corpus, masked, weighted):
        start = len(tokenizer.encode(t.prompt, add_special_tokens=False))
        assert w5 == [1.0] * start + [5.0] * (len(ids) - start)  # the answer and EOS
        answer = tokenizer.decode(ids[start:-1])
        assert answer.strip() and answer.strip() in t.answer
        if t.guided:
            assert w == [1.0] * len(ids)
        else:  # the loss stops where the random answer starts: " B\nCommand: ..." untrained
            assert w == [1.0] * start + [0.0] * (len(ids) - start)


def test_weighted_lm_loss_by_hand_and_equal_to_the_models_own_at_unit_weights():
    from rlid.lm.pretrain.lm import weighted_lm_loss

    # hand-computed: two next-token predictions with CE log(2) and log(4)
    logits = torch.log(torch.tensor([[[0.5, 0.5, 1e-30], [0.25, 0.75, 1e-30], [1.0, 1.0, 1.0]]]))
    ids = torch.tensor([[2, 0, 0]])
    w = torch.tensor([[0.0, 1.0, 3.0]])  # the first token is never predicted
    expected = (1 * np.log(2) + 3 * np.log(4)) / 4
    assert weighted_lm_loss(logits, ids, w).item() == pytest.approx(expected, rel=1e-6)

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    ids = torch.tensor([[5, 9, 14, 3, 0], [7, 8, 2, 11, 6]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    out = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
    mine = weighted_lm_loss(out.logits, ids, mask.float())
    assert mine.item() == pytest.approx(out.loss.item(), rel=1e-5)


def _crashing_pretrain(monkeypatch, at_step: int, config, out, every: int) -> None:
    """Run :func:`pretrain` and raise KeyboardInterrupt in step ``at_step`` (1-based)."""
    clip = torch.nn.utils.clip_grad_norm_
    calls = []

    def crash(*args, **kwargs):
        calls.append(1)
        if len(calls) == at_step:
            raise KeyboardInterrupt
        return clip(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", crash)
    try:
        with pytest.raises(KeyboardInterrupt):
            pretrain(config, out=out, progress=False, checkpoint_every=every)
    finally:
        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)


def _not_called(*args, **kwargs):
    raise AssertionError("the corpus was played again")


def test_an_interrupted_pretraining_resumes_to_the_same_weights(tmp_path, monkeypatch, capsys):
    """Killed in step 6 with a checkpoint every 2 steps, the build resumes at step 4
    and ends bit-identical to an uninterrupted one; the checkpoint is gone afterwards."""
    import rlid.lm.pretrain.build as pretrain_mod

    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=2, max_episode_steps=3, steps=7, batch_size=4,
        threads=1, walkthrough_episodes=1, answer_weight=5.0,
    )  # fmt: skip
    whole = pretrain(config, out=tmp_path / "whole", progress=False, checkpoint_every=2)
    assert whole["resumed_at_step"] == 0
    assert not pretrain_mod.work_dir(tmp_path / "whole").exists()

    _crashing_pretrain(monkeypatch, 6, config, tmp_path / "cut", every=2)
    assert not (tmp_path / "cut").exists()  # nothing half-written where the model goes
    saved = pretrain_mod.work_dir(tmp_path / "cut") / "progress"
    assert (saved / "state.json").is_file()
    mask = os.umask(0)
    os.umask(mask)
    assert (saved / "state.safetensors").stat().st_mode & 0o777 == 0o666 & ~mask  # shareable

    assert (saved.parent / "corpus" / "corpus.json").is_file()  # kept beside the checkpoints
    fresh = pretrain_mod.training_sequences
    with monkeypatch.context() as patch:  # the resumed build does not play its corpus again
        patch.setattr(pretrain_mod, "training_sequences", _not_called)
        resumed = pretrain(config, out=tmp_path / "cut", progress=False, checkpoint_every=2)
    assert pretrain_mod.training_sequences is fresh
    assert "resuming at step 4 of 7" in capsys.readouterr().err
    assert resumed["resumed_at_step"] == 4
    assert resumed["sequences"] == whole["sequences"] and resumed["dropped"] == whole["dropped"]
    assert resumed["answered_labels"] == whole["answered_labels"]  # kept with the corpus
    assert (resumed["first_loss"], resumed["final_loss"]) == (
        whole["first_loss"], whole["final_loss"],
    )  # fmt: skip
    a, b = (
        load_policy_model(str(tmp_path / "whole"))[0],
        load_policy_model(str(tmp_path / "cut"))[0],
    )
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert not pretrain_mod.work_dir(tmp_path / "cut").exists()


def test_an_unfinished_pretraining_with_other_settings_is_refused_not_mixed(tmp_path, monkeypatch):
    import rlid.lm.pretrain.build as pretrain_mod

    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=1, max_episode_steps=2, steps=4, batch_size=2,
        threads=1,
    )  # fmt: skip
    out = tmp_path / "m"
    progress = pretrain_mod.work_dir(out) / "progress"
    _crashing_pretrain(monkeypatch, 3, config, out, every=1)
    other = PretrainConfig(**{**config.__dict__, "steps": 5})
    with pytest.raises(ValueError, match=r"steps: 5 here, 4 there.*--restart"):
        pretrain(other, out=out, progress=False)
    # the default labels are not saved (checkpoints from before the option resume)
    assert "labels" not in pretrain_mod._same_build(config)
    relabelled = PretrainConfig(**{**config.__dict__, "labels": "auto"})
    with pytest.raises(ValueError, match=r"labels: 'auto' here, None there"):
        pretrain(relabelled, out=out, progress=False)
    assert progress.is_dir() and not out.exists()  # kept, not mixed
    # another thread count resumes the same build (it changes the speed, not the recipe)
    same = PretrainConfig(**{**config.__dict__, "threads": 2})
    assert pretrain(same, out=out, progress=False)["resumed_at_step"] == 2
    # restart discards the checkpoint and starts from step 0
    _crashing_pretrain(monkeypatch, 3, config, out, every=1)
    assert progress.is_dir()
    info = pretrain(other, out=out, progress=False, restart=True)
    assert info["resumed_at_step"] == 0 and info["config"]["steps"] == 5
    with pytest.raises(ValueError, match="checkpoint_every"):
        pretrain(config, out=tmp_path / "n", progress=False, checkpoint_every=-1)
    # a build that fails before its first checkpoint leaves nothing beside the output
    with pytest.raises(ValueError, match="max-tokens"):
        pretrain(PretrainConfig(**{**config.__dict__, "max_tokens": 5}), out=tmp_path / "n")
    assert not pretrain_mod.work_dir(tmp_path / "n").exists() and not (tmp_path / "n").exists()


def test_a_finished_pretraining_removes_its_work_dir_before_dropping_the_lock(
    tmp_path, monkeypatch
):
    # Removed after the release, a second builder could take the lock in between and
    # lose its lock file and checkpoint to the first one's removal.
    import rlid.lm.pretrain.build as pretrain_mod
    from rlid.runs.lock import RunLock

    seen = []
    remove = RunLock.remove_directory

    def check_then_remove(lock):
        seen.append(lock.held)
        remove(lock)

    monkeypatch.setattr(RunLock, "remove_directory", check_then_remove)
    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=1, max_episode_steps=2, steps=2, batch_size=2,
        threads=1,
    )  # fmt: skip
    pretrain(config, out=tmp_path / "m", progress=False, checkpoint_every=1)
    assert seen == [True] and not pretrain_mod.work_dir(tmp_path / "m").exists()


def test_env_entries_with_options_play_those_games():
    from rlid.lm.pretrain import parse_env_entry, split_env_entries

    assert split_env_entries("keydoor[size=4, keys=2], crafting tw-simple[goal=brief]") == [
        "keydoor[size=4,keys=2]", "crafting", "tw-simple[goal=brief]",
    ]  # fmt: skip
    assert parse_env_entry("keydoor[size=4,keys=2]") == ("keydoor", {"size": 4, "keys": 2})
    assert parse_env_entry("crafting") == ("crafting", {})
    config = PretrainConfig(envs=("keydoor[size=4,keys=2],keydoor",))
    assert config.envs == ("keydoor[size=4,keys=2]", "keydoor")

    tokenizer = build_tiny_tokenizer()
    base = dict(episodes_per_env=1, max_episode_steps=2, walkthrough_episodes=2)
    texts = random_play_transcripts(
        PretrainConfig(envs=("keydoor[size=4,keys=2]",), **base), tokenizer
    )
    commands = [t.rsplit("\nCommand: ", 1)[1].strip() for t in texts if "\nAnswer: " in t]
    rng = np.random.default_rng([0, 1])  # the walkthrough stream of the corpus
    env = envs.make("keydoor", split="train", max_episode_steps=64, size=4, keys=2)
    expected = []
    for seed in rng.integers(2**31 - 1, size=2).tolist():
        expected += list(env.reset(seed=seed)[1]["walkthrough"])
    assert commands[-len(expected) :] == expected  # the walkthroughs of the size-4 games
    assert sum(c.startswith("unlock") for c in expected) == 4  # two keys per game, two games


def test_pretrain_config_rejects_bad_values():
    with pytest.raises(ValueError, match="steps"):
        PretrainConfig(steps=0)
    with pytest.raises(ValueError, match="walkthrough_episodes"):
        PretrainConfig(walkthrough_episodes=-1)
    with pytest.raises(ValueError, match="answer_weight must be > 0"):
        PretrainConfig(answer_weight=0)
    with pytest.raises(ValueError, match="valid ids"):
        PretrainConfig(envs=("nope",))
    with pytest.raises(ValueError, match="expected int"):
        PretrainConfig(envs=("keydoor[size=x]",))
    with pytest.raises(ValueError, match="set by the corpus itself"):
        PretrainConfig(envs=("keydoor[max_episode_steps=4]",))
    with pytest.raises(ValueError, match="unbalanced brackets"):
        PretrainConfig(envs=("keydoor[size=4",))
    with pytest.raises(ValueError, match="valid options"):
        PretrainConfig(envs=("keydoor[rooms=2]",))


def _limited_model(tokenizer, limit: int):
    model = build_tiny_model(tokenizer, seed=1)
    model.config.max_position_embeddings = limit  # a short context (RoPE runs past it)
    return model


def test_a_prompt_too_long_for_the_context_is_rendered_without_its_memory():
    from dataclasses import replace

    from rlid.baselines.scoring import ScoringPolicy
    from rlid.baselines.token.policy import TokenPolicy
    from rlid.menus.prompt import render_decision_prompt, render_token_prompt
    from rlid.menus.tokens import encode_prompt

    tokenizer = build_tiny_tokenizer()
    observations, infos = _batch(2)
    memory = "You went east. " * 30  # a long memory line on the first step only
    memories = [memory, None]
    interface = Interface(shuffle=False)
    kw = dict(rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0))
    # The decision prompt without memory: the limit sits between it and the one with memory.
    plain = DecisionPolicy(build_tiny_model(tokenizer, seed=1), tokenizer, interface)
    full = plain.act(observations, infos, memories, **kw)
    assert plain.budget.shortened_prompts == 0  # the tiny model's 1024 positions suffice
    short_menu = replace(full[0].menu, memory=None)
    short = encode_prompt(
        tokenizer, render_decision_prompt(observations[0], infos[0], short_menu, interface,
                                          tokenizer, memory_text=None),
    )  # fmt: skip
    assert len(short) < len(full[0].prompt_ids)
    limit = max(len(short), len(full[1].prompt_ids)) + 1

    policy = DecisionPolicy(_limited_model(tokenizer, limit), tokenizer, interface)
    decisions = policy.act(observations, infos, memories, **kw)
    assert policy.budget.shortened_prompts == 1
    assert decisions[0].prompt_ids == short and decisions[0].menu.memory is None
    assert decisions[1].prompt_ids == full[1].prompt_ids  # a prompt that fits is unchanged
    logp_all, _, _ = policy.score(decisions)  # the update re-scores the prompt it acted on
    assert logp_all[0, decisions[0].chosen].item() == pytest.approx(decisions[0].logp, abs=1e-5)

    # Still too long without memory: the observation goes too (the menu always stays).
    bare = encode_prompt(
        tokenizer, render_decision_prompt(observations[0], infos[0], short_menu,
                                          replace(interface, observation=False), tokenizer),
    )  # fmt: skip
    assert len(bare) < len(short)
    tight = DecisionPolicy(_limited_model(tokenizer, len(bare) + 1), tokenizer, interface)
    decisions = tight.act(observations[:1], infos[:1], memories[:1], **kw)
    assert decisions[0].prompt_ids == bare and tight.budget.shortened_prompts == 1

    # Still too long: the menu's afterstates go too; every row keeps label and command.
    no_after = replace(interface, observation=False, afterstates=False)
    rows_only = encode_prompt(
        tokenizer,
        render_decision_prompt(observations[0], infos[0], short_menu, no_after, tokenizer),
    )
    assert len(rows_only) < len(bare)
    assert all(row.action in tokenizer.decode(rows_only) for row in short_menu.rows)
    tighter = DecisionPolicy(_limited_model(tokenizer, len(rows_only) + 1), tokenizer, interface)
    decisions = tighter.act(observations[:1], infos[:1], memories[:1], **kw)
    assert decisions[0].prompt_ids == rows_only and tighter.budget.shortened_prompts == 1
    logp_all, _, _ = tighter.score(decisions)
    assert logp_all[0, decisions[0].chosen].item() == pytest.approx(decisions[0].logp, abs=1e-5)
    with pytest.raises(ValueError, match="more than the model's max_position_embeddings"):
        DecisionPolicy(_limited_model(tokenizer, len(rows_only) - 1), tokenizer, interface).act(
            observations[:1], infos[:1], memories[:1], **kw
        )  # the rows alone do not fit: refused with the length

    strict = replace(interface, long_prompts="error")
    with pytest.raises(ValueError, match="more than the model's max_position_embeddings"):
        DecisionPolicy(_limited_model(tokenizer, limit), tokenizer, strict).act(
            observations, infos, memories, **kw
        )

    # The token plane keeps room for its completion; the scoring plane for the longest action.
    token_short = encode_prompt(
        tokenizer, render_token_prompt(observations[0], infos[0], interface, tokenizer)
    )
    token = TokenPolicy(
        _limited_model(tokenizer, len(token_short) + 4 + 2), tokenizer, interface,
        max_new_tokens=4,
    )  # fmt: skip
    ids = token.prompt_ids(observations[:1], infos[:1], memories[:1])
    assert ids == [token_short] and token.budget.shortened_prompts == 1
    scoring = ScoringPolicy(_limited_model(tokenizer, len(token_short) + 12), tokenizer, interface)
    scored = scoring.act(observations[:1], infos[:1], memories[:1], **kw)
    assert scored[0].prompt_ids == token_short and scoring.budget.shortened_prompts == 1


def test_a_menu_larger_than_the_label_alphabet_is_truncated_and_counted():
    tokenizer = build_tiny_tokenizer()
    observations, infos = _batch(2)
    sizes = [len(info["legal_actions"]) for info in infos]
    labels = "A-" + chr(ord("A") + sizes[0] - 2)  # one label short of the first menu
    kw = dict(rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0))
    model = build_tiny_model(tokenizer, seed=1)
    strict = DecisionPolicy(model, tokenizer, Interface(labels=labels, overflow="error"))
    with pytest.raises(ValueError, match="legal actions but the label alphabet has only"):
        strict.act(observations, infos, [None, None], **kw)
    policy = DecisionPolicy(model, tokenizer, Interface(labels=labels, overflow="truncate"))
    decisions = policy.act(observations, infos, [None, None], **kw)
    expected = sum(1 for size in sizes if size > sizes[0] - 1)
    assert policy.budget.truncated_menus == expected >= 1
    first = decisions[0].menu
    assert len(first.rows) == sizes[0] - 1 and len(first.dropped) == 1
    assert decisions[0].action in {row.action for row in first.rows}
    policy.act(observations[1:], infos[1:], [None], **kw)  # counters accumulate
    assert policy.budget.truncated_menus == expected + (sizes[1] > sizes[0] - 1)


def test_interface_long_prompts_is_checked_and_recorded_only_when_changed():
    from rlid.config import TrainConfig

    with pytest.raises(ValueError, match="long_prompts"):
        Interface(long_prompts="truncate")
    # run directories written before the field existed keep their config and fingerprint
    assert "long_prompts" not in TrainConfig().to_dict()["interface"]
    strict = TrainConfig(interface=Interface(long_prompts="error"))
    assert strict.to_dict()["interface"]["long_prompts"] == "error"
    assert TrainConfig.from_record(strict.to_dict()).to_dict() == strict.to_dict()


def test_num_games_widens_the_pool_of_training_games_the_corpus_plays(monkeypatch):

    played: dict[int, list[int]] = {}
    real_make = envs.make

    def spying_make(env_id, **options):
        env = real_make(env_id, **options)
        seen = played.setdefault(options.get("num_games", 16), [])
        reset = env.reset

        def recording_reset(*args, **kw):
            obs, info = reset(*args, **kw)
            seen.append(int(info["game_seed"]))
            return obs, info

        env.reset = recording_reset
        return env

    monkeypatch.setattr(envs, "make", spying_make)
    tokenizer = build_tiny_tokenizer()
    base = dict(envs=("keydoor",), episodes_per_env=1, max_episode_steps=1, walkthrough_episodes=40)
    transcripts(PretrainConfig(**base), tokenizer)
    assert set(played) == {16} and max(played[16]) < 16  # the env's own pool
    played.clear()
    transcripts(PretrainConfig(**base, num_games=5000), tokenizer)
    assert set(played) == {5000}
    # 41 draws from 5,000 games: (almost surely) beyond the default 16, all training games
    assert max(played[5000]) >= 16 and len(set(played[5000])) > 16
    assert all(0 <= g < 5000 for g in played[5000])
    with pytest.raises(ValueError, match="num_games"):
        PretrainConfig(num_games=-1)


def test_labels_set_the_corpus_menus_and_a_walkthrough_stops_where_its_command_is_cut():
    import re

    from rlid.lm.pretrain import transcripts

    tokenizer = build_tiny_tokenizer()
    base = dict(envs=("keydoor",), episodes_per_env=1, max_episode_steps=2, walkthrough_episodes=3)

    def menus(labels: str) -> list[list[str]]:
        corpus = transcripts(PretrainConfig(**base, labels=labels), tokenizer)
        assert {t.env for t in corpus} == {"keydoor"}
        decisions = [t for t in corpus if t.guided and "\nCommand: " in t.answer]
        return [re.findall(r"\n([A-Za-z0-9])\) ", t.prompt) for t in decisions]

    full, cut = menus("A-Z"), menus("A-B")
    assert max(len(rows) for rows in full) > 2  # keydoor's menus are larger than 2 rows
    assert all(sorted(rows) == ["A", "B"][: len(rows)] for rows in cut)
    assert 0 < len(cut) < len(full)  # walkthroughs whose next command was cut stop there
    assert PretrainConfig(labels="auto").labels == "auto"
    with pytest.raises(ValueError, match="alphabet spec"):
        PretrainConfig(labels="A-")


def test_spread_labels_make_labels_beyond_the_largest_menu_answers_and_keep_the_default():
    import re

    import rlid.lm.pretrain.build as pretrain_mod
    from rlid.lm.pretrain import transcripts
    from rlid.menus.labels import parse_alphabet

    tokenizer = build_tiny_tokenizer()
    base = dict(envs=("keydoor",), episodes_per_env=6, walkthrough_episodes=2, labels="auto")
    alphabet = parse_alphabet("auto")

    def decisions(spread: float) -> list[tuple[list[str], str, str]]:
        corpus = transcripts(PretrainConfig(**base, spread_labels=spread), tokenizer)
        out = []
        for t in corpus:
            if "\nCommand: " in t.answer:
                rows = re.findall(r"\n([A-Za-z0-9])\) ", t.prompt)
                label, command = re.fullmatch(r" (\S)\nCommand: (.*)\n", t.answer).groups()
                # the answer is a row of this menu, and its command is that row's action
                assert label in rows and f"\n{label}) {command} ->" in t.prompt
                out.append((rows, label, t.prompt))
        return out

    first, all_spread, half = decisions(0.0), decisions(1.0), decisions(0.5)
    largest = max(len(rows) for rows, _, _ in first)
    assert largest < 26  # keydoor's menus are small ...
    assert {label for _, label, _ in first} <= set(alphabet[:largest])  # ... so, by default,
    beyond = {label for _, label, _ in all_spread} - set(alphabet[:largest])
    assert len(beyond) > 10  # ... labels past the largest menu are never answers; spread: many
    for rows, _, _ in all_spread:  # a subset of the alphabet, in the alphabet's order
        assert rows == sorted(rows, key=alphabet.index) and len(set(rows)) == len(rows)
    prefix = [rows == list(alphabet[: len(rows)]) for rows, _, _ in half]
    assert 0.2 < np.mean(prefix) < 0.8  # about half the menus keep the first labels
    # a build without the option resumes as one made before it existed
    assert "spread_labels" not in pretrain_mod._same_build(PretrainConfig(**base))
    assert pretrain_mod._same_build(PretrainConfig(**base, spread_labels=0.5))["spread_labels"]
    with pytest.raises(ValueError, match="spread_labels must be in"):
        PretrainConfig(spread_labels=1.5)


def test_afterstate_play_answers_with_the_rows_the_menu_marks_best():
    import re

    import rlid.lm.pretrain.build as pretrain_mod
    from rlid.envs.outcome import best_rows
    from rlid.lm.pretrain import transcripts

    tokenizer = build_tiny_tokenizer()
    base = dict(envs=("crafting",), episodes_per_env=8, max_episode_steps=12)

    def decisions(play: str) -> list[tuple[str, list[int]]]:
        """(answer's label, whether each menu row is among the best) per decision."""
        out = []
        for t in transcripts(PretrainConfig(**base, play=play), tokenizer):
            if "\nCommand: " not in t.answer:
                continue
            rows = re.findall(r"\n([A-Z])\) .* -> (.*)", t.prompt)
            best = set(best_rows([after for _, after in rows]))
            label = re.fullmatch(r" (\S)\nCommand: (.*)\n", t.answer).group(1)
            out.append(([lab for lab, _ in rows].index(label) in best, len(best) < len(rows)))
        return out

    guided, uniform = decisions("afterstate"), decisions("random")
    assert all(ok for ok, _ in guided)  # every answer is a best-marked row ...
    marked = [ok for ok, some in uniform if some]  # ... where random play often is not
    assert sum(some for _, some in guided) >= 8 and 0 < np.mean(marked) < 0.6
    # without random answers only the answers the marks chose are trained on
    answered: dict[str, int] = {}
    config = PretrainConfig(**base, play="afterstate", random_answers=False)
    pretrain_mod.training_sequences(config, tokenizer, answered=answered)
    assert sum(answered.values()) == sum(some for _, some in guided)
    assert "play" not in pretrain_mod._same_build(PretrainConfig(**base))  # as before it
    assert pretrain_mod._same_build(PretrainConfig(**base, play="afterstate"))["play"]
    with pytest.raises(ValueError, match="play must be one of"):
        PretrainConfig(play="walkthrough")


def test_memory_sets_the_corpus_prompts_memory_line_and_a_bad_kind_is_refused():
    from rlid.lm.pretrain import transcripts

    tokenizer = build_tiny_tokenizer()
    base = dict(envs=("keydoor",), episodes_per_env=1, max_episode_steps=3, walkthrough_episodes=1)

    def memory_lines(memory: str) -> list[str]:
        corpus = transcripts(PretrainConfig(**base, memory=memory), tokenizer)
        lines = [line for t in corpus for line in t.prompt.split("\n")]
        return [line for line in lines if line.startswith("Memory:")]

    last_k, structured, none = (
        memory_lines("last_k"),
        memory_lines("structured"),
        memory_lines("none"),
    )
    assert any(" -> " in line for line in last_k)
    assert not any("Visited:" in line for line in last_k)
    assert any(line.startswith("Memory: Visited: ") for line in structured)
    assert not any(" -> " in line for line in structured)
    assert none == []
    assert PretrainConfig().memory == "last_k"  # the default warm start's corpus is unchanged
    with pytest.raises(ValueError, match="memory must be one of"):
        PretrainConfig(memory="visited")


def test_size_builds_the_preset_architecture_and_an_unknown_size_is_refused(tmp_path):
    import json

    from rlid.lm.models import MODEL_SIZES
    from rlid.lm.starts import load_policy_model

    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=1, max_episode_steps=1, steps=1, batch_size=2,
        threads=1, size="large",
    )  # fmt: skip
    pretrain(config, out=tmp_path / "large", progress=False)
    saved = json.loads((tmp_path / "large" / "config.json").read_text())
    for key, value in MODEL_SIZES["large"].items():
        assert saved[key] == value
    model, _ = load_policy_model(str(tmp_path / "large"))
    assert model.config.hidden_size == MODEL_SIZES["large"]["hidden_size"] != 128
    assert PretrainConfig().size == "tiny"  # the default warm start is unchanged
    with pytest.raises(ValueError, match="size must be one of"):
        PretrainConfig(size="huge")


def test_sequences_over_max_tokens_are_counted_per_env_printed_and_recorded(tmp_path, capsys):
    import json

    from rlid.lm.pretrain import training_sequences, transcripts

    tokenizer = build_tiny_tokenizer()
    config = PretrainConfig(
        envs=("keydoor", "crafting"), episodes_per_env=2, max_episode_steps=3, steps=2,
        batch_size=2, threads=1,
    )  # fmt: skip
    lengths: dict[str, list[int]] = {"keydoor": [], "crafting": []}
    for t in transcripts(config, tokenizer):
        lengths[t.env].append(len(tokenizer.encode(t.prompt + t.answer)) + 1)  # + EOS
    cap = int(np.median(lengths["keydoor"] + lengths["crafting"]))
    short = PretrainConfig(**{**config.__dict__, "max_tokens": cap})
    dropped: dict[str, list[int]] = {}
    kept = training_sequences(short, tokenizer, dropped=dropped)
    expected = {env: [sum(n > cap for n in ns), len(ns)] for env, ns in lengths.items()}
    assert dropped == expected and expected["keydoor"][0] + expected["crafting"][0] > 0
    assert len(kept) == sum(total - n for n, total in expected.values())
    info = pretrain(short, out=tmp_path / "m", progress=False)
    err = capsys.readouterr().err
    for env, (n, total) in expected.items():
        if n:
            assert f"{n} of {total} sequences of {env} are longer than max_tokens {cap}" in err
    saved = json.loads((tmp_path / "m" / "pretrain.json").read_text())
    assert saved["dropped"] == info["dropped"]
    # what wrote the weights: their hash (as a run's start_model records it) and the code
    from rlid.lm.starts import model_pin
    from rlid.runs.software import software_record

    assert saved["sha256"] == model_pin(str(tmp_path / "m"))["sha256"]
    assert saved["software"] == json.loads(json.dumps(software_record()))
    assert saved["dropped"] == {env: {"dropped": n, "of": t} for env, (n, t) in expected.items()}


def test_sigterm_saves_the_pretraining_step_and_the_build_resumes_from_it(
    tmp_path, monkeypatch, capsys
):
    """SIGTERM in step 5 with no checkpoint due until step 100: step 5 is saved, the
    build stops with RunStopped, and the same call resumes at step 5 to the weights of
    an uninterrupted build."""
    import signal

    import rlid.lm.pretrain.build as pretrain_mod
    from rlid.runs.stop import RunStopped

    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=2, max_episode_steps=3, steps=7, batch_size=4,
        threads=1, walkthrough_episodes=1,
    )  # fmt: skip
    whole = pretrain(config, out=tmp_path / "whole", progress=False, checkpoint_every=100)
    clip, calls = torch.nn.utils.clip_grad_norm_, []

    def signalled(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            signal.raise_signal(signal.SIGTERM)
        return clip(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.utils, "clip_grad_norm_", signalled)
        with pytest.raises(RunStopped, match="after step 5, which is checkpointed") as stopped:
            pretrain(config, out=tmp_path / "cut", progress=False, checkpoint_every=100)
    assert stopped.value.exit_code == 143 and len(calls) == 5
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert (pretrain_mod.work_dir(tmp_path / "cut") / "progress" / "state.json").is_file()
    resumed = pretrain(config, out=tmp_path / "cut", progress=False, checkpoint_every=100)
    assert "resuming at step 5 of 7" in capsys.readouterr().err
    assert resumed["final_loss"] == whole["final_loss"]
    a, b = (load_policy_model(str(tmp_path / d))[0] for d in ("whole", "cut"))
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name


def test_a_resumed_pretraining_checks_its_kept_corpus_and_replays_a_missing_one(
    tmp_path, monkeypatch
):
    import shutil

    import rlid.lm.pretrain.build as pretrain_mod
    from rlid.runs.state import load_state, save_state

    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=1, max_episode_steps=2, steps=4, batch_size=2,
        threads=1, walkthrough_episodes=1, answer_weight=3.0, random_answers=False,
    )  # fmt: skip
    whole = pretrain(config, out=tmp_path / "whole", progress=False, checkpoint_every=1)
    # a checkpoint without its corpus (one written before the corpus was kept): played again
    _crashing_pretrain(monkeypatch, 3, config, tmp_path / "m", every=1)
    corpus = pretrain_mod.work_dir(tmp_path / "m") / "corpus"
    kept = load_state(corpus / "corpus")
    assert set(kept["answers"]) == {0.0, 3.0}  # random-play answers untrained, walkthroughs x3
    shutil.rmtree(corpus)
    assert pretrain(config, out=tmp_path / "m", progress=False)["final_loss"] == whole["final_loss"]
    # a kept corpus that no longer matches the checkpoint's digest is refused, not used
    _crashing_pretrain(monkeypatch, 3, config, tmp_path / "n", every=1)
    corpus = pretrain_mod.work_dir(tmp_path / "n") / "corpus"
    kept = load_state(corpus / "corpus")
    kept["ids"][0] += 1
    save_state(corpus / "corpus", kept)
    with pytest.raises(ValueError, match="another corpus"):
        pretrain(config, out=tmp_path / "n", progress=False)
    # --restart discards it with the checkpoint and builds afresh
    info = pretrain(config, out=tmp_path / "n", progress=False, restart=True)
    assert info["resumed_at_step"] == 0 and info["final_loss"] == whole["final_loss"]
    assert not pretrain_mod.work_dir(tmp_path / "n").exists()


def test_length_pieces_by_hand():
    from rlid.lm.pretrain.lm import length_pieces

    lengths = [5, 100, 7, 30, 6]
    assert length_pieces(lengths, 0) == [[0, 1, 2, 3, 4]]  # off: the batch as it is
    # in length order 5, 6, 7, 30, 100: 3 x 7 = 21 fits 24, 4 x 30 does not; 100 alone
    assert length_pieces(lengths, 24) == [[0, 4, 2], [3], [1]]
    assert length_pieces(lengths, 1000) == [[0, 4, 2, 3, 1]]  # 5 x 100 fits: one piece
    assert length_pieces(lengths, 1) == [[0], [4], [2], [3], [1]]  # each alone, none dropped


@pytest.mark.parametrize("answer_weight", [1.0, 5.0])
def test_a_batch_in_pieces_has_the_one_padded_batchs_loss_and_gradient(answer_weight):
    """``max_batch_tokens``: pieces of a length-sorted batch, each divided by the whole
    batch's weight, add up to the loss and gradient of the batch padded as one."""
    from rlid.lm.pretrain import training_sequences
    from rlid.lm.pretrain.lm import batch_backward

    tokenizer = build_tiny_tokenizer()
    config = PretrainConfig(
        envs=("keydoor", "crafting"), episodes_per_env=2, max_episode_steps=3,
        walkthrough_episodes=1, random_answers=False, answer_weight=answer_weight,
    )  # fmt: skip
    seqs = training_sequences(config, tokenizer)
    batch = seqs[:3] + seqs[-3:]  # mixed lengths, random-play (weight 0 answers) and walkthrough
    lengths = sorted(len(ids) for ids, _ in batch)
    assert lengths[0] < lengths[-1]
    grads = []
    for max_tokens in (0, 2 * lengths[-1]):
        model = build_tiny_model(tokenizer, seed=3)
        loss = batch_backward(model, batch, tokenizer.pad_token_id, answer_weight, max_tokens)
        grads.append((loss, [p.grad.clone() for p in model.parameters()]))
    from rlid.lm.pretrain.lm import length_pieces

    assert len(length_pieces([len(ids) for ids, _ in batch], 2 * lengths[-1])) > 1
    (one_loss, one), (split_loss, split) = grads
    assert split_loss.item() == pytest.approx(one_loss.item(), rel=1e-5)
    for a, b in zip(one, split, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="max_batch_tokens"):
        PretrainConfig(max_batch_tokens=-1)


def test_the_model_of_an_unfinished_build_loads_as_of_its_last_checkpoint(tmp_path, monkeypatch):
    import rlid.lm.pretrain.build as pretrain_mod
    from rlid.lm.pretrain.build import load_unfinished

    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=1, max_episode_steps=2, steps=5, batch_size=2,
        threads=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match="no unfinished pretraining"):
        load_unfinished(tmp_path / "m")
    _crashing_pretrain(monkeypatch, 4, config, tmp_path / "m", every=3)
    model, tokenizer, info = load_unfinished(tmp_path / "m")
    saved = pretrain_mod._load_progress(pretrain_mod.work_dir(tmp_path / "m"))
    assert info["step"] == 3 and info["loss"] == pytest.approx(np.mean(saved["losses"]))
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved["model"][name]), name
    assert not model.training and tokenizer.eos_token_id is not None


def test_pretrain_snapshot_saves_the_unfinished_build_as_a_model_dir(tmp_path, monkeypatch, capsys):
    import json

    import rlid.lm.pretrain.build as pretrain_mod
    from rlid.cli.main import main

    config = PretrainConfig(
        envs=("keydoor",), episodes_per_env=1, max_episode_steps=2, steps=5, batch_size=2,
        threads=1,
    )  # fmt: skip
    out, snap = tmp_path / "m", tmp_path / "snap"

    def refused(dest, match):
        assert main(["pretrain", "--out", str(out), "--snapshot", str(dest)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and match in err, err

    refused(snap, "no unfinished pretraining")
    assert not snap.exists()
    _crashing_pretrain(monkeypatch, 4, config, out, every=3)
    capsys.readouterr()
    assert main(["pretrain", "--out", str(out), "--snapshot", str(snap)]) == 0
    assert "at step 3 of 5" in capsys.readouterr().out
    saved = pretrain_mod._load_progress(pretrain_mod.work_dir(out))
    model, _ = load_policy_model(str(snap))
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved["model"][name]), name
    record = json.loads((snap / "snapshot.json").read_text())
    assert record["step"] == 3 and record["steps"] == 5 and record["unfinished_build"] == str(out)
    refused(snap, "not empty")  # never over a model, this snapshot included
    assert json.loads((snap / "snapshot.json").read_text()) == record
    refused(out, "finished model")
    assert not (out / "config.json").exists()
    # a checkpoint saved while the snapshot reads the previous one: that read is not used
    work = pretrain_mod.work_dir(out)
    load, reads = pretrain_mod._load_progress, []

    def read_then_save(path):
        state = load(path)
        reads.append(state["step"])
        if len(reads) == 1:
            pretrain_mod._save_progress(path, {**state, "step": 4})
        return state

    monkeypatch.setattr(pretrain_mod, "_load_progress", read_then_save)
    assert main(["pretrain", "--out", str(out), "--snapshot", str(tmp_path / "snap2")]) == 0
    assert reads == [3, 4] and "at step 4 of 5" in capsys.readouterr().out
    monkeypatch.setattr(pretrain_mod, "_load_progress", load)
    pretrain_mod._save_progress(work, saved)  # back to step 3 for the resume below
    # the build resumes from the same checkpoint afterwards
    info = pretrain(config, out=out, progress=False, checkpoint_every=3)
    assert info["config"]["steps"] == 5 and (out / "pretrain.json").exists()


def test_measuring_a_prompt_over_the_context_prints_no_transformers_warning(capfd):
    """Prompts are measured to be shortened (or refused with their length), so the
    tokenizer's "will result in indexing errors" warning would only mislead."""
    import logging

    from rlid.menus.tokens import encode_prompt

    tokenizer = build_tiny_tokenizer()
    seen: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    catch = Catch()
    logging.getLogger("transformers").addHandler(catch)
    try:
        ids = encode_prompt(tokenizer, "go " * (tokenizer.model_max_length + 10))
    finally:
        logging.getLogger("transformers").removeHandler(catch)
    assert len(ids) > tokenizer.model_max_length
    assert not [m for m in seen if "longer than the specified maximum" in m]
    assert "longer than the specified maximum" not in capfd.readouterr().err
