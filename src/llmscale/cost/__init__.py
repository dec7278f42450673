"""The one cost model, vectorized over layouts and shared by `explain`, `plan` and `validate`: parameter counts
(`params`), FLOPs (`flops`), what a batch of layouts derives before any cost (`derived`), activation and state
memory (`activations`, `memory`), compute time by op class (`compute`), collectives on the network tiers
(`collectives`), traffic per parallel dimension (`traffic`), pipeline schedules (`pipeline`) and the step breakdown
(`step`); `calibrate` puts a measured profile in place of datasheet numbers. Every constant arrives as an argument
(`specs.constants.Constants` and the specs); nothing here reads a file.

May import: `llmscale.layout`, `llmscale.specs`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
