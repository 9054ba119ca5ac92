"""Regenerate ``corpus.txt``, the training text of the tiny tokenizer.

The corpus is synthetic text-game material: decision-plane prompts (labelled
menus ending in ``Answer:``), token-plane prompts (ending in ``Command:``),
TextWorld-like room descriptions, game feedback and recipes, plus the phrases
of TextWorld's own text grammars (markup stripped), so descriptions of real
TextWorld games stay short in tokens. It only shapes
which byte pairs the tokenizer merges; it is not pretraining data.

Run ``python rlid/data/make_corpus.py`` from the repository root. The output is
deterministic (fixed seed); changing it changes the tiny tokenizer's vocabulary
and so invalidates any warm-started tiny model in the cache.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import textworld

SEED = 0
TARGET_CHARS = 130_000

ROOMS = [
    "kitchen",
    "studio",
    "bureau",
    "bedroom",
    "bathroom",
    "pantry",
    "cellar",
    "basement",
    "attic",
    "garage",
    "garden",
    "backyard",
    "patio",
    "porch",
    "shed",
    "office",
    "library",
    "study",
    "lounge",
    "parlor",
    "chamber",
    "closet",
    "vault",
    "workshop",
    "laundry",
    "corridor",
    "hallway",
    "livingroom",
    "cottage",
    "cave",
    "tower",
    "dungeon",
    "temple",
]
CONTAINERS = [
    "chest",
    "box",
    "cabinet",
    "cupboard",
    "drawer",
    "case",
    "safe",
    "locker",
    "crate",
    "basket",
    "fridge",
    "toolbox",
    "trunk",
    "wardrobe",
    "dresser",
    "portmanteau",
]
SUPPORTERS = [
    "table",
    "counter",
    "shelf",
    "stove",
    "bench",
    "rack",
    "workbench",
    "desk",
    "nightstand",
    "sofa",
    "bed",
]
DOORS = ["door", "gate", "hatch", "portal"]
ITEMS = [
    "key",
    "coin",
    "lamp",
    "candle",
    "book",
    "cookbook",
    "note",
    "letter",
    "map",
    "ring",
    "sword",
    "shield",
    "lantern",
    "rope",
    "hat",
    "coat",
    "glove",
    "passkey",
    "latchkey",
    "knife",
    "apple",
    "banana",
    "carrot",
    "potato",
    "tomato",
    "onion",
    "lettuce",
    "cheese",
    "egg",
    "milk",
    "bread",
    "fish",
    "tuna",
    "garlic",
    "parsley",
    "cilantro",
    "gem",
    "card",
    "mug",
    "cup",
    "bowl",
    "plate",
]
FOOD = [
    "apple",
    "banana",
    "carrot",
    "potato",
    "tomato",
    "onion",
    "lettuce",
    "cheese",
    "egg",
    "fish",
    "tuna",
    "garlic",
]
ADJ = [
    "red",
    "green",
    "blue",
    "yellow",
    "white",
    "black",
    "brown",
    "purple",
    "golden",
    "silver",
    "wooden",
    "iron",
    "rusty",
    "old",
    "new",
    "small",
    "big",
    "heavy",
    "shiny",
    "dusty",
    "fancy",
    "plain",
    "ordinary",
]
DIRS = ["north", "south", "east", "west"]
GOALS = (
    "find the {item} and put it in the {cont}",
    "open the {cont} and take the {item}",
    "unlock the {adj} {door} and go {dir}",
    "eat the {food}",
    "cook a meal using the recipe in the cookbook",
    "find the treasure",
    "collect the coin",
    "take the {adj} {item} from the {sup}",
    "go to the {room} and drop the {item}",
)
FEEDBACK = (
    "You open the {cont}.",
    "You close the {cont}.",
    "You take the {item}.",
    "You take the {item} from the {sup}.",
    "You drop the {item}.",
    "You put the {item} on the {sup}.",
    "You insert the {item} into the {cont}.",
    "You unlock the {door} with the key.",
    "You eat the {food}. Not bad.",
    "You slice the {food}.",
    "You chop the {food}.",
    "You fry the {food}.",
    "You roast the {food}.",
    "That's not a verb I recognise.",
    "You can't see any such thing.",
    "You can't go that way.",
    "The {cont} is locked.",
    "You are carrying nothing.",
    "You are carrying: a {item} and a {adj} {item2}.",
    "Your score has just gone up by one point.",
    "You have won the game!",
    "You have lost the game.",
    "Nothing happens.",
    "It is already open.",
)
AFTERSTATES = (
    "you will be in the {room}",
    "you will carry the {item}",
    "the {cont} will be open",
    "the {cont} will be closed",
    "the {door} will be unlocked",
    "the {item} will be on the {sup}",
    "the {item} will be in the {cont}",
    "the {food} will be sliced",
    "the {food} will be chopped",
    "the {food} will be cooked",
    "you will have eaten the {food}",
    "nothing changes",
)
ACTIONS = (
    ("go {dir}", "you will be in the {room}"),
    ("take {item}", "you will carry the {item}"),
    ("take {item} from {sup}", "you will carry the {item}"),
    ("open {cont}", "the {cont} will be open"),
    ("close {cont}", "the {cont} will be closed"),
    ("unlock {door} with key", "the {door} will be unlocked"),
    ("drop {item}", "the {item} will be on the floor"),
    ("put {item} on {sup}", "the {item} will be on the {sup}"),
    ("insert {item} into {cont}", "the {item} will be in the {cont}"),
    ("eat {food}", "you will have eaten the {food}"),
    ("slice {food} with knife", "the {food} will be sliced"),
    ("chop {food} with knife", "the {food} will be chopped"),
    ("cook {food} with stove", "the {food} will be cooked"),
    ("examine {cont}", "nothing changes"),
    ("look", "nothing changes"),
    ("inventory", "nothing changes"),
)
LABELS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]


def fill(template: str, rng: random.Random) -> str:
    """Fill a template's slots with random game words."""
    return template.format(
        item=rng.choice(ITEMS),
        item2=rng.choice(ITEMS),
        cont=rng.choice(CONTAINERS),
        sup=rng.choice(SUPPORTERS),
        door=rng.choice(DOORS),
        food=rng.choice(FOOD),
        adj=rng.choice(ADJ),
        dir=rng.choice(DIRS),
        room=rng.choice(ROOMS),
    )


def room_text(rng: random.Random) -> str:
    """A short TextWorld-like room description."""
    room = rng.choice(ROOMS)
    parts = [f"You are in the {room}."]
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.4:
            state = rng.choice(["closed", "open", "locked"])
            parts.append(f"You see a {state} {rng.choice(ADJ)} {rng.choice(CONTAINERS)}.")
        elif kind < 0.8:
            parts.append(
                f"On the {rng.choice(SUPPORTERS)} you can see a {rng.choice(ADJ)} "
                f"{rng.choice(ITEMS)}."
            )
        else:
            parts.append(f"There is a {rng.choice(ITEMS)} here.")
    exits = rng.sample(DIRS, rng.randint(1, 3))
    parts.append(f"Exits: {', '.join(exits)}.")
    return " ".join(parts)


def memory_text(rng: random.Random) -> str:
    """A last-k transitions memory line."""
    steps = []
    for _ in range(rng.randint(0, 3)):
        action, after = rng.choice(ACTIONS)
        steps.append(f"{fill(action, rng)} -> {fill(after, rng)}")
    return "; ".join(steps) if steps else "nothing yet"


def decision_prompt(rng: random.Random) -> str:
    """A decision-plane prompt with a labelled menu and an answer label."""
    k = rng.choice([2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 26])
    rows = [
        f"{LABELS[i]}) {fill(action, rng)} -> {fill(after, rng)}"
        for i, (action, after) in enumerate(rng.choices(ACTIONS, k=k))
    ]
    lines = [
        f"Goal: {fill(rng.choice(GOALS), rng)}",
        f"Memory: {memory_text(rng)}",
        f"Now: {room_text(rng)}",
        "Actions:",
        *rows,
        f"Answer: {rng.choice(LABELS[:k])}",
    ]
    return "\n".join(lines)


def command_prompt(rng: random.Random) -> str:
    """A token-plane prompt that ends in a written command."""
    action, _ = rng.choice(ACTIONS)
    lines = [
        f"Goal: {fill(rng.choice(GOALS), rng)}",
        f"Memory: {memory_text(rng)}",
        f"Now: {room_text(rng)}",
        f"Command: {fill(action, rng)}",
    ]
    return "\n".join(lines)


def recipe_text(rng: random.Random) -> str:
    """A cooking-game recipe."""
    foods = rng.sample(FOOD, rng.randint(1, 3))
    verbs = ["slice", "chop", "dice", "fry", "roast", "grill"]
    lines = [
        "Recipe #1",
        "Gather all following ingredients and follow the directions to prepare this tasty meal.",
        "Ingredients:",
        *(f"  {rng.choice(ADJ)} {food}" for food in foods),
        "Directions:",
        *(f"  {rng.choice(verbs)} the {food}" for food in foods),
        "  prepare meal",
    ]
    return "\n".join(lines)


def transcript(rng: random.Random) -> str:
    """A few steps of game feedback, as a play transcript would show them."""
    lines = []
    for _ in range(rng.randint(2, 5)):
        action, _ = rng.choice(ACTIONS)
        lines.append(f"> {fill(action, rng)}")
        lines.append(fill(rng.choice(FEEDBACK), rng))
        if rng.random() < 0.3:
            lines.append(f"-= {rng.choice(ROOMS).capitalize()} =-")
            lines.append(room_text(rng))
    if rng.random() < 0.2:
        lines.append(f"*** The End *** You scored {rng.randint(0, 9)} out of {rng.randint(1, 9)}")
    return "\n".join(lines)


def textworld_phrases() -> list[str]:
    """Phrases of the installed TextWorld's text grammars, markup stripped, deduplicated."""

    root = Path(textworld.__file__).parent
    by_content = {path.read_text(encoding="utf-8"): path for path in root.glob("**/*.twg")}
    phrases: list[str] = []
    for text in sorted(by_content):
        for line in text.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            for alt in line.split(":", 1)[1].split(";"):
                alt = re.sub(r"\[[^\]]*\]|#[^#]*#|\([^)]*\)|[|<>]", " ", alt)
                alt = re.sub(r"\s+", " ", alt).strip()
                if len(alt) > 2 and re.search("[a-z]", alt):
                    phrases.append(alt)
    return list(dict.fromkeys(phrases))


def main() -> None:
    rng = random.Random(SEED)
    makers = [decision_prompt, decision_prompt, command_prompt, transcript, recipe_text]
    chunks: list[str] = []
    total = 0
    while total < TARGET_CHARS:
        chunk = rng.choice(makers)(rng)
        chunks.append(chunk)
        total += len(chunk) + 2
    phrases = textworld_phrases()
    rng.shuffle(phrases)
    chunks.append("\n".join(phrases))
    out = Path(__file__).with_name("corpus.txt")
    out.write_text("\n\n".join(chunks) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(chunks) - 1} synthetic chunks, {len(phrases)} TextWorld phrases)")


if __name__ == "__main__":
    main()
