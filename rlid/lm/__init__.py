"""Language models: loading, starts, tokenizer, LoRA, devices and the forward plumbing.

* :mod:`rlid.lm.models`, :mod:`rlid.lm.model_folder`, :mod:`rlid.lm.tokenizer`,
  :mod:`rlid.lm.lora` — causal LMs from local folders, the tiny tokenizer, adapters.
* :mod:`rlid.lm.starts`, :mod:`rlid.lm.start_files`, :mod:`rlid.lm.pretrain` — the shipped
  start, the cached ones and the build that teaches them.
* :mod:`rlid.lm.readout`, :mod:`rlid.lm.tree_readout` — one forward, the label tokens'
  log-probs (flat menus and label trees' levels), padding, KV caches.
* :mod:`rlid.lm.hardware`, :mod:`rlid.lm.distributed`, :mod:`rlid.lm.optim` — devices and
  precision, processes (DDP / FSDP2), the optimizer step.
"""
