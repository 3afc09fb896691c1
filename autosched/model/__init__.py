"""PyTorch models as autosched tasks: trace a model, find the operators autosched
computes, tune them with one budget against torch's own time, export the winners.

    extract.py     model file -> ModelOps (operators with shapes, dtypes and counts)
    aten_match.py  one aten graph node -> the workload that computes it (OpMatch)
    graphs.py      dynamo + AOTAutograd: the aten graphs of a model, and a pass over each
    workloads.py   the TE workloads of those operators and their torch twins
    baseline.py    torch's latency per task as a versioned database record
    choice.py      per task: torch ms, kernel ms, which one runs (model_ops.json)
    tuning.py      tune_model / export_model, what the CLI commands call

The backend that runs the result is `autosched.torch.backend`.
"""
