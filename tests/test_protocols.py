"""Published evaluation protocols (rlid.config.benchmark_protocols): each preset's settings
are its source's, the env options it relies on behave as upstream does, and it is
settable from the CLI, TOML and Python.

Upstream packages (``scienceworld`` 1.2.3, ``textworld_express`` 1.1.0) are played in
lockstep where they can be; GLAM's prompt is checked against its ``generate_prompt``,
transcribed below.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest

from rlid import envs
from rlid.config.benchmark_protocols import PROTOCOLS, get_protocol
from rlid.config.run import TrainConfig, config_from_values
from rlid.envs import jvm
from rlid.envs.registry import SPLIT_SIZE
from rlid.envs.twx.specs import GAMES
from rlid.menus import Interface, make_memory
from rlid.menus.prompt import render_token_prompt


class PlainTokenizer:
    chat_template = None


# ------------------------------------------------------------------------ the presets
def test_glam_babyai_is_glams_setting():
    """flowersteam/Grounding_LLMs_with_online_RL: BabyAI's own step limits (levelgen.py
    RoomGridLevel.reset), fresh games (train_language_agent.py seeds, no pool), GLAM's
    prompt with nbr_obs=3 (llm_ppo_agent.py), 1,000 test episodes on MixedTrainLocal and
    MixedTestLocal, sampled (campaign/Mixed_tests_no-change/GFlan-T5_large.slurm,
    post-training_tests.py)."""
    config = TrainConfig(env="babyai-text", protocol="glam-babyai")
    assert config.env_options["max_episode_steps"] is None  # BabyAI's own limit
    assert config.env_options["num_games"] == SPLIT_SIZE
    interface = config.interface
    assert (interface.layout, interface.memory, interface.memory_size) == ("glam", "glam", 3)
    assert not interface.afterstates
    protocol = get_protocol("glam-babyai")
    sets = protocol.eval_sets_for(config.env_options)
    assert [(s.env_options["level"], s.episodes) for s in sets] == [
        ("MixedTrainLocal", 1000),
        ("MixedTestLocal", 1000),
    ]
    assert all(s.env_options["split"] == "heldout" for s in sets)  # new seeds
    assert protocol.greedy is False
    goto = protocol.eval_sets_for({"level": "GoToLocal"})
    assert [s.env_options["level"] for s in goto] == ["GoToLocal"]
    with pytest.raises(ValueError, match="trains on level in MixedTrainLocal, GoToLocal"):
        TrainConfig(
            env="babyai-text", protocol="glam-babyai", env_options={"level": "PutNextLocal"}
        )


def test_glam_babyai_limits_are_babyais_and_games_fresh():
    """BabyAI's max_steps = room_size^2 x rooms x navigations (babyai levelgen.py): 64 for
    GoToLocal, 128 for a PutNext mission of GLAM's mixture (two navigations)."""
    pytest.importorskip("minigrid")
    from rlid.envs.babyai.levels import ROOM_SIZE

    options = get_protocol("glam-babyai").env_options_for("babyai-text", {"level": "GoToLocal"})
    env = envs.make("babyai-text", **options)
    seeds = set()
    for seed in range(200):
        _, info = env.reset(seed=seed)
        seeds.add(info["game_seed"])
        assert env.max_episode_steps == ROOM_SIZE**2
    assert len(seeds) >= 198  # fresh games: no 16-game pool
    putnext = get_protocol("glam-babyai").env_options_for(
        "babyai-text", {"level": "MixedTrainLocal", "task": "any"}
    )
    env = envs.make("babyai-text", **{**putnext, "task": "putnext"})
    env.reset(seed=0)
    assert env.max_episode_steps == 2 * ROOM_SIZE**2


def glam_generate_prompt(goal, subgoals, deque_obs, deque_actions):
    """GLAM's prompt, transcribed from flowersteam/Grounding_LLMs_with_online_RL
    experiments/agents/base_agent.py ``generate_prompt``."""
    ldo = len(deque_obs)
    lda = len(deque_actions)
    head_prompt = "Possible action of the agent:"
    for sg in subgoals:
        head_prompt += " {},".format(sg)  # noqa: UP032 (as upstream writes it)
    head_prompt = head_prompt[:-1]
    g = " \n Goal of the agent: {}".format(goal)  # noqa: UP032 (as upstream writes it)
    obs = ""
    for i in range(ldo):
        obs += " \n Observation {}: ".format(i)  # noqa: UP032 (as upstream writes it)
        for d_obs in deque_obs[i]:
            obs += "{}, ".format(d_obs)  # noqa: UP032 (as upstream writes it)
        obs += "\n Action {}: ".format(i)  # noqa: UP032 (as upstream writes it)
        if i < lda:
            obs += "{}".format(deque_actions[i])  # noqa: UP032 (as upstream writes it)
    return head_prompt + g + obs


def test_glam_layout_writes_glams_prompt_step_by_step():
    """The token/scoring planes' prompt under glam-babyai, followed by the command's
    leading space, is GLAM's ``generate_prompt`` text at every step of an episode (its
    deques: ``deque(maxlen=3)`` observations, ``deque(maxlen=2)`` actions,
    llm_ppo_agent.py)."""
    pytest.importorskip("minigrid")
    interface = TrainConfig(env="babyai-text", protocol="glam-babyai").interface
    env = envs.make("babyai-text", level="GoToLocal", split="heldout", afterstates=False)
    obs, info = env.reset(seed=3)
    memory = make_memory(interface.memory, interface.memory_size)
    memory.reset(obs, info)
    obs_queue: deque = deque(maxlen=3)
    acts_queue: deque = deque(maxlen=2)
    obs_queue.append(obs.split(", ") if obs else [])
    for action in ["turn left", "go forward", "go forward", "turn right", "pick up", "toggle"]:
        ours = render_token_prompt(obs, info, interface, PlainTokenizer(), memory.render())
        theirs = glam_generate_prompt(info["objective"], info["legal_actions"], obs_queue,
                                      acts_queue)  # fmt: skip
        assert ours + " " == theirs
        obs, _, terminated, truncated, info = env.step(action)
        memory.update(obs, action, info)
        acts_queue.append(action)
        obs_queue.append(obs.split(", ") if obs else [])
        if terminated or truncated:
            break


def test_scienceworld_paper_is_the_papers_setting():
    """ScienceWorld paper Table 2 and cognitiveailab/drrn-scienceworld@91b9265
    (beaker/batchSubmission.py: --simplification_str=easy --env_step_limit=100;
    train-scienceworld.py evaluate_episode: 101 commands; vec_env.py: random train and
    test variations, the API's valid actions unfiltered; beakerScorer.py: failures
    clipped to 0 in the average)."""
    config = TrainConfig(env="scienceworld", protocol="scienceworld-paper")
    options = config.env_options
    assert options["simplifications"] == "easy"
    assert (options["tick_limit"], options["max_episode_steps"]) == (100, 101)
    assert options["num_games"] == SPLIT_SIZE and options["heldout_variations"] == "test"
    assert options["raw_scores"] is True
    assert (options["ambiguity"], options["reset_task"]) == ("ask", True)
    assert config.interface == Interface()  # the paper prescribes no prompt
    protocol = get_protocol("scienceworld-paper")
    assert protocol.greedy and "clipped" in protocol.scores
    assert [s.env_options["split"] for s in protocol.eval_sets_for(options)] == ["heldout"]


def test_twx_paper_is_the_packages_setting():
    """cognitiveailab/TextWorldExpress: GameGenerator.scala mk* defaults for every game,
    textworld_express.py envStepLimit=100 (the 101st action ends), whole folds
    (PythonInterface.scala: train 0-999, test 20000-20999)."""
    protocol = get_protocol("twx-paper")
    assert protocol.env_ids == tuple(f"twx-{game}" for game in GAMES)
    for game, (_, _, params) in GAMES.items():
        options = protocol.env_options_for(f"twx-{game}", {})
        assert {name: options[name] for name in params} == {
            name: option.default for name, option in params.items()
        }
        assert options["max_episode_steps"] == 101 and options["num_games"] == SPLIT_SIZE
        assert options["heldout_fold"] == "test" and "raw_scores" not in options  # an option
    with pytest.raises(ValueError, match="sets numLocations=11"):
        protocol.env_options_for("twx-coin", {"numLocations": "4"})


# ------------------------------------------------------------- settable, and checked
def test_a_protocol_is_set_from_python_toml_and_flags(tmp_path: Path):
    from rlid.cli.main import build_parser
    from rlid.config.run import config_from_args

    python = TrainConfig(env="scienceworld", protocol="scienceworld-paper")
    toml = tmp_path / "run.toml"
    toml.write_text('env = "scienceworld"\nprotocol = "scienceworld-paper"\n')
    args = build_parser("train").parse_args(["train", "--config", str(toml), "--out", "x"])
    assert config_from_args(args) == python
    args = build_parser("train").parse_args(
        ["train", "--env", "scienceworld", "--protocol", "scienceworld-paper", "--out", "x"]
    )
    assert config_from_args(args) == python
    assert python.to_dict()["protocol"] == "scienceworld-paper"
    assert TrainConfig.from_record(python.to_dict()).env_options == python.env_options
    assert "protocol" not in TrainConfig().to_dict()  # runs without one record as before


def test_contradictions_are_one_clear_line():
    with pytest.raises(ValueError, match="protocol scienceworld-paper sets tick_limit=100"):
        config_from_values(
            {
                "env": "scienceworld",
                "protocol": "scienceworld-paper",
                "env_options": {"tick_limit": "50"},
            }  # fmt: skip
        )
    with pytest.raises(ValueError, match="is for babyai-text, not env 'keydoor'"):
        TrainConfig(env="keydoor", protocol="glam-babyai")
    with pytest.raises(ValueError, match="sets the interface's memory='glam'"):
        TrainConfig(env="babyai-text", protocol="glam-babyai",
                    interface=Interface(memory="structured"))  # fmt: skip
    with pytest.raises(ValueError, match="unknown protocol 'dqn'; valid: "):
        get_protocol("dqn")
    assert set(PROTOCOLS) == {"glam-babyai", "scienceworld-paper", "twx-paper"}


def test_cli_refuses_a_bad_protocol_with_exit_2(capsys):
    from rlid.cli.main import main

    with pytest.raises(SystemExit) as stop:
        main(["eval", "--protocol", "nope", "--reference", "random"])
    assert stop.value.code == 2
    code = main(["eval", "--reference", "random"])
    assert code == 2
    assert "--reference plays under a protocol" in capsys.readouterr().err


def test_eval_protocol_plays_the_references_on_each_set(capsys):
    pytest.importorskip("minigrid")
    from rlid.cli.main import main

    code = main(["eval", "--protocol", "glam-babyai", "--reference", "walkthrough",
                 "--reference", "random", "--episodes", "4", "--quiet"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith(("walkthrough", "random"))]
    assert len(rows) == 4 and "MixedTestLocal" in out
    walk = [line.split() for line in rows if line.startswith("walkthrough")]
    assert all(float(row[-4]) == 1.0 for row in walk)  # the bot's walkthrough always wins


# ------------------------------------------------- env options the protocols rely on
@pytest.fixture(scope="module")
def scienceworld_engine():
    engine = jvm.acquire(jvm.SCIENCEWORLD)
    yield engine
    jvm.release(engine)


def test_tick_limit_ends_episodes_where_scienceworld_does(scienceworld_engine):
    """scienceworld 1.2.3 scienceworld.py ``step``: done once ``getNumMoves() >
    envStepLimit``; ticks per command from ActionHandler.doQueuedActionsTakeTime and
    AgentInterface.step (look around and inventory 0, wait 11, wait1 2). Played in
    lockstep with the package."""
    upstream_module = pytest.importorskip("scienceworld")
    options = get_protocol("scienceworld-paper").env_options_for(
        "scienceworld",
        {"task": "find-plant", "split": "heldout", "game_seed": 0, "walkthrough": False},
    )
    env = envs.make("scienceworld", **options)
    _, info = env.reset(seed=0)
    assert info["ticks"] == 0
    upstream = upstream_module.ScienceWorldEnv("find-plant", envStepLimit=100)
    try:
        upstream.load("find-plant", info["variation"], "easy")
        upstream.reset()
        look_at = next(a for a in info["legal_actions"] if a.startswith("look at "))
        script = ["look around", "inventory", "wait1", look_at] + ["wait"] * 12
        played = 0
        for action in script:
            _, _, terminated, truncated, info = env.step(action)
            _, _, done, theirs = upstream.step(action)
            played += 1
            assert info["ticks"] == theirs["moves"]
            assert (terminated or truncated) == done
            if done:
                break
        assert truncated and info["ticks"] > 100 and played < len(script)
    finally:
        upstream.close()


def test_twx_episodes_end_at_the_101st_action_as_the_package_does():
    """textworld_express 1.1.0 textworld_express.py ``step``: done once ``numMoves >
    envStepLimit`` (100), counted before the action is appended: the 101st action."""
    upstream_module = pytest.importorskip("textworld_express")
    engine = jvm.acquire(jvm.TEXTWORLD_EXPRESS)
    upstream = upstream_module.TextWorldExpressEnv(envStepLimit=100)
    try:
        upstream.load("coin", "")
        upstream.reset(seed=0, gameFold="train", generateGoldPath=False)
        theirs = 0
        done = False
        while not done:
            _, _, done, _ = upstream.step("look around")
            theirs += 1
        options = get_protocol("twx-paper").env_options_for("twx-coin", {"game_seed": 0})
        env = envs.make("twx-coin", **options)
        env.reset(seed=0)
        ours, over = 0, False
        while not over:
            _, _, terminated, truncated, _ = env.step("look around")
            ours, over = ours + 1, terminated or truncated
        assert ours == theirs == 101
        env.close()
    finally:
        upstream.close()
        jvm.release(engine)
