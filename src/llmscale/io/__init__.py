"""The way in, and the only package below the applications that reads files: YAML/JSON files and their one-line
errors (`files`), the built-in catalog and its constants (`catalog`), Hugging Face `config.json` (`hfconfig`),
calibration-profile files (`calibration`), saved plan and explain documents (`saved`), Megatron-LM launch flags
read back (`megatron_args`), torchtitan recipes read back (`torchtitan_recipe`, `torchtitan_syntax`) and the
names both sides share (`torchtitan_names`), and the one resolver that
turns names, files, spec objects, flags and saved plans into a validated job (`resolve`).

May import: `llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`, `llmscale.specs`,
`llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
