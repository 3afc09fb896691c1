"""PyTorch models as autosched tasks: load a model file, trace its training step, find
the operators autosched computes, tune them with one budget against torch's own time,
export the winners, and run the model on them through torch.compile.

    spec = autosched.model.load_model_file("gpt.py")               # ModelSpec
    backend = autosched.model.backend("gpt_kernels")               # export-model's DIR
    compiled = torch.compile(spec.model, backend=backend)
    print(autosched.model.explain(backend))                        # the decision per call

or by name: `torch.compile(model, backend="autosched", options={"library": DIR})`.
torch is imported only when these names are used.

Where things are:

    modelfile.py       model file -> ModelSpec (make_model, make_inputs, loss_fn)
    training_step.py   one forward + backward of a model (compute_loss, training_step)
    extract.py         model file -> ModelOps (operators with shapes, dtypes and counts)
    aten_match.py      one aten graph node -> the workload that computes it (OpMatch)
    conv_layouts.py    channels_last convolutions -> the NHWC workloads, fed permuted views
    graphs.py          dynamo + AOTAutograd: the aten graphs of a model, and a pass over each
    workloads.py  te_ops.py   the TE workloads of those operators and their torch twins
                       (te_conv.py: the convolutions in each layout, te_conv_nhwc.py: NHWC)
    dtypes.py          the dtypes generated (float32, float16, bfloat16) and how each computes
    baseline.py        torch's latency per task as a versioned database record
    choice.py          per task: torch ms, kernel ms, which one runs (model_ops.json)
    tuning.py          tune_model; export.py: export_model (what the CLI commands call)
    step_check.py      export's check of the whole compiled step against inductor alone
    compile_backend.py backend(): the torch.compile backend over an exported library
    named_backend.py   the same under the name "autosched" (the entry point torch finds)
    buckets.py         bucketed(): one captured CUDA graph per shape bucket

No submodule is named like a public name: importing one would shadow the lazily resolved
name on this package (so `training_step` and `extract` come from their own modules).
"""
from ..lazy import lazy_names

__all__ = ["AutoschedBackend", "BucketError", "Bucketed", "CudaGraphCapture", "ModelSpec",
           "backend", "backend_of", "bucketed", "compute_loss",
           "explain", "export_model", "load_model_file", "parameter_grads", "read_choices",
           "tune_model", "zero_grads"]

__getattr__ = lazy_names(__name__, {
    "AutoschedBackend": ".compile_backend", "backend": ".compile_backend",
    "explain": ".compile_backend", "backend_of": ".named_backend",
    "ModelSpec": ".modelfile", "load_model_file": ".modelfile",
    "compute_loss": ".training_step", "parameter_grads": ".training_step",
    "zero_grads": ".training_step",
    "tune_model": ".tuning", "export_model": ".export", "read_choices": ".choice",
    "bucketed": ".buckets", "Bucketed": ".buckets", "BucketError": ".buckets",
    "CudaGraphCapture": ".buckets"})
