"""A candidate: a sketch name plus its decisions. Frozen, hashable, JSON round-trip."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass


def _freeze(v):
    return tuple(v) if isinstance(v, list) else v


@dataclass(frozen=True)
class Candidate:
    sketch: str
    decisions: tuple[tuple[str, object], ...] = ()

    @staticmethod
    def make(sketch: str, decisions: dict) -> "Candidate":
        return Candidate(sketch, tuple(sorted((k, _freeze(v)) for k, v in decisions.items())))

    def values(self) -> dict:
        return dict(self.decisions)

    def to_json(self) -> dict:
        return {"sketch": self.sketch,
                "decisions": {k: list(v) if isinstance(v, tuple) else v for k, v in self.decisions}}

    @staticmethod
    def from_json(d: dict) -> "Candidate":
        if not isinstance(d, dict) or "sketch" not in d:
            raise ValueError("candidate JSON needs a 'sketch'")
        return Candidate.make(str(d["sketch"]), dict(d.get("decisions") or {}))

    def dumps(self) -> str:
        """Canonical JSON text (sorted keys, no spaces): what the database stores."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @property
    def key(self) -> str:
        return hashlib.sha256(self.dumps().encode()).hexdigest()[:24]
