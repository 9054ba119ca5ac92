"""Memory providers: hand-worked examples of what each renders."""

from __future__ import annotations

import pytest

from rlid.core.rollout import Sampling
from rlid.menus import MEMORY_PROVIDERS, LastKMemory, NoMemory, StructuredMemory, make_memory
from rlid.menus.memory import first_sentence, parse_location


def info(**extra):
    base = {"legal_actions": ["look"], "score": 0, "invalid_action": False}
    base.update(extra)
    return base


def test_registry_and_make_memory():
    assert set(MEMORY_PROVIDERS) == {"none", "last_k", "structured", "glam"}
    for kind, cls in MEMORY_PROVIDERS.items():
        memory = make_memory(kind, 4)
        assert type(memory) is cls and memory.kind == kind and memory.size == 4
    with pytest.raises(
        ValueError, match=r"valid kinds: \['glam', 'last_k', 'none', 'structured'\]"
    ):
        make_memory("episodic")
    with pytest.raises(ValueError, match="size must be an int >= 0"):
        make_memory("last_k", -1)


def test_no_memory_renders_nothing():
    memory = NoMemory()
    memory.update("You enter the studio.", "go east", info())
    assert memory.render() == ""


def test_first_sentence():
    assert first_sentence("You enter the studio. It is dark.") == "You enter the studio."
    assert first_sentence("-= Studio =-\nYou've entered a studio!  Nice.") == (
        "You've entered a studio!"
    )
    assert first_sentence("The dial reads 3.5 now") == "The dial reads 3.5 now"
    long = first_sentence("x" * 100)
    assert len(long) == 60 and long.endswith("...")


def test_last_k_keeps_the_last_k_transitions():
    memory = LastKMemory(2)
    assert memory.k == 2 and memory.render() == ""
    memory.update("You enter the studio. It is dark.", "go east", info())
    memory.update("You take the key.", "take key", info())
    memory.update(
        '"fly" is not a legal action here; nothing happens.', "fly", info(invalid_action=True)
    )
    assert memory.render() == "take key -> You take the key.; fly -> (invalid)"
    memory.reset()
    assert memory.render() == ""


def test_last_k_render_is_capped():
    memory = LastKMemory(5, max_chars=80)
    for i in range(5):
        memory.update(f"Step {i} happened. More.", f"action number {i}", info())
    text = memory.render()
    assert len(text) <= 80
    assert text.endswith("action number 4 -> Step 4 happened.")  # oldest dropped first


def test_parse_location_sources():
    assert parse_location("Anything.", {"location": "cellar"}) == "cellar"
    assert parse_location("-= Kitchen =-\nYou are in a kitchen.", {}) == "Kitchen"
    assert parse_location("You are now in the dusty attic. It is cold.", {}) == "dusty attic"
    assert parse_location("You roast the egg. You are in the shed. Exits: east.", {}) == "shed"
    assert parse_location("You take the key.", {}) is None
    assert parse_location("The key says you are in luck.", {}) is None


def test_structured_memory_places_inventory_and_failures():
    memory = StructuredMemory(2)
    memory.reset("-= Hall =-\nA long hall.", info(inventory=[]))
    assert memory.render() == "Visited: hall. Carrying: nothing."  # as "you will be in the hall"
    memory.update("-= Kitchen =-\nA kitchen.", "go east", info(inventory=[]))
    memory.update("You take the key.", "take key", info(inventory=["key"]))
    # a legal action after which nothing changed is a failure
    memory.update("You take the key.", "take key", info(inventory=["key"]))
    memory.update("That is locked.", "open door", info(invalid_action=True, inventory=["key"]))
    memory.update("-= Studio =-\nA studio.", "go north", info(inventory=["key"]))
    assert memory.render() == (
        "Visited: kitchen, studio (+1 more). Carrying: key. Failed: take key, open door."
    )
    # an action that later succeeds is no longer listed as failed
    memory.update("You open the door.", "open door", info(inventory=["key"], score=1))
    assert memory.render().endswith("Failed: take key.")


def test_structured_memory_revisits_move_to_the_end_and_without_inventory():
    memory = StructuredMemory(3)
    memory.update("You are in the hall.", "wait", {"location": "hall"})
    memory.update("x", "go east", {"location": "kitchen"})
    memory.update("y", "go west", {"location": "hall"})
    assert memory.render() == "Visited: kitchen, hall."
    memory.reset()
    assert memory.render() == ""


def test_structured_memory_render_is_capped():
    memory = StructuredMemory(3, max_chars=60)
    for i in range(3):
        memory.update(
            f"-= Room number {i} with a long name =-", f"go {i}", info(inventory=["a"] * 5)
        )
    text = memory.render()
    assert len(text) <= 60


class _RecordingPolicy:
    """Takes the first legal action and records the memory line each decision saw."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def act(self, observations, infos, memory_texts, *, rng, generator, greedy, temperature=1.0):
        from types import SimpleNamespace

        self.seen += list(memory_texts)
        return [SimpleNamespace(action=info["legal_actions"][0]) for info in infos]


def test_the_start_place_is_visited_in_rollouts_the_corpus_and_an_exported_agent():
    """Structured memory lists where an episode started from its first decision on,
    alike in training rollouts, the warm-start corpus and an exported agent."""
    import numpy as np
    import torch

    from rlid import envs
    from rlid.agents.agent import Agent
    from rlid.core.rollout import collect_episodes
    from rlid.lm.pretrain import PretrainConfig, transcripts
    from rlid.lm.tokenizer import build_tiny_tokenizer
    from rlid.menus import Interface

    start_obs, start_info = envs.make("keydoor", size=2).reset(seed=3)
    start = parse_location(start_obs, start_info)
    assert start == "bathroom"
    interface = Interface(memory="structured")

    policy = _RecordingPolicy()
    collect_episodes(
        [envs.make("keydoor", size=2, max_episode_steps=2)], policy, [3], [0],
        interface=interface, sampling=Sampling(np.random.default_rng(0), torch.Generator()),
    )  # fmt: skip
    assert policy.seen[0] == "Visited: bathroom."
    assert "bathroom" in policy.seen[1]  # kept after the first step

    agent_policy = _RecordingPolicy()
    agent = Agent(agent_policy, interface)
    agent.reset()
    agent.act(start_obs, start_info)
    assert agent_policy.seen == ["Visited: bathroom."]

    corpus = transcripts(
        PretrainConfig(envs=("keydoor",), episodes_per_env=1, max_episode_steps=1, memory="structured"),
        build_tiny_tokenizer(),
    )  # fmt: skip
    first = [line for line in corpus[0].prompt.split("\n") if line.startswith("Memory:")]
    assert first and first[0].startswith("Memory: Visited: ")
