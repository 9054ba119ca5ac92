#!/bin/bash
# Rebuild this page's report from the committed runs, training nothing: the suite's
# decision-PPO runs from the suite's start (recipe_pilots/runs, arm
# decision-ppo-marked300) and from the default start (suite_0.2_rerun/equal/runs, whose
# arm decision-ppo-equal has the config of examples/suite.toml's decision-ppo: the
# copies take that arm's run names), with this page's reference results.
#
#   bash docs/results/suite_marked/assemble.sh runs/suite_marked   # from the repository root
#
# rlid compare checks every copied run's recorded config against examples/suite.toml
# and refuses a run planned differently; it needs runs/tiny-marked300 to exist (build
# command: README "Suite").
set -euo pipefail
out=${1:?usage: assemble.sh OUT_DIR (a new directory)}
here=docs/results/suite_marked
if [ -e "$out" ]; then echo "assemble.sh: $out exists; give a new directory" >&2; exit 2; fi
mkdir -p "$out/runs"
cp "$here/comparison.json" "$out/"
cp -r "$here/reference" "$out/"
for d in docs/results/recipe_pilots/runs/decision-ppo-marked300-*; do cp -r "$d" "$out/runs/"; done
for d in docs/results/suite_0.2_rerun/equal/runs/decision-ppo-equal-*; do
  n=$(basename "$d"); cp -r "$d" "$out/runs/${n/decision-ppo-equal-/decision-ppo-}"
done
.venv/bin/rlid compare --config examples/suite.toml --arms decision-ppo-marked300,decision-ppo \
  --out "$out" --quiet
echo "report: $out/report.md"
