"""The one cost model: parameter counts, FLOPs, activation and state memory, compute time by op class,
collectives on the network tiers, per-dimension traffic, pipeline schedules and the step breakdown — vectorized over
layouts, shared by `explain`, `plan` and `validate`. `cost.calibrate` puts a measured calibration profile in place
of datasheet numbers.

Every constant arrives as an argument (`specs.constants.Constants` and the specs); nothing here reads a file.
May import: `llmscale.layout`, `llmscale.specs`, `llmscale.errors`, `llmscale.units`.
"""
