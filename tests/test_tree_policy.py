"""Label trees on the decision plane: the path readout, exact joint probabilities over
every legal action, exact re-scoring, and PPO on the joint action."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rlid.decision.policy import DecisionPolicy
from rlid.lm.models import build_tiny_model
from rlid.lm.readout import left_pad_ids, pad_label_ids, readout_from_ids
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.lm.tree_readout import LevelReader, path_logprobs
from rlid.losses.decision import PPOCoefs, decision_ppo_loss, exact_entropy
from rlid.menus import Interface
from tests.test_label_trees import science_menu

INTERFACE = Interface(memory="none", afterstates=False)


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    return build_tiny_model(tok, seed=0)


def state(size: int, seed: int = 0) -> dict:
    legal, templates = science_menu(size, seed)
    return {"legal_actions": legal, "afterstates": None, "objective": "Find the key.",
            "action_templates": templates}  # fmt: skip


def act(model, tok, sizes, *, seed=0, interface=INTERFACE, **kw):
    policy = DecisionPolicy(model, tok, interface, **kw)
    infos = [state(size, seed + b) for b, size in enumerate(sizes)]
    decisions = policy.act(
        ["You are in the lab."] * len(sizes), infos, [None] * len(sizes),
        rng=np.random.default_rng(seed), generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    return policy, decisions


def test_probabilities_over_all_legal_actions_sum_to_one_and_none_is_zero(model, tok):
    policy, decisions = act(model, tok, [210, 12], seed=1)
    assert [d.tree.depth > 1 for d in decisions] == [True, False]  # a tree, a flat menu
    with torch.no_grad():
        logp, mass, _ = policy.score(decisions)  # the exact joint over every legal action
    for b, d in enumerate(decisions):
        probs = logp[b, : d.num_rows].double().exp()
        assert d.num_rows == len(d.menu.rows) == d.menu.num_legal
        assert abs(float(probs.sum()) - 1.0) < 1e-6
        assert bool((probs > 0).all())
        # the recorded decision's log-prob is the joint's at its action, within 1e-6
        assert abs(float(logp[b, d.chosen]) - d.logp) < 1e-6
        assert d.menu.rows[d.chosen].action == d.action
        assert 0 < float(mass[b]) <= 1


def test_on_a_real_scienceworld_state_of_404_actions_the_policy_is_exact(model, tok):
    """tests/data/scienceworld_states.json: a test-conductivity state with 404 legal
    actions and ScienceWorld's own templates. The joint over every action sums to 1
    within 1e-6, none is zero, and the recorded decision re-scores within 1e-6."""
    fixture = Path(__file__).with_name("data") / "scienceworld_states.json"
    saved = max(json.loads(fixture.read_text())["states"], key=lambda s: len(s["legal_actions"]))
    assert len(saved["legal_actions"]) > 200
    info = {**saved, "afterstates": None}
    policy = DecisionPolicy(model, tok, INTERFACE)
    decisions = policy.act(
        [saved["observation"]], [info], [None], rng=np.random.default_rng(0),
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    d = decisions[0]
    assert d.tree is not None and d.tree.depth >= 2 and d.action in saved["legal_actions"]
    firsts = [row.text for row in d.tree.root.children]  # grouped by ScienceWorld's templates
    assert any(text.startswith("focus on ... (") for text in firsts)
    with torch.no_grad():
        logp, _, _ = policy.score(decisions)
        paths = policy.score_paths(decisions)
    probs = logp[0, : d.num_rows].double().exp()
    assert d.num_rows == len(saved["legal_actions"])
    assert abs(float(probs.sum()) - 1.0) < 1e-6 and bool((probs > 0).all())
    assert abs(float(logp[0, d.chosen]) - d.logp) < 1e-6
    joint = sum(float(paths.logp[0, level, s.row]) for level, s in enumerate(d.path))
    assert abs(joint - d.logp) < 1e-6


def test_rescoring_a_recorded_path_gives_the_stored_log_probs(model, tok):
    policy, decisions = act(model, tok, [300, 5, 90], seed=2)
    with torch.no_grad():
        scores = policy.score_paths(decisions)
    for b, d in enumerate(decisions):
        steps = d.path or ()
        assert bool(scores.present[b, : max(len(steps), 1)].all())
        for level, step in enumerate(steps):
            logp = scores.logp[b, level]
            assert abs(float(logp[step.row]) - step.logp) < 1e-6
            assert abs(float(exact_entropy(logp[None])) - step.entropy) < 1e-5
            assert abs(float(scores.label_mass[b, level]) - step.label_mass) < 1e-6
        joint = sum(float(scores.logp[b, level, s.row]) for level, s in enumerate(steps))
        assert abs(joint - d.logp) < 1e-6 if steps else True


def test_one_forward_over_the_path_equals_a_readout_per_level(model, tok):
    """path_logprobs (one forward) == LevelReader (KV cache) == a plain readout of the
    text up to each level, every row of every level within 1e-6."""
    _, decisions = act(model, tok, [200, 140], seed=3)
    prompts = [d.prompt_ids for d in decisions]
    segments = [[list(s.segment) for s in d.path[1:]] for d in decisions]
    labels = [[list(s.label_ids) for s in d.path] for d in decisions]
    with torch.no_grad():
        joint = path_logprobs(model, prompts, segments, labels, tok.pad_token_id)
        reader = LevelReader(model, tok.pad_token_id)
        first = reader.first(prompts, [levels[0] for levels in labels])
        assert torch.allclose(first.logp, joint.logp[:, 0, : first.logp.shape[1]], atol=1e-6)
        rows = [0, 1]
        for level in range(1, max(len(s) + 1 for s in segments)):
            going = [j for j, b in enumerate(rows) if len(segments[b]) >= level]
            rows = [rows[j] for j in going]
            step = reader.next(
                going, [segments[b][level - 1] for b in rows], [labels[b][level] for b in rows]
            )
            for n, b in enumerate(rows):
                width = len(labels[b][level])
                assert torch.allclose(step.logp[n, :width], joint.logp[b, level, :width], atol=1e-6)
        for b, d in enumerate(decisions):
            for level in range(len(d.path)):
                text = prompts[b] + [t for seg in segments[b][:level] for t in seg]
                ids, mask = left_pad_ids([text], tok.pad_token_id)
                label_pad, valid = pad_label_ids([labels[b][level]], len(tok))
                plain = readout_from_ids(model, ids, mask, label_pad, valid).logp[0]
                width = len(labels[b][level])
                assert torch.allclose(plain, joint.logp[b, level, :width], atol=1e-6)


def test_the_joint_gradient_is_the_sum_of_the_levels_gradients(model, tok):
    _, decisions = act(model, tok, [250], seed=4)
    d = decisions[0]
    assert len(d.path) >= 2
    params = [p for p in model.parameters() if p.requires_grad]
    segments = [list(s.segment) for s in d.path[1:]]
    labels = [list(s.label_ids) for s in d.path]
    read = path_logprobs(model, [d.prompt_ids], [segments], [labels], tok.pad_token_id)
    joint = sum(read.logp[0, level, s.row] for level, s in enumerate(d.path))
    joint_grad = torch.autograd.grad(joint, params)
    summed = [torch.zeros_like(p) for p in params]
    for level, s in enumerate(d.path):  # each level alone: its own forward and backward
        text = d.prompt_ids + [t for seg in segments[:level] for t in seg]
        ids, mask = left_pad_ids([text], tok.pad_token_id)
        label_pad, valid = pad_label_ids([labels[level]], len(tok))
        logp = readout_from_ids(model, ids, mask, label_pad, valid).logp[0, s.row]
        for acc, g in zip(summed, torch.autograd.grad(logp, params, allow_unused=True)):
            acc += 0 if g is None else g
    for g, s in zip(joint_grad, summed):
        assert torch.allclose(g, s, atol=1e-6, rtol=1e-5)


def test_the_joint_gradient_by_hand():
    """Two levels with free logits: d log pi(a) / d z_l = onehot(row_l) - softmax(z_l)."""
    z1 = torch.log(torch.tensor([0.2, 0.3, 0.5])).requires_grad_()
    z2 = torch.log(torch.tensor([0.4, 0.6])).requires_grad_()
    levels = torch.stack(
        [
            torch.log_softmax(z1, -1),
            torch.cat([torch.log_softmax(z2, -1), torch.tensor([-math.inf])]),
        ]
    )[None]  # (1, 2, 3)
    rows = torch.tensor([[2, 1]])
    old = torch.log(torch.tensor([[0.5, 0.6]]))
    loss, metrics = decision_ppo_loss(levels, rows, old, torch.tensor([1.0]))
    loss.backward()
    # ratio 1, A = 1, one decision: loss = -pi/pi_old, its gradient -(onehot - p) per level
    assert torch.allclose(z1.grad, torch.tensor([0.2, 0.3, -0.5]), atol=1e-6)
    assert torch.allclose(z2.grad, torch.tensor([0.4, -0.4]), atol=1e-6)
    assert abs(float(metrics["policy_loss"]) + 1.0) < 1e-6


def _random_menus(batch=5, width=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, width + 1, (batch,), generator=gen)
    logits = torch.randn(batch, width, generator=gen)
    valid = torch.arange(width)[None] < sizes[:, None]
    logp = torch.log_softmax(logits.masked_fill(~valid, -math.inf), -1)
    rows = (torch.rand(batch, generator=gen) * sizes).long()
    return logp, rows


def test_a_one_level_path_gives_exactly_the_flat_loss():
    logp, rows = _random_menus()
    logp = logp.requires_grad_()
    old = logp.detach().gather(1, rows[:, None]).squeeze(1) + 0.05
    ref, _ = _random_menus(seed=1)
    ref = torch.where(logp.detach() == -math.inf, -math.inf, ref.nan_to_num(neginf=-3.0))
    adv = torch.tensor([1.0, -0.5, 0.3, 2.0, -1.0])
    mass = torch.tensor([0.9, 0.8, 0.7, 0.95, 0.5])
    coefs = PPOCoefs(ent_coef=0.01, kl_coef=0.1, label_mass_coef=0.2)
    flat, flat_metrics = decision_ppo_loss(
        logp, rows, old, adv, coefs=coefs, logp_ref=ref, label_mass=mass, normaliser=7
    )
    tree, tree_metrics = decision_ppo_loss(
        logp[:, None], rows[:, None], old[:, None], adv, coefs=coefs,
        logp_ref=ref[:, None], label_mass=mass, normaliser=7,
    )  # fmt: skip
    assert torch.equal(flat, tree)
    assert flat_metrics.keys() == tree_metrics.keys()
    for name in flat_metrics:
        assert torch.equal(flat_metrics[name], tree_metrics[name]), name


def test_the_path_estimates_of_entropy_and_kl_are_unbiased():
    """Sampled from pi_old, the weighted path sums have the exact joint entropy and KL of
    pi_theta as their mean, and the exact gradients as their mean gradient."""
    gen = torch.Generator().manual_seed(0)
    z1 = torch.randn(3, generator=gen).requires_grad_()  # level 1: three groups
    z2 = torch.randn(3, 4, generator=gen).requires_grad_()  # level 2 behind each group
    sizes = [4, 2, 3]
    mask = torch.arange(4)[None] < torch.tensor(sizes)[:, None]  # (3, 4)
    old1 = torch.log_softmax(torch.randn(3, generator=gen), -1)  # pi_old, another theta
    old2 = torch.log_softmax(torch.randn(3, 4, generator=gen).masked_fill(~mask, -math.inf), -1)
    ref1 = torch.log_softmax(torch.randn(3, generator=gen), -1)
    ref2 = torch.log_softmax(torch.randn(3, 4, generator=gen).masked_fill(~mask, -math.inf), -1)

    def levels(l1, l2, g):  # (1, 2, 4) for group g
        first = torch.cat([l1, torch.tensor([-math.inf])])
        return torch.stack([first, l2[g]])[None]

    lp1 = torch.log_softmax(z1, -1)
    lp2 = torch.log_softmax(z2.masked_fill(~mask, -math.inf), -1)
    entropy_mean = kl_grad_mean = kl_mean = 0.0
    coefs = PPOCoefs(ent_coef=1.0, kl_coef=0.0)
    for g in range(3):
        for r in range(sizes[g]):
            weight = float((old1[g] + old2[g, r]).exp())  # pi_old(path)
            rows = torch.tensor([[g, r]])
            olds = torch.stack([old1[g], old2[g, r]])[None]
            _, metrics = decision_ppo_loss(
                levels(lp1, lp2, g), rows, olds, torch.zeros(1), coefs=coefs,
                logp_ref=levels(ref1, ref2, g),
            )  # fmt: skip
            loss, _ = decision_ppo_loss(
                levels(lp1, lp2, g), rows, olds, torch.zeros(1),
                coefs=PPOCoefs(ent_coef=1.0), logp_ref=levels(ref1, ref2, g),
            )  # fmt: skip
            entropy_mean = entropy_mean + weight * -loss  # with A = 0 the loss is -H_hat
            kl_loss, _ = decision_ppo_loss(
                levels(lp1, lp2, g), rows, olds, torch.zeros(1),
                coefs=PPOCoefs(kl_coef=1.0), logp_ref=levels(ref1, ref2, g),
            )  # fmt: skip
            kl_grad_mean = kl_grad_mean + weight * kl_loss  # with A = 0 the loss is KL_hat
            kl_mean += weight * float(metrics["kl_ref"])
    joint = (lp1[:, None] + lp2).masked_fill(~mask, -math.inf)  # (3, 4) log pi_theta(a)
    probs = torch.where(mask, joint.exp(), 0.0)
    exact_h = -(probs * torch.where(mask, joint, 0.0)).sum()
    ref_joint = torch.where(mask, ref1[:, None] + ref2, 0.0)
    exact_kl = (probs * (torch.where(mask, joint, 0.0) - ref_joint)).sum()
    assert abs(float(entropy_mean.detach()) - float(exact_h.detach())) < 1e-5
    assert abs(kl_mean - float(exact_kl.detach())) < 1e-5
    for estimate, exact in ((entropy_mean, exact_h), (kl_grad_mean, exact_kl)):
        estimated = torch.autograd.grad(estimate, [z1, z2], retain_graph=True)
        for a, b in zip(estimated, torch.autograd.grad(exact, [z1, z2], retain_graph=True)):
            assert torch.allclose(a, b, atol=1e-5)


def test_greedy_and_sampled_walks_reach_legal_actions_and_count_their_forwards(model, tok):
    policy, decisions = act(model, tok, [330, 40], seed=5)
    levels = max(len(d.path) for d in decisions)
    assert policy.budget.forward_passes == levels  # one forward per level, both states
    assert policy.budget.decisions == 2
    for d, size in zip(decisions, [330, 40]):
        assert d.action in state(size, 5 + (size == 40))["legal_actions"]
        assert d.logp == pytest.approx(sum(s.logp for s in d.path), abs=1e-9)
        assert d.label_mass == pytest.approx(math.prod(s.label_mass for s in d.path))


def test_a_path_too_long_for_the_context_is_read_from_a_tree_that_fits(tok):
    """The 404-action ScienceWorld state under a context too short for the template
    tree's prompt and longest path but long enough for another of its refits: the policy
    reads it from the first refit that fits (LabelTree.refits), whole and exactly."""
    from rlid.decision.policy import tree_for_step
    from rlid.decision.tree_walk import longest_continuation
    from rlid.menus.prompt import render_decision_prompt
    from rlid.menus.tokens import encode_prompt

    fixture = Path(__file__).with_name("data") / "scienceworld_states.json"
    saved = max(json.loads(fixture.read_text())["states"], key=lambda s: len(s["legal_actions"]))
    info = {**saved, "afterstates": None}
    torch.manual_seed(0)
    small = build_tiny_model(tok, seed=0)
    policy = DecisionPolicy(small, tok, INTERFACE)
    tree = tree_for_step(info, INTERFACE, policy.labels, None, np.random.default_rng(0))

    def total(t):  # the prompt with t's first menu, and t's longest path after it
        prompt = render_decision_prompt(saved["observation"], info, t, INTERFACE, tok)
        return len(encode_prompt(tok, prompt)) + longest_continuation(t, INTERFACE, tok)

    totals = {(t.grouping, t.fanout): total(t) for t in [tree, *tree.refits()]}
    limit = min(totals.values())
    assert totals[(tree.grouping, tree.fanout)] > limit  # the template tree does not fit
    small.config.max_position_embeddings = limit
    (d,) = policy.act(
        [saved["observation"]], [info], [None], rng=np.random.default_rng(0),
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    chosen = (d.tree.grouping, d.tree.fanout)
    first_fit = next(k for k in totals if totals[k] <= limit)
    assert chosen == first_fit and totals[chosen] <= limit
    with torch.no_grad():
        logp, _, _ = policy.score([d])
    probs = logp[0, : d.num_rows].double().exp()
    assert d.num_rows == len(saved["legal_actions"]) and abs(float(probs.sum()) - 1) < 1e-6
    assert abs(float(logp[0, d.chosen]) - d.logp) < 1e-6


def test_a_state_too_long_for_whole_rows_is_read_with_rows_cut_to_a_few_words(model, tok):
    """tests/data/scienceworld_long_names.json: 1,371 legal actions of ScienceWorld
    (find-plant, easy preset) naming objects by their contents ("flower pot containing
    apple tree and flower and ... soil"). No tree of whole rows has its longest path
    within the tiny models' 1,024 positions, even on the shortest prompt; the refits end
    with block trees whose rows are cut to a few words, and the policy takes the first
    that fits: every path of it fits, and every action stays reachable."""
    from dataclasses import replace

    from rlid.decision.tree_walk import longest_continuation
    from rlid.menus import label_set_for, render_decision_prompt
    from rlid.menus.tokens import encode_prompt
    from rlid.menus.tree_prompt import tree_for_step

    saved = json.loads(
        (Path(__file__).with_name("data") / "scienceworld_long_names.json").read_text()
    )
    info = {**saved, "afterstates": None}
    interface = replace(INTERFACE, labels="auto")
    labels = label_set_for(interface, tok)
    bare = replace(interface, observation=False)
    tree = tree_for_step(info, interface, labels, None, np.random.default_rng(0))
    for candidate in [tree, *tree.refits()]:
        if candidate.row_words == 0:  # whole rows: too long however the tree is shaped
            prompt = render_decision_prompt(saved["observation"], info, candidate, bare, tok)
            later = longest_continuation(candidate, interface, tok)
            assert len(encode_prompt(tok, prompt)) + later > 1024
    policy = DecisionPolicy(model, tok, interface)
    d = policy.act(
        [saved["observation"]], [info], [None], rng=np.random.default_rng(0),
        generator=torch.Generator().manual_seed(0),
    )[0]  # fmt: skip
    assert d.tree.row_words > 0 and d.action in saved["legal_actions"]
    assert len(d.prompt_ids) + longest_continuation(d.tree, interface, tok) <= 1024
    assert sorted(d.tree.path_to(i) for i in range(1371)) and d.tree.menu.num_legal == 1371


def test_longest_continuation_is_the_longest_walk_and_its_memo_changes_nothing(tok, monkeypatch):
    """On the 404-action ScienceWorld state and refits of its tree: the longest path
    is exactly the largest sum of segment_ids over the paths a walk can take (counted by
    brute force), with or without the memo; a second call with the memo filled encodes
    nothing, and a memo filled by one tree gives the same counts for another. One long
    path (one_long_path) is a lower bound of the longest."""
    import rlid.decision.tree_walk as tree_walk
    from rlid.menus import label_set_for
    from rlid.menus.tree_prompt import tree_for_step

    fixture = Path(__file__).with_name("data") / "scienceworld_states.json"
    saved = max(json.loads(fixture.read_text())["states"], key=lambda s: len(s["legal_actions"]))
    info = {**saved, "afterstates": None}
    labels = label_set_for(INTERFACE, tok)
    tree = tree_for_step(info, INTERFACE, labels, None, np.random.default_rng(0))
    memo: dict[tuple[str, str], int] = {}
    for t in [tree, *tree.refits()][:4]:
        brute = max(
            sum(len(tree_walk.segment_ids(t, path[: j + 1], labels, INTERFACE, tok))
                for j in range(len(path)))
            for path in t.menu_paths()
        )  # fmt: skip
        assert tree_walk.longest_continuation(t, INTERFACE, tok) == brute
        assert tree_walk.longest_continuation(t, INTERFACE, tok, memo=memo) == brute
        assert 0 < tree_walk.one_long_path(t, INTERFACE, tok, memo=memo) <= brute
        # asked only whether the tree fits `beyond`: a path over it, or else the longest
        for beyond in (0, brute // 2, brute - 1):
            found = tree_walk.longest_continuation(t, INTERFACE, tok, beyond=beyond)
            assert beyond < found <= brute
        assert tree_walk.longest_continuation(t, INTERFACE, tok, beyond=brute) == brute
    assert t.depth > 1 and len(memo) > 10
    calls = []
    real = tree_walk.continuation_ids
    monkeypatch.setattr(
        tree_walk, "continuation_ids", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    assert tree_walk.longest_continuation(t, INTERFACE, tok, memo=memo) == brute
    assert calls == []  # every menu's count came from the memo
    tree_walk.longest_continuation(t, INTERFACE, tok)
    assert len(calls) == len([p for p in t.menu_paths() if p])  # without it: one per menu


def test_ruling_refits_out_by_one_path_picks_the_same_tree(model, tok, monkeypatch):
    """The 1,371-action state (no tree of whole rows fits): the refits that one long path
    already rules out are skipped without measuring every path, and the decision is the
    one the policy makes when it measures every refit in full (one_long_path stubbed to
    0: never rules one out), with fewer full measurements."""
    from dataclasses import replace

    import rlid.decision.policy as policy_module

    saved = json.loads(
        (Path(__file__).with_name("data") / "scienceworld_long_names.json").read_text()
    )
    info = {**saved, "afterstates": None}
    interface = replace(INTERFACE, labels="auto")
    real = policy_module.longest_continuation

    def decide(bound):
        calls = []
        monkeypatch.setattr(policy_module, "one_long_path", bound)
        monkeypatch.setattr(
            policy_module, "longest_continuation", lambda *a, **k: calls.append(1) or real(*a, **k)
        )
        policy = DecisionPolicy(model, tok, interface)
        d = policy.act(
            [saved["observation"]], [info], [None], rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(0),
        )[0]  # fmt: skip
        return d, len(calls)

    pruned, n_pruned = decide(policy_module.one_long_path)
    full, n_full = decide(lambda *a, **k: 0)
    key = lambda d: (d.tree.grouping, d.tree.fanout, d.tree.row_words, d.prompt_ids, d.action)  # noqa: E731
    assert key(pruned) == key(full) and pruned.logp == full.logp
    assert pruned.tree.row_words > 0 and n_pruned < n_full, (n_pruned, n_full)
