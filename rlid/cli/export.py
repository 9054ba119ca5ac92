"""``rlid export RUN OUT``: a trained run as a self-contained agent directory."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_export(args: argparse.Namespace) -> int:
    # lazy: exporting imports torch; `rlid export --help` must not
    from rlid.agents.agent import export_run

    out = export_run(Path(args.run), Path(args.out), merge_lora=args.merge_lora)
    print(f"exported {args.run} to {out} (model, tokenizer, interface.json, README.md)")
    return 0


def add_export_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a run's agent as a Hugging Face model dir with interface.json and a model card",
        description=(
            "Export the last checkpoint of RUN to the new directory OUT: save_pretrained model "
            "and tokenizer, interface.json (prompt interface and label set) and README.md (a "
            "model card). Load it with rlid.agents.load_agent(OUT) or "
            "rlid.agents.load_policy(OUT)."
        ),
    )
    p.add_argument("run", type=Path, help="run directory (from `rlid train`)")
    p.add_argument("out", type=Path, help="new directory to write")
    p.add_argument("--merge-lora", action="store_true", help="merge LoRA adapters into the weights")
    p.set_defaults(func=_cmd_export)
