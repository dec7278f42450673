"""The resilient training runtime (issue 15): one hashed run config, tiered checkpoints on PyTorch Distributed
Checkpoint (DCP) and host shared memory, a trainer-side session that writes step records and heartbeats, the
launcher and its restarts, the fault journal. torch is an optional extra (`pip install 'llmscale[measure]'`): the
trainer-side modules (state, storage, memtier, restore, tiers, session, example) import it; the run-dir formats, the
journal, the hosts and everything the supervisor runs in its own process do not (tests/test_structure.py holds the
format modules to that).

 trainer side (inside each rank)
  config.py     the run YAML (RunConfig), its canonical SHA256, seeding from a saved plan
  files.py      the run directory's layout, step records, heartbeats (with their phase), atomic writes
  state.py      RNG and data-position state of one rank, as plain data
  storage.py    the storage tier: process-based DCP async_save into a fresh directory, commit, fallback on load
  manifests.py  the storage tier's directories: what is committed, verification, re-saves, quarantine, prune
  writer.py     DCP's checkpoint writer process: started before the first save, dies with its trainer, stopped
  memtier.py    the shared-memory tier under /dev/shm that outlives the trainer process
  restore.py    which tier a rank resumes from, and loading it
  tiers.py      when each tier saves, and the journal events of what happened
  auto.py       the 'auto' intervals from llmscale's two-tier goodput model and the measured save/restart costs
  session.py    the trainer-side API: resume, steps, timed phases, saves on their intervals
  entry.py      a training script's entry point: its exception to the journal, a refused input as one line
  chaos.py      fault-injection hook points inside a save (LLMSCALE_CHAOS), for the chaos suite
  example/      a small GPT trained on a shipped public-domain text (gloo on CPU, NCCL on GPU)
 supervisor side (`llmscale launch`)
  rundir.py     the run config copied and hash-checked into the run directory; the hosts kept after exclusions
  supervisor.py the attempts, their journal lines, the restart policy
  runlock.py    one launcher per run directory (flock on launch.lock, naming pid and host)
  relaunch.py   a launch ends what a dead launcher left running and journals its death
  interrupt.py  SIGINT/SIGTERM/SIGHUP stop the run: journaled, exit 130
  agent.py      one single-node attempt on torch's elastic agent (elastic_launch, c10d, a fresh rendezvous)
  multinode.py  one attempt across hosts: one torchrun per kept host through a node exec template
  nodes.py      node exec templates (local, ssh, ip netns exec, srun) and the node plan of a relaunch
  hosts.py      hostfiles and exclusion lists (hostfile and Slurm --exclude forms)
  watch.py      hang detection from heartbeats and fault attribution
  procs.py      processes by pid (/proc): descendants, a run directory's, killing and reaping them, the parent-death
                signal, the cgroup's OOM count
  reconcile.py  commits a killed trainer did not journal, found on disk after a failed attempt
  journal.py    the fault journal (journal.jsonl): event kinds, causes, append and tolerant read
  incidents.py  the summary behind `llmscale journal`
  verify.py     the chaos suite's verdict on a run directory (no checkpoint lost, no partial resume, bitwise curve)

May import: `llmscale.io`, `llmscale.reliability`, `llmscale.cost`, `llmscale.specs`, `llmscale.layout`,
`llmscale.measure`, `llmscale.errors`, `llmscale.units`, `llmscale` (the version).
"""
