"""``anatomy train``, ``anatomy evaluate`` and fine-tuning: the loop and what it reads and writes.

Modules, each imported by name (this package re-exports nothing, so importing one never imports the others):
``options`` (key=value words and presets), ``state`` (a run's state, new or resumed), ``tasks`` (lm, classify,
seq2seq), ``step`` (one optimizer step, shared with the claims lab), ``loop`` (the loop, top to bottom),
``checkpoint`` and ``run_dir`` (what goes on disk, and the guards around it), ``resuming``, ``finetune``,
``evaluate``, ``spikes`` (the loss-spike watch), ``fused_loss`` (head and cross-entropy in chunks) and
``distributed`` (torchrun).
"""
