"""The resilient training runtime (issue 15): hashed run config, tiered checkpoints (DCP and /dev/shm), trainer-side
session, launcher and restarts, fault journal; torch only on the trainer side. Modules: docs/runtime.md#runtime-package.

May import: `llmscale.io`, `llmscale.reliability`, `llmscale.cost`, `llmscale.specs`, `llmscale.layout`,
`llmscale.measure`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
