"""The way in: reading YAML/JSON files and turning their problems into one-line errors (`files`), the
built-in catalog and its constants (`catalog`), Hugging Face `config.json` (`hfconfig`), the SHA256 of canonical
inputs (`fingerprint`), calibration-profile files (`calibration`), and the one resolver that turns names, files,
flags and saved plans into a validated job (`resolve`).

Only this package (and the applications above it) reads files. May import: `llmscale.search`,
`llmscale.reliability`, `llmscale.cost`, `llmscale.layout`, `llmscale.specs`, `llmscale.errors`, `llmscale.units`.
"""
