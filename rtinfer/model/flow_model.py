"""A flow-matching or diffusion policy's model directory (docs/policies.md), validated up front.

    graphs.json   {"format": "rtinfer-graphs", "version": 2, "kind": "flow",
                   "integrator": "euler" | "ddim",
                   "prefix": {"file": "prefix.onnx", "sha256": "..."},
                   "steps": [{"file": "step.onnx", "sha256": "..."}, ...],
                   "levels": [{"level": 0, "steps": 10, "graph": 0}, ...],
                   "noise": "gaussian" | "zero", "zero_noise_ok": false,
                   "action_affine": {"scale": [...], "offset": [...]},   (optional)
                   "ddim": {"alphas_cumprod": [...], "prediction": "epsilon", ...}}  (ddim)
    prefix.onnx   the obs_spec inputs -> named tensors (run once per cycle)
    step graphs   every prefix output they need (same name, shape, dtype) + x_t, t -> v
    action_spec.json, obs_spec.json, card.json   as a continuous-chunk policy's

Level 0 is full quality; each later level runs strictly fewer steps (a distilled graph is
how a 1-step level stays good). This module reads JSON and hashes only (robot-safe); the
graphs' shapes are checked where they are opened (rtinfer.inference.flow_runner). Any
missing or inconsistent entry raises one ModelError line naming the file and the fix.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rtinfer.model.directory import ModelError
from rtinfer.model.specs import SpecDir, read_kind_manifest, read_specs

KIND = "flow"
INTEGRATORS = ("euler", "ddim")
NOISE = ("gaussian", "zero")
PREDICTIONS = ("epsilon", "sample", "v_prediction")


@dataclass
class FlowModelDir(SpecDir):
    kind = KIND

    @property
    def integrator(self) -> str:
        return self.manifest["integrator"]

    @property
    def levels(self) -> list[dict]:
        """{"level", "steps", "graph"} per budget level, level 0 (full quality) first."""
        return sorted(self.manifest["levels"], key=lambda g: g["level"])

    @property
    def prefix_path(self) -> Path:
        return self.path / self.manifest["prefix"]["file"]

    @property
    def step_paths(self) -> list[Path]:
        return [self.path / s["file"] for s in self.manifest["steps"]]

    @property
    def noise(self) -> str:
        return self.manifest.get("noise", "gaussian")

    @property
    def zero_noise_ok(self) -> bool:
        return bool(self.manifest.get("zero_noise_ok", False))

    @property
    def ddim(self) -> dict:
        return self.manifest.get("ddim") or {}

    def affine(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(scale, offset) float32, each [D_m] or [H_m, D_m]; None: identity."""
        a = self.manifest.get("action_affine")
        if not a:
            return None
        return np.asarray(a["scale"], np.float32), np.asarray(a["offset"], np.float32)

    @classmethod
    def load(cls, path, *, check_hashes: bool = True) -> FlowModelDir:
        path = Path(path)
        manifest = read_kind_manifest(
            path, KIND, "write one with models.flow_package.package_flow (docs/policies.md)"
        )
        action, obs, card = read_specs(path)
        md = cls(path, manifest, action, obs, card)
        md._validate(check_hashes)
        return md

    def _validate(self, check_hashes: bool) -> None:
        m, where = self.manifest, self.path / "graphs.json"
        if m.get("integrator") not in INTEGRATORS:
            raise ModelError(
                f'{where}: integrator {m.get("integrator")!r}; say "euler" '
                f'(flow matching) or "ddim" (diffusion)'
            )
        if not isinstance(m.get("prefix"), dict):
            raise ModelError(
                f'{where}: no "prefix" graph; add {{"file": "prefix.onnx", '
                f'"sha256": ...}} (the observation encoder, run once a cycle)'
            )
        steps = m.get("steps")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) for s in steps):
            raise ModelError(
                f'{where}: "steps" must list the step graph(s), '
                f'[{{"file": "step.onnx", "sha256": ...}}]'
            )
        for name, entry in [("prefix", m["prefix"])] + [
            (f"steps[{i}]", s) for i, s in enumerate(steps)
        ]:
            _check_file(self.path, where, name, entry, check_hashes)
        self._validate_levels(where, len(steps))
        if m.get("noise", "gaussian") not in NOISE:
            raise ModelError(
                f'{where}: noise {m.get("noise")!r}; say "gaussian" (seeded per cycle) or "zero"'
            )
        if not isinstance(m.get("zero_noise_ok", False), bool):
            raise ModelError(f"{where}: zero_noise_ok must be true or false")
        if self.noise == "zero" and not self.zero_noise_ok:
            raise ModelError(
                f'{where}: noise "zero" but zero_noise_ok is false; set '
                f"zero_noise_ok true only where the policy was checked without "
                f'noise, else use noise "gaussian"'
            )
        self._validate_affine(where)
        if self.integrator == "ddim":
            self._validate_ddim(where)

    def _validate_levels(self, where: Path, n_graphs: int) -> None:
        levels = self.manifest.get("levels")
        if (
            not isinstance(levels, list)
            or not levels
            or not all(isinstance(lv, dict) for lv in levels)
        ):
            raise ModelError(
                f'{where}: "levels" must list budget levels, '
                f'[{{"level": 0, "steps": 10, "graph": 0}}, ...]'
            )
        numbers = sorted(lv.get("level", -1) for lv in levels)
        if numbers != list(range(len(levels))):
            raise ModelError(
                f"{where}: levels {numbers} must be 0, 1, ... {len(levels) - 1}, "
                f"each once (0 = full quality)"
            )
        for lv in levels:
            k = lv.get("steps")
            if not isinstance(k, int) or isinstance(k, bool) or k < 1:
                raise ModelError(
                    f"{where}: level {lv['level']} has steps {k!r}; give a whole "
                    f"number of steps >= 1"
                )
            g = lv.get("graph", 0)
            if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < n_graphs:
                raise ModelError(
                    f"{where}: level {lv['level']} names step graph {g!r}; give "
                    f'an index into "steps" (0 to {n_graphs - 1})'
                )
        ladder = self.levels
        for a, b in zip(ladder, ladder[1:]):
            if b["steps"] >= a["steps"]:
                raise ModelError(
                    f"{where}: level {b['level']} runs {b['steps']} steps, level {a['level']} "
                    f"{a['steps']}: each level must run fewer steps than the one before "
                    f"(e.g. 10, 4, 2, 1; a distilled graph gets the 1-step level)"
                )
        if self.integrator == "ddim":
            n = len(self.ddim.get("alphas_cumprod") or [])
            if n and ladder[0]["steps"] > n:
                raise ModelError(
                    f"{where}: level 0 runs {ladder[0]['steps']} DDIM steps but "
                    f"ddim.alphas_cumprod has {n} timesteps; use at most {n}"
                )

    def _validate_affine(self, where: Path) -> None:
        a = self.manifest.get("action_affine")
        if a is None:
            return
        if not isinstance(a, dict) or set(a) != {"scale", "offset"}:
            raise ModelError(
                f'{where}: action_affine must be {{"scale": [...], "offset": '
                f"[...]}} (physical = x * scale + offset), or left out"
            )
        D, H = self.action.dim, self.action.horizon
        for key in ("scale", "offset"):
            try:
                v = np.asarray(a[key], np.float64)
            except (TypeError, ValueError):
                v = np.zeros(0)
            if (
                v.ndim not in (1, 2)
                or not np.isfinite(v).all()
                or v.shape[-1] < D
                or (v.ndim == 2 and v.shape[0] < H)
            ):
                raise ModelError(
                    f"{where}: action_affine.{key} has shape {list(v.shape)}; "
                    f"give finite numbers of shape [D_m] or [H_m, D_m] with "
                    f"D_m >= {D} and H_m >= {H} (the action spec's)"
                )

    def _validate_ddim(self, where: Path) -> None:
        d = self.manifest.get("ddim")
        if (
            not isinstance(d, dict)
            or not isinstance(d.get("alphas_cumprod"), list)
            or not d["alphas_cumprod"]
        ):
            raise ModelError(
                f'{where}: integrator "ddim" needs ddim.alphas_cumprod (the '
                f"training scheduler's, one per train timestep); add it"
            )
        a = np.asarray(d["alphas_cumprod"], np.float64)
        if a.ndim != 1 or not np.all((a > 0) & (a <= 1)):
            raise ModelError(
                f"{where}: ddim.alphas_cumprod must be numbers in (0, 1]; copy "
                f"the scheduler's alphas_cumprod"
            )
        if d.get("prediction", "epsilon") not in PREDICTIONS:
            raise ModelError(
                f"{where}: ddim.prediction {d.get('prediction')!r}; say one of {list(PREDICTIONS)}"
            )
        self._validate_levels(where, len(self.manifest["steps"]))


def _check_file(root: Path, where: Path, name: str, entry, check_hashes: bool) -> None:
    f = root / str(entry.get("file", "")) if isinstance(entry, dict) else root
    if not isinstance(entry, dict) or not entry.get("file") or not f.is_file():
        raise ModelError(
            f"{f} ({name} in graphs.json) is missing; re-package the model "
            f"(models.flow_package.package_flow)"
        )
    digest = entry.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64:
        raise ModelError(
            f"{where}: {name} has no valid sha256 of {entry['file']}; add its "
            f"64-hex sha256 (sha256sum) so a corrupt file is caught"
        )
    if check_hashes and hashlib.sha256(f.read_bytes()).hexdigest() != digest:
        raise ModelError(
            f"{f}: sha256 differs from graphs.json; the file is corrupt or was "
            f"replaced: re-package the model"
        )
