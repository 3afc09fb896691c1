"""Reading TIR from Python: a generic node walk (TVM 0.27 exposes no Python post-order
visitor for TIR), the free variables of an expression, and an expression's dtype."""
from __future__ import annotations

_SKIP_FIELDS = frozenset({"span"})


def _fields(obj):
    info = getattr(type(obj), "__tvm_ffi_type_info__", None)
    while info is not None:
        for f in info.fields:
            if f.name not in _SKIP_FIELDS:
                yield f.name
        info = info.parent_type_info


def iter_nodes(root):
    """Every TIR object reachable from `root`, pre-order (containers are walked into,
    not yielded). Iterative, so deep loop nests cannot overflow Python's stack."""
    import tvm_ffi

    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, (tvm_ffi.Array, list, tuple)):
            stack.extend(reversed(list(node)))
            continue
        if isinstance(node, tvm_ffi.Map):
            stack.extend(reversed(list(node.values())))
            continue
        if not isinstance(node, tvm_ffi.Object):
            continue
        yield node
        children = []
        for name in _fields(node):
            try:
                children.append(getattr(node, name))
            except AttributeError:
                continue
        stack.extend(reversed(children))


def free_vars(expr) -> list:
    """The variables an expression uses (TIR `Var`s, deduplicated, in first-use order)."""
    from tvm import tirx

    return list(tirx.analysis.undefined_vars(expr))


def expr_dtype(e) -> str:
    """Expression dtype; TVM 0.27 exposes it as `ty`, older releases as `dtype`."""
    return str(e.ty) if hasattr(e, "ty") else str(e.dtype)
