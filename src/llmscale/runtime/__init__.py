"""The resilient training runtime (issue 15): one hashed run config, tiered checkpoints on PyTorch Distributed
Checkpoint (DCP) and host shared memory, a trainer-side session that writes step records and heartbeats, the
launcher and its restarts, the fault journal. torch is an optional extra (`pip install 'llmscale[measure]'`):
`config.py`, `journal.py`, `files.py` and `hosts.py` import without it; the other modules import torch.

  config.py    the run YAML (RunConfig), its canonical SHA256, seeding from a saved plan
  files.py     the run directory's layout and the step-record / heartbeat formats (docs in the contract)
  journal.py   the fault journal (journal.jsonl): events appended by the session and the supervisor
  state.py     RNG and data-position state of one rank, as plain data
  storage.py   the storage tier: process-based DCP async_save into step_N/, manifest, `latest`, fallback on load
  memtier.py   the shared-memory tier under /dev/shm that outlives the trainer process
  session.py   the trainer-side API: resume, steps, timed phases, saves on their intervals, journal events
  example/     a small GPT trained on a shipped public-domain text (gloo on CPU, NCCL on GPU)

May import: `llmscale.io`, `llmscale.reliability`, `llmscale.cost`, `llmscale.specs`, `llmscale.layout`,
`llmscale.measure`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
