"""Targets: what the user types (`llvm`, `cuda`, a JSON dict, TVM's `kind -key=value`
string or a TVM tag such as `nvidia/nvidia-a100`) -> a TVM target config plus the hardware
fingerprint that goes with every record.

A string or a tag is only another spelling of a JSON dict: `cuda -arch=sm_80` is
`{"kind": "cuda", "arch": "sm_80"}`, and a tag is the attributes TVM's tag registry gives
it (a CUDA tag: its arch and limits), so each resolves to exactly the config, key and
fingerprint of its JSON twin. TVM 0.27's own parser takes tags and bare kinds but refuses
the `-key=value` form, so that form is parsed here, typed by TVM's table of the kind's
attributes (`TargetKind.options_from_name`).

A record is only ever applied to the same target config and the same hardware
fingerprint (see `db/`), so both are canonical JSON with sorted keys.

`cuda` is the GPU this process would run on (device 0 after CUDA_VISIBLE_DEVICES, read
by `gpu_info` without a CUDA context here): its architecture (`sm_XY`, never the
arch-specific `sm_XYa`; see `gpu_info.arch_of`) and limits (threads, static shared
memory, registers per block, L2 size) set the target config, and all of it (the opt-in
shared memory maximum too), with the name, driver and memory, is the hardware
fingerprint. Without a GPU it is `sm_90` with
the limits every CUDA GPU allows without opting in.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass, replace
from functools import lru_cache

from .errors import UserError
from .gpu_info import read_gpu
from .threads import machine_cores

DEFAULT_CUDA_ARCH = "sm_90"
KNOWN_KINDS = ("llvm", "cuda")


@dataclass(frozen=True)
class TargetSpec:
    """A resolved target: TVM config, hardware fingerprint, and whether it is local."""

    kind: str
    config: dict
    fingerprint: dict
    has_local_device: bool

    @property
    def key(self) -> str:
        """Canonical JSON of the target config; records match on this exactly."""
        return json.dumps(self.config, sort_keys=True, separators=(",", ":"))

    @property
    def hardware_key(self) -> str:
        blob = json.dumps(self.fingerprint, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def tvm(self):
        return tvm_target(self.config)

    def to_json(self) -> dict:
        return {"kind": self.kind, "config": self.config, "fingerprint": self.fingerprint}

    def measured_on(self, fingerprint: dict) -> TargetSpec:
        """This target as measured on the machine `fingerprint` describes (an RPC
        server): records made with it carry that machine's fingerprint and key."""
        return self if fingerprint == self.fingerprint else replace(self, fingerprint=fingerprint)


def cpu_model() -> str:
    """This machine's CPU model name (what a record's hardware fingerprint names)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _num_cores() -> int:
    """The cores kernels run on here: physical ones (`threads.machine_cores`), the size
    the run workers' and kernel libraries' thread pools get."""
    return machine_cores()


@lru_cache(maxsize=1)
def _llvm_cpu() -> str:
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def cpu_fingerprint(mcpu: str) -> dict:
    """This machine's CPU, for records of candidates compiled for `mcpu`."""
    return {"device": "cpu", "model": cpu_model(), "mcpu": mcpu, "cores": _num_cores(),
            "machine": platform.machine()}


UNSAID = "unknown (the RPC server does not say)"


def server_fingerprint(target: TargetSpec, reading: dict) -> dict:
    """The fingerprint of an RPC server from what it reported of itself
    (`measure.rpc.session.read_hardware`). A CPU is named by LLVM's name for it (TVM's server
    does not expose the model name), with vendor, logical cores, architecture and memory
    in whole GiB; a GPU by name, architecture, SM count and memory. It never names this machine."""
    if target.kind == "cuda":
        version = str(reading.get("compute_version") or "")
        return {"device": "gpu", "name": reading.get("name") or UNSAID,
                "arch": "sm_" + version.replace(".", "") if version else UNSAID,
                "sm_count": reading.get("sm_count"), "memory": reading.get("memory")}
    triple = reading.get("triple")
    return {"device": "cpu", "model": reading.get("cpu") or UNSAID,
            "vendor": reading.get("vendor") or UNSAID,
            "mcpu": target.config.get("mcpu", "generic"), "cores": reading.get("cores"),
            "machine": triple.split("-", 1)[0] if triple else UNSAID,
            "memory_gib": reading.get("memory_gib")}


def local_gpu() -> dict | None:
    """The GPU this process would run on (device 0 after CUDA_VISIBLE_DEVICES): name,
    arch, driver, memory and its limits (`gpu_info.read_gpu`); None when there is none."""
    return read_gpu(os.environ.get("CUDA_VISIBLE_DEVICES"))


# The limits of the sm_90 default when no GPU is here (a dry run, an RPC or bundle run):
# what every CUDA GPU allows without opting in. Records made with them keep matching.
DEFAULT_CUDA_LIMITS = {"max_num_threads": 1024, "thread_warp_size": 32,
                       "max_shared_memory_per_block": 49152}
# Config keys of ours that TVM's Target does not know (it rejects unknown keys): the
# search space reads them, `tvm_target` leaves them out.
OWN_CONFIG_KEYS = (
    # the shared memory a kernel may opt in to with dynamic shared memory (`shared.dyn`,
    # sized at launch), above the 48 KiB static `__shared__` arrays are held to
    "max_dynamic_shared_memory_per_block",
    # the GPU's streaming multiprocessors: a persistent kernel's grid, the cost model's waves
    "sm_count",
)


def tvm_target(config: dict):
    """The TVM Target of a target config (our own keys left out)."""
    import tvm

    return tvm.target.Target({k: v for k, v in config.items() if k not in OWN_CONFIG_KEYS})


# target config key -> the GPU attribute it is set from
CONFIG_FROM_GPU = {"max_num_threads": "max_threads_per_block",
                   "thread_warp_size": "warp_size",
                   # Static shared memory (48 KiB), not the opt-in maximum (227 KiB on
                   # sm_90, in the fingerprint): TVM's CUDA code declares `__shared__`
                   # arrays, and ptxas rejects more than 48 KiB of those ("uses too much
                   # shared data"); only dynamic shared memory can opt in to more.
                   "max_shared_memory_per_block": "max_shared_memory_per_block",
                   "max_dynamic_shared_memory_per_block": "max_shared_memory_per_block_optin",
                   "registers_per_block": "max_registers_per_block",
                   "sm_count": "sm_count",
                   "l2_cache_size_bytes": "l2_cache_bytes"}


def _cuda_config(arch: str, gpu: dict | None = None) -> dict:
    cfg = {"kind": "cuda", "arch": arch, **DEFAULT_CUDA_LIMITS}
    for key, attribute in CONFIG_FROM_GPU.items():
        if gpu and attribute in gpu:
            cfg[key] = int(gpu[attribute])
    return cfg


_CUDA_ARCH = re.compile(r"^sm_\d+[af]?$")


def _resolve_cuda(config: dict | None) -> TargetSpec:
    gpu = local_gpu()
    cfg = _cuda_config(gpu["arch"] if gpu else DEFAULT_CUDA_ARCH, gpu)
    if config:
        cfg.update(config)
    if not _CUDA_ARCH.match(str(cfg.get("arch"))):
        raise UserError(f"--target: cuda arch {cfg.get('arch')!r} is not of the form sm_XY "
                        "(e.g. sm_90, or sm_90a for Hopper's arch-specific features)")
    if gpu:
        fp = {"device": "gpu", **gpu}
    else:
        fp = {"device": "gpu", "name": "none (no local GPU)", "arch": cfg["arch"]}
    return TargetSpec("cuda", cfg, fp, gpu is not None)


def _resolve_llvm(config: dict | None) -> TargetSpec:
    cfg = {"kind": "llvm", "mcpu": _llvm_cpu(), "num-cores": _num_cores()}
    if config:
        cfg.update(config)
    return TargetSpec("llvm", cfg, cpu_fingerprint(cfg.get("mcpu", "generic")), True)


TARGET_FORMS = ("llvm, cuda, a JSON dict with a 'kind', 'KIND -key=value ...' "
                "(e.g. 'cuda -arch=sm_80') or a TVM tag (e.g. nvidia/nvidia-a100; "
                "tvm.target.list_tags() lists them)")
# Attributes of a tag that are not part of a target config: `keys`, `tag` and `host` are
# TVM's bookkeeping, and `max_threads_per_block` repeats `max_num_threads`, which is the
# limit our configs and the search space use.
_TAG_LEFT_OUT = ("kind", "keys", "tag", "host", "max_threads_per_block")


def _tvm_options(kind: str) -> dict:
    """TVM's attributes of target kind `kind` -> their type names ("int", "Array<str>")."""
    from tvm.target import TargetKind

    return {str(k): str(v) for k, v in TargetKind.options_from_name(kind).items()}


def _plain(value):
    """A TVM attribute value as JSON: arrays as lists, the rest as it is."""
    if isinstance(value, str):
        return str(value)  # not TVM's own string type
    if isinstance(value, (bool, int, float)):
        return value
    return [str(v) for v in value]


def _tag_config(name: str) -> dict | None:
    """The target config of TVM's tag `name` (None if TVM has no such tag)."""
    import tvm

    if name not in tvm.target.list_tags():
        return None
    exported = dict(tvm.target.Target(name).export())
    kind = str(exported["kind"])
    if kind not in KNOWN_KINDS:
        raise UserError(f"--target: TVM tag {name!r} is a {kind} target; autosched tunes "
                        f"{' and '.join(KNOWN_KINDS)} targets")
    options = _tvm_options(kind)
    return {"kind": kind, **{str(k): _plain(v) for k, v in exported.items()
                             if k not in _TAG_LEFT_OUT and k in options}}


_TRUTH = {"true": True, "1": True, "false": False, "0": False}


def _typed(kind: str, key: str, value: str | None, type_name: str):
    """One `-key=value` of a target string as the type TVM declares for it (a bare
    `-key` is a boolean's true)."""
    if type_name == "bool" and value is None:
        return True
    if value is None:
        raise UserError(f"--target: -{key} of {kind} needs a value (-{key}=VALUE)")
    if type_name == "bool" and value.lower() in _TRUTH:
        return _TRUTH[value.lower()]
    if type_name == "int" and re.fullmatch(r"[+-]?\d+", value):
        return int(value)
    if type_name == "str":
        return value
    if type_name.startswith("Array<"):
        return [v for v in value.split(",") if v]
    if type_name not in ("bool", "int"):
        raise UserError(f"--target: -{key} of {kind} cannot be given in a target string; "
                        "use the JSON form")
    wanted = "an integer" if type_name == "int" else "true or false"
    raise UserError(f"--target: -{key} of {kind} takes {wanted}, not {value!r}")


def parse_target_string(text: str) -> dict:
    """`KIND -key=value ...` or `TAG [-key=value ...]` -> the equivalent JSON config (only
    what the string says; `resolve_target` fills in the rest as for JSON)."""
    words = text.split()
    head, rest = words[0], words[1:]
    if head in KNOWN_KINDS:
        config = {"kind": head}
    else:
        config = _tag_config(head)
        if config is None:
            raise UserError(f"--target: unknown target or TVM tag {head!r}; use {TARGET_FORMS}")
    options, given = _tvm_options(config["kind"]), set()
    for word in rest:
        m = re.fullmatch(r"--?([A-Za-z_][\w.-]*)(?:=(.*))?", word)
        if m is None:
            raise UserError(f"--target: {word!r} in {text!r} is not of the form -key=value")
        key, value = m.group(1), m.group(2)
        if key not in options or key in ("kind", "tag", "host"):
            raise UserError(f"--target: {config['kind']} has no attribute {key!r}; TVM's are: "
                            f"{', '.join(k for k in options if k not in ('kind', 'tag', 'host'))}")
        if key in given:
            raise UserError(f"--target: -{key} is given twice in {text!r}")
        given.add(key)
        config[key] = _typed(config["kind"], key, value, options[key])
    return config


def resolve_target(text: str) -> TargetSpec:
    """`llvm` (this CPU), `cuda` (the local GPU, else sm_90), a JSON dict, a TVM target
    string (`cuda -arch=sm_80`) or a TVM tag (`nvidia/nvidia-a100`); a string or a tag
    resolves as its JSON equivalent does."""
    text = (text or "").strip()
    if text.startswith("{"):
        try:
            config = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"--target: invalid JSON ({e.msg})") from None
        kind = config.get("kind") if isinstance(config, dict) else None
    elif text in KNOWN_KINDS:
        kind, config = text, None
    elif text:
        config = parse_target_string(text)
        kind = config["kind"]
    else:
        kind = None
    if kind not in KNOWN_KINDS:
        raise UserError(f"unknown target {text!r}; use {TARGET_FORMS}")
    spec = _resolve_llvm(config) if kind == "llvm" else _resolve_cuda(config)
    try:
        spec.tvm()
    except Exception as e:  # TVM rejects an attribute of the dict
        raise UserError(f"--target: TVM rejects {spec.config}: {str(e).splitlines()[0]}") from None
    return spec
