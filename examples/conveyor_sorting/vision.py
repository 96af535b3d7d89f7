"""The conveyor-vision encoder: the overhead camera's frame -> what conveyor-act reads.

    image uint8 [1, H, W, 3] -> conv stem (stride 8) -> G x G visual tokens (8 x 8 px each)
      -> score per token -> keep the top `keep` tokens (visual-token pruning: the budget level)
      -> transformer over [HELD query; kept tokens]
      -> per token: objectness, class, (dx, dy) from the patch centre (m)
      -> the K likeliest, kept if on the belt in the camera zone, not a double of a likelier
         one, not under a cup that holds (observe.py's rules for `objects`)
      -> objects float32 [1, K, 4] (class, x m, y m, valid) most downstream first, as
         observe.py's `objects`; held float32 [1, 1] (class on the cup, -1: none)

Object classes and positions come only from the pixels; the gantry's state and the
instruction stay vectors and go to the chunk head (conveyor-act's graph, fine-tuned on this
encoder's output by train_vision_head.py) as they are. The score is trained to mark the
patches that hold an object or the cup, so the pruned
levels keep the tokens that matter (in the spirit of SpecPrune-VLA / EfficientVLA, which
keep 30-50 % of visual tokens). Static shapes: one exported graph per `keep`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import CellConfig
from .scene import OVERHEAD_FOVY

PATCH = 8  # pixels per visual token side (the stem's stride)
OBJECT_Z = 0.024  # m above the belt: the objects' centres, where the grid is laid
HELD_RADIUS_M = 0.035  # a detection this close to a holding cup is the held object
SAME_OBJECT_M = 0.04  # two detections closer than this are one object (objects spawn >= 0.4 m
# apart along the belt; a touching pair is rarer than a double count)


@dataclass(frozen=True)
class VisionConfig:
    image: int = 128  # frame height = width (px)
    dim: int = 64
    heads: int = 4
    layers: int = 2
    ff: int = 128
    classes: int = 3
    slots: int = 6  # rows of `objects` (CellConfig.visible_k)

    @property
    def grid(self) -> int:
        return self.image // PATCH

    @property
    def tokens(self) -> int:
        return self.grid**2

    def to_dict(self) -> dict:
        return asdict(self)


def patch_centres(cfg: VisionConfig, cell: CellConfig) -> np.ndarray:
    """World (x, y) in m of each token's patch centre on the plane of the objects' centres,
    row-major from the image's top-left (image up = +y, as scene._overhead_camera sets)."""
    x0, x1 = cell.belt_x
    y0, y1 = -cell.belt_half_width, cell.bin_y + cell.bin_half
    half = max(x1 - x0, y1 - y0) / 2 + 0.05  # seen at the belt's top
    cam_z = cell.belt_top + half / math.tan(math.radians(OVERHEAD_FOVY / 2))
    half_obj = half * (cam_z - cell.belt_top - OBJECT_Z) / (cam_z - cell.belt_top)
    g = cfg.grid
    u = (np.arange(g) + 0.5) / g * 2 - 1  # -1 .. 1 across the image
    xs = (x0 + x1) / 2 + u * half_obj
    ys = (y0 + y1) / 2 - u * half_obj  # row 0 is the top: +y
    return np.stack(np.meshgrid(xs, ys, indexing="xy"), -1).reshape(-1, 2).astype(np.float32)


def patch_size_m(cfg: VisionConfig, cell: CellConfig) -> float:
    c = patch_centres(cfg, cell)
    return float(c[1, 0] - c[0, 0])


class Block(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = nn.MultiheadAttention(cfg.dim, cfg.heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, cfg.ff), nn.GELU(), nn.Linear(cfg.ff, cfg.dim))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class VisionEncoder(nn.Module):
    """forward(image uint8 [B, H, W, 3], keep) -> dict of raw heads over the kept tokens;
    `objects_and_held` decodes them into observe.py's arrays (the exported graph's outputs)."""

    def __init__(self, cfg: VisionConfig, cell: CellConfig):
        super().__init__()
        self.cfg = cfg
        self.stem = nn.Sequential(
            nn.Conv2d(3, 24, 3, 2, 1),
            nn.GELU(),
            nn.Conv2d(24, 48, 3, 2, 1),
            nn.GELU(),
            nn.Conv2d(48, cfg.dim, 3, 2, 1),
        )
        self.pos = nn.Parameter(torch.randn(cfg.tokens, cfg.dim) * 0.02)
        self.score = nn.Linear(cfg.dim, 1)
        self.held_query = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.det = nn.Linear(cfg.dim, 1 + cfg.classes + 2)  # objectness, classes, dx, dy
        self.held = nn.Linear(cfg.dim, 1 + cfg.classes)  # none, class 0 .. C-1
        self.register_buffer("centres", torch.from_numpy(patch_centres(cfg, cell)))
        self.register_buffer("scale", torch.tensor(patch_size_m(cfg, cell)))
        self.register_buffer("mean", torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1))
        # observe.py's `objects` are those on the belt inside the camera zone: the same rule
        self.register_buffer(
            "zone", torch.tensor([*cell.camera_x, cell.belt_half_width]), persistent=False
        )
        k = cfg.slots
        self.register_buffer("earlier", torch.triu(torch.ones(k, k), 1), persistent=False)

    def tokens(self, image):
        x = image.permute(0, 3, 1, 2).float() / 255.0 - self.mean
        t = self.stem(x).flatten(2).transpose(1, 2)  # [B, G*G, dim], row-major
        return t + self.pos

    def forward(self, image, keep: int):
        t = self.tokens(image)
        score = self.score(t).squeeze(-1)  # [B, N]
        idx = torch.topk(score, keep, dim=1).indices  # the tokens that matter
        kept = torch.gather(t, 1, idx.unsqueeze(-1).expand(-1, -1, t.shape[-1]))
        x = torch.cat([self.held_query.expand(t.shape[0], -1, -1), kept], 1)
        for b in self.blocks:
            x = b(x)
        x = self.ln(x)
        return {"score": score, "idx": idx, "det": self.det(x[:, 1:]), "held": self.held(x[:, 0])}

    def objects_and_held(self, out, gantry=None):
        """observe.py's objects [B, K, 4] and held [B, 1] from forward's heads. With gantry
        [B, 8] (observe.py's), an object under a cup that holds one is the held object, not
        one on the belt (observe.py leaves the held object out): it is dropped."""
        det, idx = out["det"], out["idx"]
        prob = torch.sigmoid(det[..., 0])
        k = self.cfg.slots
        top_p, top = torch.topk(prob, k, dim=1)  # the K likeliest objects
        d = torch.gather(det, 1, top.unsqueeze(-1).expand(-1, -1, det.shape[-1]))
        centre = self.centres[torch.gather(idx, 1, top)]  # [B, K, 2]
        xy = centre + d[..., -2:] * self.scale
        cls = torch.argmax(d[..., 1 : 1 + self.cfg.classes], -1).float()
        valid = (top_p > 0.5).float()
        z = self.zone
        valid = (
            valid
            * ((xy[..., 0] >= z[0]) & (xy[..., 0] <= z[1]) & (xy[..., 1].abs() <= z[2])).float()
        )
        close = (torch.cdist(xy, xy) < SAME_OBJECT_M).float() * self.earlier  # [B, i, j]
        seen_before = torch.bmm(valid.unsqueeze(1), close).squeeze(1)  # likelier, near
        valid = valid * (seen_before < 0.5).float()
        if gantry is not None:
            under_cup = torch.linalg.norm(xy - gantry[:, None, :2], dim=-1) < HELD_RADIUS_M
            valid = valid * (1.0 - under_cup.float() * (gantry[:, 7:8] > 0.5).float())
        rows = torch.cat([cls.unsqueeze(-1), xy, valid.unsqueeze(-1)], -1) * valid.unsqueeze(-1)
        order = torch.topk(valid * 100.0 + xy[..., 0], k, dim=1).indices  # downstream first
        objects = torch.gather(rows, 1, order.unsqueeze(-1).expand(-1, -1, 4))
        held = (torch.argmax(out["held"], -1, keepdim=True) - 1).float()
        return objects, held


class ExportedEncoder(nn.Module):
    """The graph's front half at one budget level: (image, gantry) -> (objects, held,
    gantry passed on to the chunk head), or without held when the robot sends it."""

    def __init__(self, encoder: VisionEncoder, keep: int, held: bool = True):
        super().__init__()
        self.encoder, self.keep, self.with_held = encoder, keep, held

    def forward(self, overhead, gantry):
        objects, held = self.encoder.objects_and_held(self.encoder(overhead, self.keep), gantry)
        return (objects, held, gantry + 0) if self.with_held else (objects, gantry + 0)


def targets(
    cfg: VisionConfig, cell: CellConfig, objects: np.ndarray, gantry: np.ndarray, held: np.ndarray
) -> dict[str, np.ndarray]:
    """Per-token training targets from observe.py's arrays (N rows): obj [N, T] 0/1 (the
    patch that holds an object's centre), cls [N, T], off [N, T, 2] (patch units), score
    [N, T] (object patches and the cup's, with their 8 neighbours: what pruning must keep),
    held [N] (0: none, c + 1)."""
    centres, size = patch_centres(cfg, cell), patch_size_m(cfg, cell)
    g, n = cfg.grid, len(objects)
    x0, y0 = centres[0]

    def cell_of(x, y):
        col = np.clip(np.round((x - x0) / size), 0, g - 1).astype(int)
        row = np.clip(np.round((y0 - y) / size), 0, g - 1).astype(int)
        return row, col

    obj = np.zeros((n, g, g), np.float32)
    cls = np.zeros((n, g, g), np.int64)
    off = np.zeros((n, g, g, 2), np.float32)
    near = np.zeros((n, g + 2, g + 2), np.float32)
    rows_i, slots = np.nonzero(objects[:, :, 3] > 0.5)
    x, y = objects[rows_i, slots, 1], objects[rows_i, slots, 2]
    r, c = cell_of(x, y)
    obj[rows_i, r, c] = 1.0
    cls[rows_i, r, c] = objects[rows_i, slots, 0].astype(np.int64)
    ctr = centres.reshape(g, g, 2)[r, c]
    off[rows_i, r, c, 0] = (x - ctr[:, 0]) / size
    off[rows_i, r, c, 1] = (y - ctr[:, 1]) / size
    cr, cc = cell_of(gantry[:, 0], gantry[:, 1])
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            near[rows_i, r + 1 + dr, c + 1 + dc] = 1.0
            near[np.arange(n), cr + 1 + dr, cc + 1 + dc] = 1.0
    return {
        "obj": obj.reshape(n, -1),
        "cls": cls.reshape(n, -1),
        "off": off.reshape(n, -1, 2),
        "score": near[:, 1:-1, 1:-1].reshape(n, -1),
        "held": (held[:, 0].astype(np.int64) + 1),
    }


def losses(out: dict, t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The training losses of forward's heads against `targets` (batched tensors)."""
    idx, det = out["idx"], out["det"]
    obj = torch.gather(t["obj"], 1, idx)
    pos = obj > 0.5
    l_obj = F.binary_cross_entropy_with_logits(det[..., 0], obj, pos_weight=torch.tensor(4.0))
    cls = torch.gather(t["cls"], 1, idx)[pos]
    off = torch.gather(t["off"], 1, idx.unsqueeze(-1).expand(-1, -1, 2))[pos]
    l_cls = F.cross_entropy(det[..., 1:-2][pos], cls) if pos.any() else det.sum() * 0
    l_off = F.smooth_l1_loss(det[..., -2:][pos], off, beta=0.1) if pos.any() else det.sum() * 0
    l_score = F.binary_cross_entropy_with_logits(
        out["score"], t["score"], pos_weight=torch.tensor(4.0)
    )
    l_held = F.cross_entropy(out["held"], t["held"])
    return {"obj": l_obj, "cls": l_cls, "off": l_off, "score": l_score, "held": l_held}
