"""TensorRT build log and the sparse-tactic report (pure: no TensorRT needed to parse).

`BuildLog` collects builder messages to a file (and adapts to trt.ILogger); `sparse_layers`
reads engine-inspector JSON (TensorRT 10 and 11 schemas), `sparse_from_log` the builder's
"(Sparsity)" lines, so a build can say which layers picked 2:4 sparse tactics.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path

SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE")
_ELIGIBLE = re.compile(r"Layers eligible for sparse math:\s*(.*)$")
_PICKED = re.compile(r"picked sparse implementation for layers:\s*(.*)$")


class BuildLog:
    """TensorRT builder messages at `min_severity` or worse, kept in `.lines` and appended to
    `path` as they arrive; `.counts` counts every severity (also the filtered ones).
    Thread-safe (TensorRT may log from its own threads). Close it (or use `with`)."""

    def __init__(self, path, min_severity: str = "INFO"):
        self.path, self.min = Path(path), SEVERITIES.index(min_severity)
        self.lines: list[str] = []
        self.counts = dict.fromkeys(SEVERITIES, 0)
        self._lock = threading.Lock()
        self._file = open(self.path, "w", encoding="utf-8")

    def log(self, severity: str, msg: str) -> None:
        sev = severity if severity in SEVERITIES else "INFO"
        with self._lock:
            self.counts[sev] += 1
            if SEVERITIES.index(sev) <= self.min and not self._file.closed:
                line = f"[{sev}] {msg}"
                self.lines.append(line)
                self._file.write(line + "\n")
                self._file.flush()

    def trt_logger(self, trt):
        """A trt.ILogger forwarding here (keep it alive as long as the builder/runtime)."""
        log = self.log

        class _Logger(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)

            def log(self, severity, msg):
                log(getattr(severity, "name", str(severity)).rsplit(".", 1)[-1], str(msg))

        return _Logger()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> BuildLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sparse_from_log(lines: Sequence[str]) -> dict[str, list[str]]:
    """Layer names from TensorRT's '(Sparsity) Layers eligible for sparse math: a, b' and
    '(Sparsity) TRT inference plan picked sparse implementation for layers: b' INFO lines."""
    out: dict[str, list[str]] = {"eligible": [], "picked": []}
    for line in lines:
        for key, rx in (("eligible", _ELIGIBLE), ("picked", _PICKED)):
            m = rx.search(line)
            if m:
                out[key] += [n.strip() for n in m.group(1).split(",") if n.strip()]
    return out


def sparse_layers(info) -> dict:
    """Parse IEngineInspector.get_engine_information(LayerInformationFormat.JSON) (a str or
    the decoded dict). A layer counts as sparse when its TacticName mentions "sparse" or it
    has a truthy sparsity field. Tolerates LAYER_NAMES_ONLY output (layers as strings), the
    TensorRT 10 and 11 schemas and junk: {"layers": n, "sparse": [...], "tactics": {...}}
    plus "error" when the input was unusable."""
    if isinstance(info, (str, bytes)):
        try:
            info = json.loads(info)
        except ValueError as e:
            return {"layers": 0, "sparse": [], "tactics": {}, "error": f"not JSON: {e}"}
    layers = info.get("Layers") if isinstance(info, dict) else info
    if not isinstance(layers, list):
        why = info.get("error") if isinstance(info, dict) else None
        return {"layers": 0, "sparse": [], "tactics": {}, "error": why or "no Layers list"}
    sparse, tactics = [], {}
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict):
            continue
        name = str(layer.get("Name", f"layer{i}"))
        tactic = layer.get("TacticName")
        if isinstance(tactic, str) and tactic:
            tactics[name] = tactic
        if (isinstance(tactic, str) and "sparse" in tactic.lower()) or _sparsity_field(layer):
            sparse.append(name)
    return {"layers": len(layers), "sparse": sparse, "tactics": tactics}


def _sparsity_field(layer: dict) -> bool:
    for k, v in layer.items():
        if "sparsit" in k.lower() or k.lower().startswith("sparse"):
            if isinstance(v, str):
                return v.strip().lower() not in ("", "none", "false", "0", "dense", "disabled")
            return bool(v)
    return False
