"""Reference data: what every candidate's outputs are checked against.

Where things are:
- data.py: the on-disk layout (`Reference`, `load_reference`, `write_reference`) and
  the seeded inputs (`random_inputs`, `poison`);
- store.py: `ensure_reference(task, work_dir)`, load or compute and publish;
- job.py: the reference worker that computes expected outputs (role ``reference``);
- device.py: where they are computed (the CPU, or the device once checked at a
  reduced shape: `plan`, `reduced_task`);
- check.py: the dtype-aware comparison rule (`compare`, `tolerance_for`).

The modules import one way: check <- data <- device <- job <- store.
"""
