"""Pipeline-parallel training plans: stage boundaries, per-stage actions, BPipe transfers.

    plan = plan_pipeline(model, batch, stages=4, micro_batches=8, budget="2GiB")
    PipelinePlan.from_json(plan.to_json())

A plan splits the model's layers (runtime/layers.py) into contiguous stages, picks each
layer's action (the single-device planner's: keep, recompute, memory-efficient forms...)
and which micro-batches' activations a pressured stage parks on a light one (BPipe),
minimising the step time of a simulated 1F1B schedule under a per-device budget of saved
activation bytes (Mist's co-optimisation of memory techniques and partition, on the
schedule's critical path with transfers overlapped), or of interleaved 1F1B (v virtual
stages per device) where that is faster within the budget.

    schedule.py            1F1B op order and the event simulation (step time, memory)
    interleaved_schedule.py interleaved 1F1B: torch's op order per rank, its simulation
    interleaved_plan.py    interleaved candidates: chunk boundaries and actions
    costs.py               per-layer, per-action costs; a stage's fastest fitting actions
    partition.py           boundaries and actions: exhaustive where small, else a DP
    bpipe.py               BPipe's pairs, parking choices, and when transfers pay
    planner.py             costs -> the best candidate -> the document (pure Python)
    document.py            PipelinePlan: the versioned JSON document and its table
    link.py                the point-to-point link: default, measure_link()
    make_pipeline_plan.py  plan_pipeline(): profile a model, then plan
    run.py                 run_pipeline(): one training step of a plan on torch.distributed
                           (gloo, one torchrun process per stage), and the same step in
                           one process to compare gradients with
    launch.py              the plan as the runner reads it; torchrun; a failed stage
    worker.py              one stage's process: its layers, actions, Schedule1F1B or
                           ScheduleInterleaved1F1B
    measured_stage.py      the PipelineStage that meters itself; a stage's results
    placement.py           CPU / GPU: backend (gloo / NCCL) and device per stage process
    stage_errors.py        a stage's failure as one line, and whose fault it was
    parking.py             BPipe's transfers between stages, overlapped with compute
    stage_meter.py         saved-activation bytes per micro-batch, as they live
    compiled_stage.py      the torch.compile peer: per stage, the largest
                           activation_memory_budget fraction whose saved bytes fit

    result = run_pipeline("gpt.py", plan.to_json(), "work/")           # PipelineResult
    compare_with_single_process("gpt.py", plan.to_json(), result)      # GradComparison

torch is imported only when plan_pipeline, measure_link or the runner is used.
"""
from ...lazy import lazy_names

__all__ = ["plan_pipeline", "PipelinePlan", "plan_from_costs", "simulate", "StageCost",
           "Transfer", "Cost", "LayerCosts", "ModelCosts", "Link", "default_link",
           "measure_link", "run_pipeline", "compare_with_single_process",
           "PipelineResult", "GradComparison", "stage_compile_fractions",
           "FractionChoice", "choose_fraction", "simulate_interleaved"]

__getattr__ = lazy_names(__name__, {
    "plan_pipeline": ".make_pipeline_plan", "PipelinePlan": ".document",
    "plan_from_costs": ".planner", "simulate": ".schedule", "StageCost": ".schedule",
    "Transfer": ".schedule", "Cost": ".costs", "LayerCosts": ".costs",
    "ModelCosts": ".costs", "Link": ".costs", "default_link": ".link",
    "measure_link": ".link", "run_pipeline": ".run",
    "compare_with_single_process": ".run", "PipelineResult": ".run",
    "GradComparison": ".run", "stage_compile_fractions": ".compiled_stage",
    "FractionChoice": ".compiled_stage", "choose_fraction": ".compiled_stage",
    "simulate_interleaved": ".interleaved"})
