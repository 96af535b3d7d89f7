"""A model directory: everything the inference node needs, validated up front.

    graphs.json        export manifest (models.export): config, vocab, one entry per graph
    step_d{D}_k{K}.onnx  the static-shape step graphs; fp16/, int8/ and int4/ hold the same
                       set in other precisions (graphs.json "dtype": float16, int8, int4, w8a8)
    tokenizer.json     rtinfer.model.action_tokens.TokenizerConfig (with its hash; checked on load)
    obs_tokens.json    rtinfer.model.obs_tokens spec (observation + instruction tokens)
    vocab.json         optional if graphs.json carries "vocab" (models.config.Vocab layout)
    card.json          optional: {"accuracy": {"<depth>": float}, ...} per exit depth
    graphs.json "gated"  optional: token-gated graph sets, one per router threshold, each a
                       budget level (GatedSet; docs/policies.md "Gated budget levels")
    policy.safetensors + policy.json   optional checkpoint (the torch backend loads it); a
                       shipped model's fp32 graphs read their weights from it (graphs.json
                       "weights" names it; models.checkpoint_blob) instead of weights.bin
    ../_blobs/<sha256>/FILE  a file shared with other zoo folders (models/zoo/README.md): any
                       graphs.json path that leaves the folder must lie in such a folder

Sequence layout (rtinfer.model.sequence, shared with training):
    [BOS][instruction C][observation L][SEP][action tokens H*D]
The instruction prefix [BOS][instruction] is KV-cached across cycles; [observation][SEP]
is prefilled each cycle; the SEP's logits give the first action token.
Any missing or inconsistent file raises ModelError naming the file and the fix.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from rtinfer.model.action_tokens import TokenizerConfig
from rtinfer.model.card import read_card
from rtinfer.model.obs_tokens import ObsTokens
from rtinfer.model.sequence import prefix_len
from rtinfer.model.vocab import VocabLayout

SPECIALS = ("PAD", "BOS", "SEP")
# precision (the name a user picks) -> graphs.json "dtype" of that graph set
PRECISIONS = {
    "fp32": "float32",
    "fp16": "float16",
    "int8": "int8",
    "int4": "int4",
    "w8a8": "w8a8",
}


def graph_dtype(precision: str) -> str:
    """The graphs.json dtype of a precision: "fp16" or "float16" -> "float16"."""
    if precision in PRECISIONS.values():
        return precision
    if precision not in PRECISIONS:
        raise ModelError(
            f"precision {precision!r} is unknown; choose one of {', '.join(PRECISIONS)}"
        )
    return PRECISIONS[precision]


GATED_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")
# A graphs.json path into a folder of blobs shared between zoo folders (models.checkpoint_blob).
SHARED = re.compile(r"\.\./_blobs/[0-9a-f]{64}/[^/\\]+")


def inside(name: str) -> bool:
    """A graphs.json file name the loaders may open: inside the model folder, or a shared blob
    folder's file (`../_blobs/<sha256>/FILE`)."""
    path = Path(name)
    return bool(SHARED.fullmatch(name)) or not (path.is_absolute() or ".." in path.parts)


@dataclass(frozen=True)
class GatedSet:
    """One declared token-gated graph set (graphs.json "gated"[i]): the full-depth graphs of the
    policy with its FFN routers at threshold `tau`, standing in for the dense `dtype` set's
    full-depth graphs (exits stay dense). ffn_active: the fraction of FFN sub-layers run per
    decoded token; step_ratio: its 1-token step time over dense's, measured; accuracy: the
    card's lockstep success at this level (None: not measured)."""

    name: str
    tau: float
    dtype: str
    ffn_active: float
    step_ratio: float
    active_flops: float | None
    accuracy: float | None
    graphs: dict  # k -> manifest entry (all at full depth)


class ModelError(RuntimeError):
    """A model cannot be loaded or run; the message names the file or option and the fix.
    The inference side's BackendError is a ModelError too, so one except catches both."""


@dataclass
class ModelDir:
    path: Path
    manifest: dict
    config: dict  # PolicyConfig.to_dict()
    vocab: VocabLayout
    tokenizer: TokenizerConfig
    obs: ObsTokens
    card: dict = field(default_factory=dict)
    graphs: dict = field(default_factory=dict)  # (dtype, depth, k) -> manifest entry
    batched: dict = field(default_factory=dict)  # (batch, depth, k) -> manifest entry (fp32)
    gated: dict = field(default_factory=dict)  # name -> GatedSet, in graphs.json order
    kind = "tokens"  # an action-token policy (rtinfer.model.chunk_model: the other kind)

    @property
    def n_layer(self) -> int:
        return int(self.config["n_layer"])

    @property
    def max_ctx(self) -> int:
        return int(self.config["max_ctx"])

    @property
    def kv_shape(self) -> tuple[int, ...]:
        c = self.config
        return (c["n_layer"], 2, 1, c["n_head"], c["max_ctx"], c["n_embd"] // c["n_head"])

    @property
    def prefix_len(self) -> int:
        return prefix_len(self.obs.instr_length, self.obs.length)

    @property
    def chunk_tokens(self) -> int:
        return self.tokenizer.horizon * self.tokenizer.dim

    def graph_path(self, dtype: str, depth: int, k: int) -> Path:
        return self.path / self.graphs[(dtype, depth, k)]["file"]

    @property
    def batches(self) -> list[int]:
        """The batch sizes of the batched graphs (models.export_batched), ascending; [] if none."""
        return sorted({b for b, _, _ in self.batched})

    def ks(self, depth: int, dtype: str = "float32") -> list[int]:
        """Sorted k values exported at this depth."""
        return sorted(k for (dt, d, k) in self.graphs if dt == dtype and d == depth)

    @property
    def dtypes(self) -> list[str]:
        """The graph sets this directory ships ("float32" first, then as graphs.json lists)."""
        return list(dict.fromkeys(dt for dt, _, _ in self.graphs))

    def kv_dtype(self, dtype: str) -> str:
        """The KV cache dtype of a graph set: float16 for the fp16 graphs, float32 for the
        fp32 and the quantised (int8, int4, w8a8) ones, as their `kv` input declares."""
        g = next(g for (dt, _, _), g in self.graphs.items() if dt == dtype)
        return next(
            (i["dtype"] for i in g.get("inputs", ()) if i["name"] == "kv"),
            "float16" if dtype == "float16" else "float32",
        )

    def check_graph_set(self, dtype: str) -> None:
        """A non-fp32 set is usable: it exists, holds every (depth, k) the fp32 set holds,
        and its graphs and shared weights match their sha256s (load checks fp32's only).
        Raises ModelError naming what is missing or corrupt and the fix."""
        if dtype not in self.dtypes:
            raise ModelError(
                f"{self.path}: no {dtype} graphs in graphs.json (it has "
                f"{', '.join(self.dtypes)}); export them (rtinfer export "
                "--quantise, docs/policies.md)"
            )
        want = {(d, k) for dt, d, k in self.graphs if dt == "float32"}
        have = {(d, k) for dt, d, k in self.graphs if dt == dtype}
        if want - have:
            raise ModelError(
                f"{self.path}: the {dtype} set lacks (depth, k) {sorted(want - have)} "
                "that the fp32 set has; re-export it"
            )
        entries = [g for (dt, _, _), g in self.graphs.items() if dt == dtype]
        folders = {Path(g["file"]).parent for g in entries}
        files = [(g["file"], g.get("sha256")) for g in entries] + [
            (n, d) for n, d in self.manifest.get("weights", {}).items() if Path(n).parent in folders
        ]
        for name, digest in files:
            if digest and hashlib.sha256((self.path / name).read_bytes()).hexdigest() != digest:
                raise ModelError(f"{self.path / name}: sha256 differs from graphs.json; {SHA_FIX}")

    def accuracy(self, depth: int) -> float | None:
        acc = self.card.get("accuracy", {})
        v = acc.get(str(depth), acc.get(depth))
        return None if v is None else float(v)

    @classmethod
    def load(cls, path, *, check_hashes: bool = True) -> ModelDir:
        """Read and cross-check every file. check_hashes: sha256 of each graph against the
        manifest (reads every graph once; seconds for large models)."""
        path = Path(path)
        check_is_dir(path)
        manifest = _json(path / "graphs.json", _manifest_fix(path))
        if manifest.get("format") != "rtinfer-graphs" or manifest.get("version", 0) > 1:
            raise ModelError(f"{path / 'graphs.json'}: not an rtinfer-graphs v1 manifest")
        vd = manifest.get("vocab") or _json(
            path / "vocab.json", "pass vocab= to export_all or write Vocab.to_dict()"
        )
        try:
            vocab = VocabLayout(
                int(vd["n_instr"]),
                int(vd["n_obs_bins"]),
                int(vd["n_action_bins"]),
                tuple(vd["specials"]),
            )
            tok = TokenizerConfig.from_dict(
                _json(path / "tokenizer.json", "save the model's TokenizerConfig there")
            )
            obs = ObsTokens(_json(path / "obs_tokens.json", "write the obs_tokens spec there"))
        except (KeyError, ValueError, TypeError) as e:
            raise ModelError(f"{path}: invalid vocab/tokenizer/obs spec: {e}") from None
        card = _card(path)
        graphs = {(g["dtype"], int(g["depth"]), int(g["k"])): g for g in manifest["graphs"]}
        batched = {
            (int(g["batch"]), int(g["depth"]), int(g["k"])): g for g in manifest.get("batched", [])
        }
        md = cls(path, manifest, manifest["config"], vocab, tok, obs, card, graphs, batched)
        md._validate(check_hashes)
        md.gated = md._gated(check_hashes)
        return md

    def _gated(self, check_hashes: bool) -> dict:
        """graphs.json "gated" parsed and checked (docs/policies.md "Gated budget levels");
        anything wrong raises ModelError in one line naming the level, the key and the fix."""
        decl, where = self.manifest.get("gated", []), self.path / "graphs.json"
        if not isinstance(decl, list):
            raise ModelError(
                f'{where}: "gated" must be a list of gated levels, not {type(decl).__name__}'
            )
        out, full = {}, self.n_layer
        for i, e in enumerate(decl):
            name = e.get("name") if isinstance(e, dict) else None
            at = f"{where}: gated level {i} ({name!r})"
            if not isinstance(name, str) or not GATED_NAME.fullmatch(name) or name in out:
                raise ModelError(
                    f'{at}: "name" must be a unique string of 1-32 letters, '
                    "digits, '_', '.' or '-'"
                )
            try:
                tau, ffn, ratio = float(e["tau"]), float(e["ffn_active"]), float(e["step_ratio"])
                dtype, graphs = str(e.get("dtype", "float32")), list(e["graphs"])
                flops = None if e.get("active_flops") is None else float(e["active_flops"])
                acc = e.get("accuracy", self.card.get("accuracy", {}).get(name))
                acc = None if acc is None else float(acc)
            except KeyError as k:
                raise ModelError(
                    f"{at}: missing key {k}; a gated level needs name, tau, "
                    "ffn_active, step_ratio and graphs"
                ) from None
            except (TypeError, ValueError) as x:
                raise ModelError(
                    f"{at}: a key has the wrong type ({x}); tau, ffn_active, "
                    "step_ratio, active_flops and accuracy are numbers, graphs "
                    "a list"
                ) from None
            if not (0.0 < tau < 1.0 and 0.0 <= ffn <= 1.0 and ratio > 0.0):
                raise ModelError(
                    f"{at}: need 0 < tau < 1, 0 <= ffn_active <= 1 and "
                    f"step_ratio > 0 (got {tau}, {ffn}, {ratio})"
                )
            if dtype not in self.dtypes:
                raise ModelError(
                    f"{at}: dtype {dtype!r} is not a graph set of this directory "
                    f"({', '.join(self.dtypes)})"
                )
            by_k = {}
            for g in graphs:
                if not isinstance(g, dict) or not {"file", "k", "depth"} <= set(g):
                    raise ModelError(f'{at}: each graph needs "file", "depth" and "k"')
                if int(g["depth"]) != full:
                    raise ModelError(
                        f"{at}: {g['file']} has depth {g['depth']}; gated graphs "
                        f"are full depth ({full}) only"
                    )
                f = self.path / g["file"]
                if not inside(g["file"]):
                    raise ModelError(f"{at}: {g['file']} lies outside the model folder")
                if not f.is_file():
                    raise ModelError(
                        f"{f} (gated level {name!r}) is missing; re-export it "
                        "(python -m models.gating ship)"
                    )
                if (
                    check_hashes
                    and g.get("sha256")
                    and hashlib.sha256(f.read_bytes()).hexdigest() != g["sha256"]
                ):
                    raise ModelError(f"{f}: sha256 differs from graphs.json; {SHA_FIX}")
                by_k[int(g["k"])] = g
            want = self.ks(full, dtype)
            if sorted(by_k) != want:
                raise ModelError(
                    f"{at}: its graphs have k {sorted(by_k)} but the {dtype} set "
                    f"has k {want} at full depth; a gated level needs exactly those"
                )
            out[name] = GatedSet(name, tau, dtype, ffn, ratio, flops, acc, by_k)
        return out

    def _validate(self, check_hashes: bool) -> None:
        v, c, where = self.vocab, self.config, self.path
        for name in SPECIALS:
            if name not in v.specials:
                raise ModelError(f"{where}: vocab lacks special token {name}")
        if v.size != c["vocab_size"]:
            raise ModelError(f"{where}: vocab size {v.size} != model vocab_size {c['vocab_size']}")
        if self.tokenizer.bins != v.n_action_bins:
            raise ModelError(
                f"{where}/tokenizer.json: {self.tokenizer.bins} bins but the "
                f"vocab has {v.n_action_bins} action bins; re-export"
            )
        if self.obs.bins > v.n_obs_bins or self.obs.instr_classes > v.n_instr:
            raise ModelError(
                f"{where}/obs_tokens.json: bins {self.obs.bins} / instruction "
                f"classes {self.obs.instr_classes} exceed the vocab ranges"
            )
        need = self.prefix_len + self.chunk_tokens
        if need > self.max_ctx:
            raise ModelError(f"{where}: sequence needs {need} positions > max_ctx {self.max_ctx}")
        for depth in [self.n_layer] + list(c.get("exits", [])):
            if 1 not in self.ks(depth):
                raise ModelError(f"{where}: no k=1 graph at depth {depth} in graphs.json")
        for key, g in [
            *self.graphs.items(),
            *(((g["dtype"],) + k[1:], g) for k, g in self.batched.items()),
        ]:
            f = self.path / g["file"]
            if not inside(g["file"]):
                raise ModelError(
                    f"{where}/graphs.json: {g['file']} lies outside the model "
                    "folder; name files inside it or in ../_blobs/<sha256>/"
                )
            if not f.exists():
                raise ModelError(f"{f} listed in graphs.json is missing; re-export the model")
            if (
                check_hashes
                and key[0] == "float32"
                and g.get("sha256")
                and hashlib.sha256(f.read_bytes()).hexdigest() != g["sha256"]
            ):
                raise ModelError(f"{f}: sha256 differs from graphs.json; {SHA_FIX}")
        for name, digest in self.manifest.get("weights", {}).items():  # shared external data
            f = self.path / name
            if not f.exists():
                raise ModelError(f"{f} (shared weights) is missing; re-export the model")
            if not inside(name):
                raise ModelError(
                    f"{where}/graphs.json: {name} lies outside the model folder; "
                    "name files inside it or in ../_blobs/<sha256>/"
                )
            if (
                check_hashes
                and (Path(name).parent == Path(".") or SHARED.fullmatch(name))
                and hashlib.sha256(f.read_bytes()).hexdigest() != digest
            ):
                raise ModelError(f"{f}: sha256 differs from graphs.json; {SHA_FIX}")


# The fix for a file whose sha256 is not the one graphs.json lists.
SHA_FIX = (
    "the file is corrupt or changed since export: restore it from where the model came "
    "from (a shipped model: `git checkout -- FOLDER`), or re-export the model "
    "(`rtinfer export`; a chunk policy: `rtinfer package`)"
)


def check_is_dir(path: Path) -> None:
    """ModelError unless `path` is a directory: a file in one (graphs.json) is told the
    folder to give instead, a missing path how to make one."""
    if path.is_dir():
        return
    if path.is_file():
        raise ModelError(
            f"{path} is a file, not a model directory; give the folder that holds it: {path.parent}"
        )
    raise ModelError(
        f"model directory {path} does not exist; write one with `rtinfer export` "
        f"(an action-token policy, from a checkpoint) or `rtinfer package` (a "
        f"chunk policy, from a torch module or ONNX files)"
    )


def _manifest_fix(path: Path) -> str:
    """What to run when `path` has no graphs.json: the packager for a chunk policy's files."""
    if (path / "action_spec.json").exists() or any(path.glob("chunk_l*.onnx")):
        return (
            "it looks like a continuous-chunk policy (action_spec.json, chunk_l*.onnx): "
            "write its graphs.json with `rtinfer package --onnx chunk_l0.onnx "
            "--action-spec action_spec.json --out FOLDER` (docs/policies.md section 9)"
        )
    return (
        "export a checkpoint into this folder with `rtinfer export --checkpoint CKPT --out "
        "FOLDER`, or package a chunk policy with `rtinfer package` (docs/policies.md)"
    )


def _card(path: Path) -> dict:
    """A model directory's card (rtinfer.model.card.read_card), its errors as ModelError."""
    try:
        return read_card(path)
    except ValueError as e:
        raise ModelError(str(e)) from None


def _json(path: Path, fix: str) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelError(f"{path} is missing; {fix}") from None
    except (OSError, ValueError) as e:
        raise ModelError(f"{path} is unreadable or not JSON ({e}); {fix}") from None
