"""Seeing a run (issue 16): the step profile measured beside llmscale's prediction, the Prometheus endpoint, the
local dashboard. Everything reads the run directory's files (the contract's formats, llmscale.runtime.files and
journal); torch is needed only to calibrate a prediction (predict.py runs the probe's host micro-benchmarks).

  rundir.py    the run directory as one snapshot: step records per rank (last attempt wins), journal, config
  predict.py   the predicted step breakdown for the run's own model, layout and host (RUN_DIR/prediction.json)
  profile.py   per step and rank: data / compute / comm / checkpoint / idle beside the prediction; slowest rank
  metrics.py   a prometheus-client Collector over the run directory, served on a port
  dashboard/   a page (HTML/JS/CSS in package data, no CDN) and its JSON API on the standard library's http.server

May import: `llmscale.api`, `llmscale.report`, `llmscale.runtime`, `llmscale.measure`, `llmscale.io`,
`llmscale.cost`, `llmscale.specs`, `llmscale.layout`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
