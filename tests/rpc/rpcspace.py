"""A test-only search space for matmul-like tasks on llvm: the default sketch plus a
two-level tiling of every loop, so a 64^3 matmul has a few hundred distinct candidates.
The tests use it while the real llvm rule set offers only the default schedule."""
from __future__ import annotations


class TileSketch:
    name = "test_tile"

    def apply(self, sch, decide) -> None:
        block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
        pairs = [sch.split(loop, list(decide.tile(f"t{n}", int(sch.get(loop).extent), 2)))
                 for n, loop in enumerate(sch.get_loops(block))]
        sch.reorder(*[p[0] for p in pairs], *[p[1] for p in pairs])


class TilingRules:
    def sketches(self, task, target):
        from search_space.sketch import DefaultSketch

        return [DefaultSketch(), TileSketch()]

    def check(self, mod, target):
        return None


def tiling_space(task, target):
    from search_space import SearchSpace

    return SearchSpace(task, target, TilingRules())


def real_space_is_rich(task, target) -> bool:
    """Whether the real rule set offers more than the default schedule."""
    from search_space import generate_space

    return set(generate_space(task, target).sketches) != {"default"}


def install() -> None:
    """Make the tuning loop of this process use the tiling space."""
    import autosched.tuner as tuner

    tuner.generate_space = tiling_space
