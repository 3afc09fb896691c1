"""`--runner bundle:DIR`: measure on a machine that `autosched tune` cannot reach (a
batch queue, an air-gapped node, a GPU machine without a compiler), one round at a time.

A run of `autosched tune ... --runner bundle:DIR` first records every result the
measuring machine wrote into DIR (`python -m autosched.measure.bundle DIR`, see
measure_round.py), with that machine's fingerprint, skipping what the database already holds,
and teaches the search with them. Then, when the round in DIR is fully measured, the
loop proposes the next round: each task one batch (`--batch-size` candidates), within
what is left of `--trials`, which counts every candidate of every round of DIR. Each
batch is built here (with the reference kernels of a task whose reference data is
above `bundle_reference_mib`: it travels as a recipe, see recipe.py) and put
into DIR instead of being run: its futures are `base.Pending`, so the loop records
nothing of it and goes on with the other tasks; at the end the manifest is written,
and the run says in one line what to run next. While the round in DIR still has
candidates without results, no new round is built. The steps around the loop are the
methods every `base.Measurer` has: `check_run`, `collect`, `budget`, `finish_run`.

A bundle belongs to one set of tasks, one target and one set of versions (autosched,
TVM, search space): another command's bundle is refused, and so are results measured
on different machines.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys

from ...results import MeasureResult
from ...target import TargetSpec
from ..base import BuildArtifact, Pending
from ..build_run import BuildRunMeasurer
from ..local_runner import DEVICES
from ..reference.job import ReferenceFailed
from ..reference.store import ensure_reference
from ..settings import MeasureInput, MeasureSettings
from .baselines import baseline_results, job_ids, pending_baselines
from .format import (FORMAT, LIB, MANIFEST, RECIPES, REFERENCE, RESULTS, BundleError, BundleLock,
                     one_machine, pending, read_json, read_manifest, read_results, remove_partial,
                     write_json)
from .recipe import kernel_input, read_recipe, recipe_dir, recipe_of, reference_bytes, write_recipe

_OURS = {LIB, REFERENCE, RESULTS, RECIPES, MANIFEST, ".lock"}


def measure_command(directory: str) -> str:
    return f"python -m autosched.measure.bundle {directory}"


class BundleRunner:
    """The bundle directory as a runner (see the module docstring); holds DIR's lock
    from creation to `close()`."""

    concurrency = 1

    def __init__(self, settings: MeasureSettings, work_dir: str, scratch_dir: str | None,
                 directory: str):
        if not directory:
            raise BundleError("--runner bundle:DIR needs a directory, e.g. bundle:gpu-round")
        self.directory, self.settings = directory, settings
        self.work_dir, self.scratch_dir = work_dir, scratch_dir
        _prepare(directory)
        self._staged: list[dict] = []  # the round this run builds
        self._tasks: dict[str, object] = {}
        self._reduced: dict[str, object] = {}  # task key -> reduced task (None: ships arrays)
        self._recipes: dict[str, dict] = {}    # task key -> its recipe in DIR (this round)
        self._baselines: list[dict] = []       # baseline jobs for the round this run builds
        self._lock = BundleLock(directory).acquire()
        try:
            remove_partial(directory)
            self.manifest = read_manifest(directory)
            self.results = read_results(directory)
            self._pending = (pending(directory, self.manifest)
                             + pending_baselines(directory, self.manifest)
                             if self.manifest else [])
            self._remove_unlisted_libs()
        except BaseException:
            self._lock.release()
            raise

    # ------------------------------------------------------------ what DIR holds

    def hardware(self, target: TargetSpec) -> dict:
        """The machine that measured DIR's results; before any, the target's own."""
        return one_machine(self.results.values(), self.directory) or target.fingerprint

    def check(self, tasks, target: TargetSpec, versions: dict) -> None:
        """BundleError unless DIR is empty or a bundle of these tasks, target, versions."""
        m, d = self.manifest, self.directory
        if m is None:
            return
        if set(m["tasks"]) != {t.key for t in tasks}:
            theirs = ", ".join(sorted(t["name"] for t in m["tasks"].values()))
            raise BundleError(f"bundle {d} holds other tasks ({theirs}) than this command "
                              f"({', '.join(sorted(t.name for t in tasks))}); give these "
                              "tasks their own bundle directory")
        if m["target_key"] != target.key:
            raise BundleError(f"bundle {d} was built for target {m['target_key']}, not "
                              f"{target.key}; give each target its own bundle directory")
        for name in ("autosched", "tvm", "space"):
            if m["versions"].get(name) != versions.get(name):
                raise BundleError(f"bundle {d} was built with {name} version "
                                  f"{m['versions'].get(name)}, this is {versions.get(name)}; "
                                  "record it with the versions that built it, or use a new "
                                  "bundle directory")

    def baseline_results(self) -> list[dict]:
        """The result files of DIR's baseline jobs (baselines.py), every round's."""
        return baseline_results(self.results)

    def add_baseline_jobs(self, jobs: list[dict]) -> None:
        """Carry `jobs` (baselines.py, without ids) in the round this run writes; while
        DIR's round is being measured none is written, and the next run asks again."""
        self._baselines = [] if self._pending else list(jobs)

    def budget(self, trials: int) -> int:
        """Trials this run may put into a new round: none while DIR's round is being
        measured, else what `trials` leaves after every earlier round."""
        if self._pending:
            return 0
        return max(0, trials - (self.manifest["spent"] if self.manifest else 0))

    def import_results(self, db, tasks, target: TargetSpec, versions: dict, retry=()):
        """Record every result in DIR that the database lacks, with the measuring
        machine's fingerprint (`target` is measured on it), in one transaction; with
        `retry` (`--retry-failures` kinds) a newer result replaces such a failure.
        Returns (records added, {task key: [(Candidate, MeasureResult)] of every
        result in DIR}) so the search learns from all of them."""
        from search_space import Candidate

        from ...db import make_record

        by_key = {t.key: t for t in tasks}
        learned: dict[str, list] = {k: [] for k in by_key}
        newest: dict[tuple[str, str], dict] = {}  # a candidate measured again: its last
        for r in sorted(self.results.values(), key=lambda r: (r["round"], r["id"])):
            if r["task_key"] in by_key and r.get("kind") != "baseline":
                newest[(r["task_key"], r["candidate_key"])] = r
        records = []
        for key, task in by_key.items():
            scope = (key, target.key, target.hardware_key, versions)
            seen = db.measured_keys(*scope) - {
                f.candidate_key for f in (db.failed_records(*scope, retry) if retry else ())}
            for (task_key, cand_key), r in newest.items():
                if task_key != key:
                    continue
                cand = Candidate.from_json(r["candidate"])
                res = MeasureResult.from_json(r["result"])
                learned[key].append((cand, res))
                if cand.key not in seen:
                    rec = make_record(task, target, cand, res, versions, r["settings"])
                    records.append(dataclasses.replace(rec, provenance=dict(
                        rec.provenance, host=r["host"], user=r["user"], time=r["time"])))
        ids = db.add_records(records, replace_failures=retry) if records else []
        added = [rec.with_id(i) for rec, i in zip(records, ids) if i is not None]
        return added, learned

    # ------------------------------------------------------------ the next round

    def run(self, inputs: list[MeasureInput], artifacts: list[BuildArtifact]) -> list[Pending]:
        """Put a batch into the next round (built libraries and build failures): its
        futures are pending, nothing is measured here."""
        for inp, art in zip(inputs, artifacts, strict=True):
            cid = self._stage(inp.task, inp.candidate, None if art.ok else art.failure(),
                              art.build_seconds)
            if art.ok:
                self._staged[-1]["lib"] = f"{LIB}/{cid}.so"
                shutil.move(art.path, os.path.join(self.directory, LIB, f"{cid}.so"))
        return [Pending(self.directory)] * len(inputs)

    def settle(self, inputs: list[MeasureInput], results: list[MeasureResult]) -> list[Pending]:
        """Put results known without a build (limit-check failures) into the next
        round: they are recorded with the results of the machine that measures it."""
        for inp, result in zip(inputs, results, strict=True):
            self._stage(inp.task, inp.candidate, result, 0.0)
        return [Pending(self.directory)] * len(inputs)

    def _stage(self, task, candidate, known: MeasureResult | None, build_seconds: float) -> str:
        number = (self.manifest["round"] if self.manifest else 0) + 1
        cid = f"r{number}-{len(self._staged):04d}"
        self._add_reference(task)
        self._staged.append({
            "id": cid, "task_key": task.key, "task": task.name,
            "candidate": candidate.to_json(), "candidate_key": candidate.key, "lib": None,
            "known": None if known is None else known.to_json(),
            "build_seconds": build_seconds})
        return cid

    # ------------------------------------------------------------ reference data

    def _travels_as_recipe(self, task):
        """The reduced instance of a task whose reference data is above the bundle's
        limit (see recipe.py); None when its arrays travel."""
        if task.key not in self._reduced:
            from ..reference.device import reduced_task

            limit = self.settings.bundle_reference_mib * 2 ** 20
            self._reduced[task.key] = (reduced_task(task) if reference_bytes(task) > limit
                                       else None)
        return self._reduced[task.key]

    def recipe_builds(self, inputs: list[MeasureInput]) -> list[MeasureInput]:
        """The reference kernels to build with this batch, two for each task above the
        limit whose recipe DIR lacks (full size, then reduced); a current recipe in DIR
        is kept. What the measuring machine made from a recipe is dropped: each round
        travels without those arrays."""
        builds = []
        for inp in {i.task.key: i for i in inputs}.values():
            task, small = inp.task, self._travels_as_recipe(inp.task)
            if small is None or task.key in self._recipes:
                continue
            shutil.rmtree(os.path.join(self.directory, REFERENCE, task.key), ignore_errors=True)
            found = read_recipe(recipe_dir(self.directory, task.key))
            want = json.loads(json.dumps(recipe_of(task, small, inp.target)))
            if found == want:
                self._recipes[task.key] = found
            else:
                builds += [kernel_input(task, inp.target), kernel_input(small, inp.target)]
        return builds

    def add_recipes(self, builds: list[MeasureInput], artifacts: list[BuildArtifact]) -> None:
        """Write the recipe of each task whose reference kernels (`recipe_builds`) were
        built into `artifacts`; ReferenceFailed when one did not build."""
        for i in range(0, len(builds), 2):
            task, small = builds[i].task, builds[i + 1].task
            for what, art in ((task, artifacts[i]), (small, artifacts[i + 1])):
                if not art.ok:
                    raise ReferenceFailed(
                        f"the reference kernel of {what.name} for the bundle did not build: "
                        f"{art.error_msg}", "nothing was recorded; fix the cause and rerun")
            self._recipes[task.key] = write_recipe(
                self.directory, task, small, builds[i].target,
                [artifacts[i].path, artifacts[i + 1].path], self.work_dir, self.scratch_dir)

    def _add_reference(self, task) -> None:
        if task.key in self._tasks:
            return
        if self._travels_as_recipe(task) is not None:  # its recipe (or no run needs one)
            self._tasks[task.key] = task
            return
        ref = ensure_reference(task, self.work_dir, scratch_dir=self.scratch_dir)
        final = os.path.join(self.directory, REFERENCE, task.key)
        if read_json(os.path.join(final, "meta.json")) != ref.meta:
            tmp = f"{final}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(ref.directory, tmp)
            shutil.rmtree(final, ignore_errors=True)  # no round needs it: none is pending
            os.rename(tmp, final)
        self._tasks[task.key] = task

    def finish_round(self, tasks, target: TargetSpec, versions: dict, trials: int) -> str:
        """Write the manifest of the round this run built (if any); one line saying
        what to do next."""
        d, m = self.directory, self.manifest
        if self._pending:
            jobs = len(m.get("baselines", []))
            what = "candidates and baseline jobs" if jobs else "candidates"
            return (f"bundle {d}: {len(self._pending)} of {len(m['candidates']) + jobs} {what} "
                    f"of round {m['round']} are not measured yet; measure them with "
                    f"`{measure_command(d)}` on the target machine, then rerun this command")
        spent = m["spent"] if m else 0
        if not self._staged and not self._baselines:
            why = f"all {spent} trials" if spent >= trials else "every candidate the search found"
            return f"bundle {d}: {why} measured and recorded; nothing left to build"
        from ...versions import tvm_ffi_version

        number = (m["round"] if m else 0) + 1
        manifest = {
            "format": FORMAT, "round": number, "baselines": job_ids(number, self._baselines),
            "spent": spent + len(self._staged), "target": target.to_json(),
            "target_key": target.key, "device": DEVICES[target.kind],
            "versions": dict(versions, tvm_ffi=tvm_ffi_version()),
            "settings": self.settings.to_json(),
            "tasks": {t.key: {"name": t.name, "workload": t.workload, "args": dict(t.args),
                              "reference": f"{REFERENCE}/{t.key}",
                              "recipe": f"{RECIPES}/{t.key}" if t.key in self._recipes
                              else None} for t in tasks},
            "candidates": self._staged}
        write_json(os.path.join(d, MANIFEST), manifest)
        self._pending = list(self._staged) + manifest["baselines"]
        self.manifest, self._staged, self._baselines = manifest, [], []
        self._remove_unlisted_libs()
        count, jobs = len(manifest["candidates"]), len(manifest["baselines"])
        return (f"round {manifest['round']} written to {d}: {count} candidates of "
                f"{len({c['task_key'] for c in manifest['candidates']})} task(s)"
                + (f", {jobs} baseline jobs" if jobs else "") + ", "
                f"{_mib(d):.1f} MiB; measure it "
                f"with `{measure_command(d)}` on the target machine, then rerun this command "
                "to record the results and build the next round")

    def _remove_unlisted_libs(self) -> None:
        """Drop libraries and recipes no manifest names: an earlier round's, or a killed
        run's (a recipe being made this run is kept)."""
        current = self.manifest["candidates"] if self.manifest else []
        listed = {os.path.basename(c["lib"]) for c in current + self._staged if c["lib"]}
        folder = os.path.join(self.directory, LIB)
        for name in os.listdir(folder):
            if name not in listed:
                os.unlink(os.path.join(folder, name))
        tasks = self.manifest["tasks"].values() if self.manifest else ()
        recipes = {os.path.basename(t["recipe"]) for t in tasks if t.get("recipe")}
        folder = os.path.join(self.directory, RECIPES)
        for name in os.listdir(folder):
            if name not in recipes | set(self._recipes):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)

    def close(self) -> None:
        """Release DIR (a round never finished leaves libraries the next run removes)."""
        self._lock.release()


def _mib(directory: str) -> float:
    """What a copy of the bundle carries, in MiB."""
    total = 0
    for root, _, files in os.walk(directory):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total / 2 ** 20


def _prepare(directory: str) -> None:
    """Create DIR and its folders; BundleError for a path that cannot be a bundle."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise BundleError(f"--runner bundle:{directory}: not a directory")
    if os.path.isdir(directory):
        foreign = [n for n in os.listdir(directory) if n not in _OURS
                   and not n.startswith(".tmp-")]
        if foreign and not os.path.exists(os.path.join(directory, MANIFEST)):
            raise BundleError(f"--runner bundle:{directory}: the directory is neither empty "
                              f"nor a bundle (it holds {min(foreign)!r}); name a new "
                              "or empty directory")
    try:
        for sub in (LIB, REFERENCE, RESULTS, RECIPES):
            os.makedirs(os.path.join(directory, sub), exist_ok=True)
    except OSError as e:
        raise BundleError(f"--runner bundle:{directory}: cannot create it "
                          f"({e.strerror})") from None


class BundleMeasurer(BuildRunMeasurer):
    """Build here, measure there: a whole batch goes to the bundle at once (so
    `concurrency` is unbounded), and every future it returns is pending."""

    @property
    def concurrency(self) -> int:
        return sys.maxsize

    def measure(self, inputs: list[MeasureInput]) -> list[Pending]:
        """Build every input (with the reference kernels the round needs) and put all
        artifacts into the bundle's next round."""
        kernels = self.runner.recipe_builds(inputs)  # built with the batch, in parallel
        artifacts = self.builder.build(inputs + kernels) if inputs else []
        try:
            self.runner.add_recipes(kernels, artifacts[len(inputs):])
            return self.runner.run(inputs, artifacts[:len(inputs)])
        finally:
            for a in artifacts:
                if a.ok and os.path.exists(a.path):
                    os.unlink(a.path)

    def measure_stream(self, chunks):
        """Each chunk through `measure`; nothing overlaps (nothing runs here)."""
        for chunk in chunks:
            yield self.measure(chunk)

    def settle(self, inputs: list[MeasureInput], results: list[MeasureResult]) -> list[Pending]:
        return self.runner.settle(inputs, results)

    def check_run(self, tasks, target: TargetSpec, versions: dict) -> None:
        self.runner.check(tasks, target, versions)

    def collect(self, db, tasks, target: TargetSpec, versions: dict, retry=()):
        return self.runner.import_results(db, tasks, target, versions, retry)

    def budget(self, trials: int) -> int:
        return self.runner.budget(trials)

    def finish_run(self, tasks, target: TargetSpec, versions: dict, trials: int) -> str:
        return self.runner.finish_round(tasks, target, versions, trials)
