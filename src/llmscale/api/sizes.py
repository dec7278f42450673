"""The job a plan prices at each job size it tries. A release rule may read the job's GPU count
(RuleCondition.gpus), so where such a rule holds at one size and not at another, the run settings are filled again
at that size: the plan prices every size as `explain --gpus N` would, and records the chosen size's settings."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from llmscale.api.placement import capped
from llmscale.io.releases import ProfileApplication
from llmscale.io.resolve import BatchDefault, Job, JobRequest, resolve
from llmscale.layout.profile import ReleaseLayouts
from llmscale.search.targets import SearchTarget
from llmscale.specs.train import TrainSpec

if TYPE_CHECKING:
    from llmscale.placement.fabric import Fabric


def varies_with_gpus(application: ProfileApplication | None, gpus: int) -> bool:
    """Whether a rule of the job's release on the GPU count holds differently for a job of `gpus` GPUs."""
    if application is None or application.recorded:
        return False
    facts = application.facts
    other = replace(facts, gpus=gpus)
    return any(rule.when.gpus is not None and facts.holds(rule.when) != other.holds(rule.when)
               for rule in application.profile.rules)


@dataclass
class SizedJobs:
    """`job` (resolved from `request`, on the nodes `fabric` leaves) at each job size a plan tries."""

    request: JobRequest
    job: Job
    fabric: Fabric
    _cache: dict[int, Job] = field(default_factory=dict)

    def __call__(self, gpus: int) -> Job:
        """The job at `gpus` GPUs: `job` itself unless a release rule on the GPU count holds differently there."""
        if not varies_with_gpus(self.job.profile, gpus):
            return self.job
        if gpus not in self._cache:
            sized = resolve(replace(self.request, batch=BatchDefault.CRITICAL, gpus=gpus))
            self._cache[gpus] = capped(sized, self.fabric, gpus)
        return self._cache[gpus]

    def search_inputs(self, gpus: int, target: SearchTarget) -> tuple[TrainSpec, SearchTarget]:
        """The run and the search target (its release's layout settings) a plan searches `gpus` GPUs with."""
        sized = self(gpus)
        if sized is self.job:
            return sized.train, target
        release = ReleaseLayouts(sized.profile.profile, sized.profile.facts) if sized.profile is not None else None
        return sized.train, replace(target, release=release)
