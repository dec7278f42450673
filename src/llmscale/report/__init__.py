"""What users read: the JSON documents (`documents`, `goodput_output`), terminal tables (`tables`, `plan_table`),
layouts as text (`text`), the offline HTML pages with inline SVG charts (`plan_html`, `allocate_html`, `svg`) and
the PNG charts (`png`, `goodput_charts`; numpy + zlib). Human units (GiB, days, MWh) exist only here and in
`llmscale.cli`.

May import: `llmscale.placement`, `llmscale.launch`, `llmscale.measure`, `llmscale.scaling`, `llmscale.validation`,
`llmscale.io`, `llmscale.search`, `llmscale.reliability`, `llmscale.cost`, `llmscale.layout`, `llmscale.specs`,
`llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
