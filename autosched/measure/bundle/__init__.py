"""`--runner bundle:DIR`: build here, measure on a machine `autosched tune` cannot
reach, record the results in a later run.

Where things are:
- runner.py: the building side. `BundleRunner` (DIR as a runner: the round being
  built, the results to import) and `BundleMeasurer` (the `measure.base.Measurer` of a
  bundle: its futures are pending; `check_run`, `collect`, `budget`, `finish_run` do
  the bundle's work around the tuning loop).
- measure_round.py (run as `python -m autosched.measure.bundle DIR`): the measuring
  side, with TVM's runtime and no compiler.
- format.py: the directory layout and files both sides share.
- baselines.py: a round's baseline jobs (torch's time per task of a model, for
  `tune-model --target cuda`), timed on the measuring side by a child that imports torch.
- recipe.py: reference data too large to travel, sent as reference kernels instead;
  target_reference.py makes it on the measuring machine.

This package imports nothing on its own: the measuring side must start without TVM.
"""
