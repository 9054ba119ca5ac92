"""Gradient accumulation: micro-batches of 1, 4 and 32 give the update of one batch of 32.

The loss normaliser is the minibatch's, never the micro-batch's (the verl #5625 bug
class); each test also shows that dividing by the micro-batch's own count would
give a different gradient, so the equivalence checks have teeth.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlid.config.planes import TokenConfig
from rlid.lm.optim import minibatches
from rlid.losses.decision import PPOCoefs, decision_ppo_loss
from rlid.losses.token import TokenLoss, aggregation_normaliser, normaliser_units, token_policy_loss

MICRO = [1, 4, 32]
B = 32


def _decision_batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    width = 5
    sizes = torch.randint(2, width + 1, (B,), generator=gen)  # menu sizes 2..5
    logits = torch.randn(B, width, generator=gen)
    valid = torch.arange(width)[None, :] < sizes[:, None]
    logits = logits.masked_fill(~valid, float("-inf"))
    actions = (torch.rand(B, generator=gen) * sizes).long()
    logp_old = torch.log_softmax(logits + 0.3 * torch.randn(B, width, generator=gen), -1)
    logp_old = logp_old.gather(1, actions[:, None]).squeeze(1)
    ref = torch.log_softmax(logits + torch.randn(B, width, generator=gen), -1)
    advantages = torch.randn(B, generator=gen)
    return logits, actions, logp_old, ref, advantages


def _decision_grad(logits, actions, logp_old, ref, advantages, micro: int, normaliser):
    leaf = logits.clone().requires_grad_(True)
    total = torch.zeros(())
    for start in range(0, B, micro):
        part = slice(start, start + micro)
        logp_all = torch.log_softmax(leaf[part], -1)
        n = normaliser if normaliser is not None else None
        loss, _ = decision_ppo_loss(logp_all, actions[part], logp_old[part], advantages[part], logp_ref=ref[part], normaliser=n, coefs=PPOCoefs(clip_eps=0.2, ent_coef=0.05, kl_coef=0.1))  # fmt: skip
        loss.backward()
        total = total + loss.detach()
    return leaf.grad, total


@pytest.mark.parametrize("micro", MICRO)
def test_decision_loss_micro_batches_equal_one_batch(micro):
    batch = _decision_batch()
    grad_one, loss_one = _decision_grad(*batch, micro=B, normaliser=None)
    grad_micro, loss_micro = _decision_grad(*batch, micro=micro, normaliser=B)
    torch.testing.assert_close(grad_micro, grad_one, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(loss_micro, loss_one, rtol=1e-5, atol=1e-7)
    if micro < B:  # the micro-batch's own normaliser is wrong by a factor B / micro
        grad_wrong, _ = _decision_grad(*batch, micro=micro, normaliser=None)
        assert not torch.allclose(grad_wrong, grad_one)


def _token_batch(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    width = 6
    lengths = torch.randint(1, width + 1, (B,), generator=gen)  # ragged: 1..6 tokens
    mask = torch.arange(width)[None, :] >= (width - lengths)[:, None]  # right-aligned
    logp = -torch.rand(B, width, generator=gen) * 3
    logp_old = logp + 0.2 * torch.randn(B, width, generator=gen)
    logp_rollout = logp_old + 0.1 * torch.randn(B, width, generator=gen)
    logp_ref = logp + 0.3 * torch.randn(B, width, generator=gen)
    advantages = torch.randn(B, generator=gen)
    return logp, logp_old, logp_rollout, logp_ref, advantages, mask, lengths


def _token_grad(variant, batch, micro: int, normaliser):
    logp, logp_old, logp_rollout, logp_ref, advantages, mask, lengths = batch
    leaf = logp.clone().requires_grad_(True)
    total = torch.zeros(())
    for start in range(0, B, micro):
        part = slice(start, start + micro)
        loss, _ = token_policy_loss(leaf[part], logp_old[part], advantages[part], mask[part], logp_rollout=logp_rollout[part], logp_ref=logp_ref[part], normaliser=normaliser, loss=TokenLoss(variant=variant, max_len=6, mismatch="tis", beta=0.05))  # fmt: skip
        loss.backward()
        total = total + loss.detach()
    return leaf.grad, total


@pytest.mark.parametrize("variant", ["grpo", "dr_grpo", "dapo", "gspo", "cispo"])
@pytest.mark.parametrize("micro", MICRO)
def test_token_aggregations_micro_batches_equal_one_batch(variant, micro):
    batch = _token_batch()
    lengths = batch[-1]
    grad_one, loss_one = _token_grad(variant, batch, B, None)
    normaliser = aggregation_normaliser(variant, lengths, 6)
    grad_micro, loss_micro = _token_grad(variant, batch, micro, normaliser)
    torch.testing.assert_close(grad_micro, grad_one, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(loss_micro, loss_one, rtol=1e-5, atol=1e-6)
    if micro < B:
        grad_wrong, _ = _token_grad(variant, batch, micro, None)
        assert not torch.allclose(grad_wrong, grad_one)


def test_aggregation_normalisers_by_hand():
    lengths = torch.tensor([1, 3, 4])
    assert float(aggregation_normaliser("grpo", lengths)) == 3  # sequences
    assert float(aggregation_normaliser("gspo", lengths)) == 3
    assert float(aggregation_normaliser("dapo", lengths)) == 8  # tokens
    assert float(aggregation_normaliser("cispo", lengths)) == 8
    assert float(aggregation_normaliser("dr_grpo", lengths, 5)) == 15  # B * max_len
    assert normaliser_units("dapo", lengths).tolist() == [1.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="max_len"):
        aggregation_normaliser("dr_grpo", lengths)
    with pytest.raises(ValueError, match="unknown variant"):
        aggregation_normaliser("ppo", lengths)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "n, size, expected",
    [(65, 32, [32, 33]), (64, 32, [32, 32]), (48, 32, [32, 16]), (31, 32, [31]), (1, 32, [1]),
     (70, 32, [32, 38]), (0, 32, [])],
)  # fmt: skip
def test_tail_minibatch_merges_into_the_previous_one(n, size, expected):
    parts = minibatches(np.arange(n), size)
    assert [len(p) for p in parts] == expected
    assert sorted(np.concatenate(parts).tolist() if parts else []) == list(range(n))


@pytest.mark.parametrize(
    "costs, size, budget, expected",
    [([5, 5, 5, 20, 1], 3, 10, [(0, 2), (2, 3), (3, 4), (4, 5)]),  # 20 > 10: alone
     ([1, 1, 1, 1, 1], 2, 100, [(0, 2), (2, 4), (4, 5)]),  # the count bound alone cuts
     ([3, 3, 3], None, 6, [(0, 2), (2, 3)]),  # 3 + 3 = 6 fits, a third does not
     ([7, 7, 7], 2, None, [(0, 2), (2, 3)]),  # no budget: chunks()
     ([], 4, 10, [])],
)  # fmt: skip
def test_token_budget_chunks_by_hand(costs, size, budget, expected):
    from rlid.lm.optim import budget_chunks

    assert [(p.start, p.stop) for p in budget_chunks(costs, size, budget)] == expected


def test_a_token_budget_below_one_is_refused():
    from rlid.core.train import TrainConfig
    from rlid.lm.optim import budget_chunks

    with pytest.raises(ValueError, match="micro_batch_tokens must be >= 1"):
        TrainConfig(micro_batch_tokens=0)
    with pytest.raises(ValueError, match="token budget"):
        budget_chunks([1], None, 0)


# ----------------------------------------------------------------- through the trainers
def _tiny():
    from rlid.lm.models import build_tiny_model
    from rlid.lm.tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    return build_tiny_model(tokenizer, seed=0), tokenizer


def _sgd_step_params(step) -> list[torch.Tensor]:
    model, tokenizer = _tiny()
    params = list(model.parameters())
    # SGD: the parameter change is the (clipped) gradient itself, so equal updates
    # mean equal gradients (Adam's first step would hide scale errors)
    optimizer = torch.optim.SGD(params, lr=0.5)
    step(model, tokenizer, params, optimizer)
    return [p.detach().clone() for p in params]


@pytest.fixture(scope="module")
def decision_rollout():
    from rlid import envs
    from rlid.core.train import TrainConfig
    from rlid.decision.policy import DecisionPolicy

    model, tokenizer = _tiny()
    config = TrainConfig(env="keydoor", env_options={"size": 2})
    policy = DecisionPolicy(model, tokenizer, config.interface)
    env = envs.make("keydoor", size=2, game_seed=0)
    obs, info = [], []
    for seed in range(B):
        o, i = env.reset(seed=seed)
        obs.append(o)
        info.append(i)
    with torch.no_grad():
        decisions = policy.act(
            obs, info, [None] * B, rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
    advantages = torch.randn(B, generator=torch.Generator().manual_seed(3))
    return decisions, advantages


@pytest.mark.parametrize("micro", [1, 4])
@pytest.mark.parametrize("advantage", ["group", "gae"])
def test_ppo_update_micro_batches_equal_one_batch(decision_rollout, micro, advantage):
    from rlid.core.loop import RunContext
    from rlid.core.records import ValueHead
    from rlid.core.train import DecisionBatch, TrainConfig, ppo_update
    from rlid.decision.policy import DecisionPolicy
    from rlid.lm.optim import Stepper

    decisions, advantages = decision_rollout
    targets = advantages * 2

    def step_with(micro_batch_size):
        def step(model, tokenizer, params, optimizer):
            config = TrainConfig(
                env="keydoor", epochs=1, minibatch_size=B, micro_batch_size=micro_batch_size,
                ent_coef=0.05, label_mass_coef=0.1, advantage=advantage, max_grad_norm=1e9,
                position_coef=0.5,  # batch-level: its directions come from the whole batch
            )  # fmt: skip
            head = None
            if advantage == "gae":
                head = ValueHead(model.config.hidden_size)
                torch.nn.init.normal_(
                    head.linear.weight, generator=torch.Generator().manual_seed(0)
                )
                params += list(head.parameters())
                optimizer.add_param_group({"params": list(head.parameters())})
            policy = DecisionPolicy(model, tokenizer, config.interface, value_head=head)
            ctx = RunContext(config)
            batch = DecisionBatch(decisions, advantages, targets, np.arange(len(decisions)))
            stepper = Stepper(optimizer, params, config.max_grad_norm)
            ppo_update(ctx, policy, batch, stepper, np.random.default_rng(0))
            assert ctx.budget.optimizer_steps == 1

        return step

    one = _sgd_step_params(step_with(None))
    many = _sgd_step_params(step_with(micro))
    start = _sgd_step_params(lambda *a: None)
    assert any(not torch.equal(a, b) for a, b in zip(one, start))  # the step did something
    for a, b in zip(many, one):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _generations(model, tokenizer):
    from rlid.baselines.engine import completion_logprobs
    from rlid.baselines.token.policy import Generation

    gen = torch.Generator().manual_seed(5)
    vocab = len(tokenizer)
    prompts = [torch.randint(5, vocab, (int(n),), generator=gen).tolist()
               for n in torch.randint(3, 9, (B,), generator=gen)]  # fmt: skip
    outputs = [torch.randint(5, vocab, (int(n),), generator=gen).tolist()
               for n in torch.randint(1, 7, (B,), generator=gen)]  # fmt: skip
    with torch.no_grad():
        logp, mask, _ = completion_logprobs(model, prompts, outputs, tokenizer.pad_token_id)
    rows = [logp[b][mask[b]].tolist() for b in range(B)]
    # logp_old a little off the current policy so ratios and clipping are exercised
    return [
        Generation(action="", text="", valid=True, prompt_ids=p, completion_ids=c,
                   logp_rollout=[x - 0.05 for x in r], logp_old=[x + 0.1 for x in r],
                   stopped=True)
        for p, c, r in zip(prompts, outputs, rows)
    ]  # fmt: skip


@pytest.mark.parametrize("algo", ["grpo", "dr_grpo", "dapo", "gspo", "cispo"])
def test_token_update_micro_batches_equal_one_batch(algo):
    from rlid.baselines.token.train import Rescoring, TokenBatch, token_update
    from rlid.core.loop import RunContext
    from rlid.lm.optim import Stepper, budget_chunks

    advantages = torch.randn(B, generator=torch.Generator().manual_seed(7))

    def step_with(**limits):  # micro_batch_size, micro_batch_tokens
        def step(model, tokenizer, params, optimizer):
            config = TokenConfig(
                plane="token", algo=algo, epochs=1, minibatch_size=B, max_new_tokens=6,
                mismatch="tis", max_grad_norm=1e9, **limits,
            )  # fmt: skip
            completions = _generations(model, tokenizer)
            costs = [len(c.prompt_ids) + len(c.completion_ids) for c in completions]
            assert len(budget_chunks(costs, None, 12)) > 2  # prompts 3-8, completions 1-6
            ctx = RunContext(config)
            batch = TokenBatch(completions, advantages, np.arange(len(completions)))
            stepper = Stepper(optimizer, params, config.max_grad_norm)
            rescoring = Rescoring(tokenizer.pad_token_id)
            token_update(ctx, model, batch, stepper, np.random.default_rng(0), rescoring)
            assert ctx.budget.optimizer_steps == 1

        return step

    one = _sgd_step_params(step_with())
    start = _sgd_step_params(lambda *a: None)
    assert any(not torch.equal(a, b) for a, b in zip(one, start))
    # micro-batches by count, and by a token budget (prompt + completion positions)
    for limits in ({"micro_batch_size": 1}, {"micro_batch_size": 4}, {"micro_batch_tokens": 12}):
        many = _sgd_step_params(step_with(**limits))
        for a, b in zip(many, one):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("micro", [1, 3])
def test_rollout_forwards_chunked_by_micro_batch_size_act_the_same(micro):
    """Chunking the rollout readout changes memory, not decisions (sampling is one draw)."""
    from rlid import envs
    from rlid.config import TrainConfig
    from rlid.decision.policy import DecisionPolicy

    model, tokenizer = _tiny()
    interface = TrainConfig().interface
    env = envs.make("keydoor", size=2, game_seed=0)
    pairs = [env.reset(seed=s) for s in range(7)]
    obs, infos = [p[0] for p in pairs], [p[1] for p in pairs]
    out = {}
    for size in (None, micro):
        policy = DecisionPolicy(model, tokenizer, interface, micro_batch_size=size)
        with torch.no_grad():
            decisions = policy.act(
                obs, infos, [None] * 7, rng=np.random.default_rng(0),
                generator=torch.Generator().manual_seed(0),
            )  # fmt: skip
        out[size] = [(d.chosen, round(d.logp, 5), round(d.entropy, 5)) for d in decisions]
        assert policy.budget.forward_passes == (1 if size is None else -(-7 // size))
    assert out[micro] == out[None]


@pytest.mark.parametrize("plane", ["decision", "scoring"])
def test_a_token_budget_cuts_the_update_and_keeps_its_step(plane):
    """micro_batch_tokens cuts a minibatch by token positions (the scoring plane counts
    its prompt cache's copies and every action's tokens): same step as one batch."""
    from rlid import envs
    from rlid.baselines.scoring import ScoringPolicy
    from rlid.config.planes import ScoringConfig
    from rlid.core.loop import RunContext
    from rlid.core.menu_update import DecisionBatch, micro_parts, ppo_update, update_tokens
    from rlid.core.train import TrainConfig
    from rlid.decision.policy import DecisionPolicy
    from rlid.lm.optim import Stepper

    n = 8
    env = envs.make("keydoor", size=3, keys=1, distractors=2, game_seed=0)
    states = [env.reset(seed=seed) for seed in range(n)]
    advantages = torch.randn(n, generator=torch.Generator().manual_seed(3))
    cuts = []

    def step_with(tight: bool):
        def step(model, tokenizer, params, optimizer):
            kind = {"plane": "scoring"} if plane == "scoring" else {}
            cls = ScoringConfig if plane == "scoring" else TrainConfig
            loose = cls(env="keydoor", **kind)  # type: ignore[arg-type]
            make = ScoringPolicy if plane == "scoring" else DecisionPolicy
            policy = make(model, tokenizer, loose.interface)
            with torch.no_grad():
                decisions = policy.act(
                    [o for o, _ in states], [i for _, i in states], [None] * n,
                    rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0),
                )  # fmt: skip
            cost = getattr(policy, "update_tokens", update_tokens)
            costs = [cost(d) for d in decisions]
            if plane == "scoring":  # the prompt once per action (K <= 64), and the actions
                d = decisions[0]
                ks = [len(c) for c in d.extra["completion_ids"]]
                assert costs[0] == len(ks) * len(d.prompt_ids) + sum(ks)
            else:
                assert costs == [len(d.prompt_ids) for d in decisions]  # flat menus
            config = cls(
                env="keydoor", epochs=1, minibatch_size=n, max_grad_norm=1e9, ent_coef=0.05,
                micro_batch_tokens=2 * max(costs) if tight else None, **kind,
            )  # type: ignore[arg-type]  # fmt: skip
            cuts.append(len(micro_parts(config, policy, decisions, np.arange(n))))
            ctx = RunContext(config)
            batch = DecisionBatch(decisions, advantages, advantages * 2, np.arange(n))
            stepper = Stepper(optimizer, params, config.max_grad_norm)
            ppo_update(ctx, policy, batch, stepper, np.random.default_rng(0))
            assert ctx.budget.optimizer_steps == 1

        return step

    one = _sgd_step_params(step_with(False))
    cut = _sgd_step_params(step_with(True))
    start = _sgd_step_params(lambda *a: None)
    assert cuts[0] == 1 and 2 <= cuts[1] < n  # the budget cut the minibatch
    assert any(not torch.equal(a, b) for a, b in zip(one, start))
    for a, b in zip(cut, one):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
