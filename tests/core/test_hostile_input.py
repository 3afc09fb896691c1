"""Hostile op files and flags through the real CLI: each is refused before anything is
built, with exit code 2, one line on stderr, no traceback and no database written.

The CLI's `main(argv)` runs in this process (its exact exit code, stdout and stderr
captured at the file descriptors), except for the cases in OWN_PROCESS."""
from __future__ import annotations

import os

import pytest

HEADER = "from tvm import te\nimport autosched\n"

ADD = HEADER + """
@autosched.workload
def add(M=8, dtype="float32"):
    A = te.placeholder((M,), name="A", dtype=dtype)
    return A, te.compute((M,), lambda i: A[i] + A[i], name="B")
"""


def _workload(body: str, params: str = "M=8", decorator: str = "@autosched.workload") -> str:
    lines = "\n".join("    " + line for line in body.strip().splitlines())
    return f"{HEADER}\n{decorator}\ndef f({params}):\n{lines}\n"


def _host_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# name -> (op file source, extra flags, commands it is tried with, words the line says)
CASES = {
    "symbolic_shape": (_workload('n = te.var("n")\nA = te.placeholder((n,), name="A")\n'
                                 'return A, te.compute((n,), lambda i: A[i] * 2.0, name="B")'),
                       [], ("tune", "dry", "export"), ["symbolic", "--arg"]),
    "negative_arg": (ADD, ["--arg", "M=-5"], ("tune", "dry", "export"), ["M=-5"]),
    "zero_arg": (ADD, ["--arg", "M=0"], ("tune",), ["M=0", "between 1 and"]),
    "non_integer_arg": (ADD, ["--arg", "M=1.5"], ("tune",), ["M=1.5"]),
    "non_integer_variant": (_workload('A = te.placeholder((M,), name="A")\n'
                                      'return A, te.compute((M,), lambda i: A[i], name="B")',
                                      decorator='@autosched.workload(variants=[{"M": 2.5}])'),
                            [], ("tune",), ["non-integer"]),
    "int64_overflow_arg": (ADD, ["--arg", f"M={10 ** 30}"], ("tune", "export"),
                           ["64-bit", "M="]),
    "absurd_dimension": (ADD, ["--arg", f"M={1 << 41}"], ("tune",), [f"M={1 << 41}"]),
    "four_tib": (_workload('A = te.placeholder((M, M), name="A")\n'
                           'return A, te.compute((M, M), lambda i, j: A[i, j] + 1.0, name="B")',
                           params="M=1 << 20"),
                 [], ("tune", "dry", "export"), ["8.0 TiB", "memory"]),
    # each buffer alone fits, input and output together do not
    "together_exceed_memory": (ADD, ["--arg", f"M={int(_host_bytes() * 0.6) // 4}"],
                               ("tune",), ["inputs and outputs need", "memory"]),
    "float4_on_llvm": (ADD, ["--arg", "dtype=float4_e2m1fn"], ("tune", "dry"),
                       ["float4_e2m1fn", "smaller than a byte"]),
    "int4_on_llvm": (ADD, ["--arg", "dtype=int4"], ("tune",), ["int4"]),
    "float8_unnamed": (ADD, ["--arg", "dtype=float8"], ("tune", "export"),
                       ["float8", "cannot compile for llvm"]),
    "bfloat16_on_sm75": (ADD, ["--arg", "dtype=bfloat16", "--target",
                               '{"kind": "cuda", "arch": "sm_75"}'], ("dry",),
                         ["bfloat16", "sm_80"]),
    "float8_on_sm80": (ADD, ["--arg", "dtype=float8_e4m3fn", "--target",
                             '{"kind": "cuda", "arch": "sm_80"}'], ("dry", "export"),
                       ["float8_e4m3fn", "sm_89"]),
    "too_big_for_any_sm90": (ADD, ["--arg", f"M={200 << 28}", "--target",
                                   '{"kind": "cuda", "arch": "sm_90"}'], ("dry",),
                             ["GiB"]),
    "missing_module": (HEADER + "import autosched_no_such_module\n", [], ("tune", "export"),
                       ["'autosched_no_such_module'", "not installed"]),
    "missing_name": (HEADER + "from os import no_such_name\n", [], ("tune",),
                     ["ImportError", "no_such_name"]),
    "hangs_at_load": (HEADER + "while True:\n    try:\n        pass\n"
                      "    except Exception:\n        pass\n",
                      ["--load-timeout", "1"], ("tune", "export"), ["within 1 s"]),
    "hangs_in_workload": (_workload("while True:\n    pass"), ["--load-timeout", "1"],
                          ("dry",), ["workload 'f'", "within 1 s"]),
    "exits_at_load": (HEADER + "import sys\nsys.exit(3)\n", [], ("tune",), ["exit(3)"]),
    "library_raises_at_load": (HEADER + "import json\njson.loads('{')\n", [], ("tune",),
                               ["line 4", "JSONDecodeError"]),
    "returns_none": (_workload("return None"), [], ("tune", "export"), ["NoneType"]),
    "returns_string": (_workload('return "A", "B"'), [], ("tune",), ["TE tensors"]),
    "returns_only_inputs": (_workload('return te.placeholder((M,), name="A")'), [], ("tune",),
                            ["computed output"]),
    "same_tensor_twice": (_workload('A = te.placeholder((M,), name="A")\n'
                                    'return A, A, te.compute((M,), lambda i: A[i], name="B")'),
                          [], ("tune",), ["'A'"]),
    "hidden_input": (_workload('A = te.placeholder((M,), name="A")\n'
                               'B = te.placeholder((M,), name="B")\n'
                               'return A, te.compute((M,), lambda i: A[i] + B[i], name="C")'),
                     [], ("tune", "export"), ["'B'", "not returned"]),
    "workload_raises": (_workload("return f(M)"), [], ("tune",), ["RecursionError"]),
    "parameter_without_default": (_workload('return te.placeholder((M,), name="A")',
                                            params="M"), [], ("tune",), ["default"]),
    "two_workloads_one_name": (ADD + ADD.replace(HEADER, "").replace("def add", "def add2")
                               .replace("@autosched.workload", '@autosched.workload(name="add")'),
                               [], ("tune",), ["two workloads", "'add'"]),
    "workload_names_nothing": (ADD, ["--workload", ""], ("tune", "export"), ["unknown workload"]),
    "arg_of_no_parameter": (ADD, ["--arg", "N=4"], ("tune", "dry", "export"), ["'N'"]),
    "arg_without_value": (ADD, ["--arg", "M"], ("tune",), ["K=V"]),
    "negative_load_timeout": (ADD, ["--load-timeout", "-1"], ("tune", "export"),
                              ["--load-timeout"]),
}


# The load time limit is a SIGALRM timer that stands aside while another alarm is pending
# (test_the_load_limit_leaves_an_alarm_already_set_alone); in this process the test
# runner's per-test timeout is one, so these cases run `autosched` as a process of its own.
OWN_PROCESS = {"hangs_at_load", "hangs_in_workload"}


def _argv(command: str, op: str, flags: list[str], tmp_path) -> list[str]:
    db = ["--db", f"sqlite:///{tmp_path / 'db.sqlite'}"]
    if command == "export":
        return ["export", op, *flags, *db, "-o", str(tmp_path / "lib")]
    dry = ["--dry-run"] if command == "dry" else []
    return ["tune", op, *flags, *db, *dry, "--trials", "2", "--work-dir", str(tmp_path / "logs")]


@pytest.mark.parametrize("case, command", [(c, cmd) for c, (_, _, cmds, _) in CASES.items()
                                           for cmd in cmds])
def test_hostile_input_is_refused_before_anything_is_built(case, command, cli, cli_here,
                                                           write_op, tmp_path):
    source, flags, _, words = CASES[case]
    op = write_op(source, f"{case}.py")
    argv = _argv(command, op, flags, tmp_path)
    if case in OWN_PROCESS:
        proc = cli(*argv, cwd=tmp_path, timeout=120)
    else:
        proc = cli_here(*argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autosched: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not (tmp_path / "db.sqlite").exists()
    assert not (tmp_path / "logs" / "autosched.db").exists()
    assert not (tmp_path / "lib").exists()
    assert not (tmp_path / "logs" / "builds").exists()


def test_cases_cover_at_least_twenty_inputs_and_every_command():
    assert len(CASES) >= 20 and OWN_PROCESS < set(CASES)
    used = {cmd for _, _, cmds, _ in CASES.values() for cmd in cmds}
    assert used == {"tune", "dry", "export"}


@pytest.mark.slow
def test_the_good_file_of_the_cases_tunes(cli, write_op, tmp_path):
    """The cases fail for their hostile part only: the same file with sane flags works."""
    proc = cli(*_argv("tune", write_op(ADD), ["--arg", "M=64", "--arg", "dtype=bfloat16"],
                      tmp_path), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    stats = cli("db", "stats", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}", cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    assert "records" in stats.stdout


def test_the_load_limit_leaves_an_alarm_already_set_alone(tmp_path):
    """A caller's own SIGALRM timer (a test runner's timeout) survives loading an op
    file; the loader's limit applies only when no other alarm is pending."""
    import subprocess
    import sys

    code = (
        "import signal, sys\n"
        "from autosched.workload import load_tasks\n"
        "signal.signal(signal.SIGALRM, lambda *a: sys.exit(7))\n"
        "signal.setitimer(signal.ITIMER_REAL, 120)\n"
        f"load_tasks({str(tmp_path / 'op.py')!r}, timeout_s=0.5)\n"
        "left = signal.getitimer(signal.ITIMER_REAL)[0]\n"
        "print(int(60 < left <= 120), signal.getsignal(signal.SIGALRM).__name__)\n")
    (tmp_path / "op.py").write_text(ADD)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, check=True).stdout
    assert out.split() == ["1", "<lambda>"]
