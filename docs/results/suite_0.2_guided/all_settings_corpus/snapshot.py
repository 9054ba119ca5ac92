"""Save the model of an unfinished ``rlid pretrain`` build (as of its last checkpoint)
as a model directory, to evaluate it mid-build with ``rlid eval --model``:

    python snapshot.py runs/all12-1000 runs/all12-1000-step2000
"""

import sys
from pathlib import Path

from rlid.models import save_policy_model
from rlid.pretrain import load_unfinished

if len(sys.argv) != 3:
    sys.exit(__doc__)
model, tokenizer, info = load_unfinished(Path(sys.argv[1]))
save_policy_model(model, tokenizer, Path(sys.argv[2]))
print(
    f"step {info['step']}: mean loss of its last 200 steps {info['loss']:.3f}; saved to {sys.argv[2]}"
)
