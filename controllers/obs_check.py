"""ObsCheck: is an observation what the policy's observation spec names?"""

from __future__ import annotations

from rtinfer.model.obs_spec import ObsSpec
from rtinfer.model.obs_tokens import ObsError, ObsTokens


class ObsCheck:
    """Is an `obs` body what the policy's observation spec names? Checked in full (an
    obs_tokens.json spec tokenizes it: ~90 us) for each new layout of keys, dtypes and
    shapes; a body laid out as the last one that passed is taken as it is (~3 us)."""

    def __init__(self, spec: ObsSpec | ObsTokens | None):
        self.spec = spec
        self._passed: tuple | None = None  # the layout that passed last

    def problem(self, body: dict) -> str | None:
        """None, or what is wrong (the spec's own words)."""
        if self.spec is None:
            return None
        layout = (
            tuple(
                (k, getattr(v, "dtype", None), getattr(v, "shape", None))
                for k, v in body["values"].items()
            ),
            tuple(body["ints"]),
            tuple(
                (k, getattr(f["image"], "dtype", None), getattr(f["image"], "shape", None))
                for k, f in body.get("frames", {}).items()
            ),
        )
        if layout == self._passed:
            return None
        try:
            if isinstance(self.spec, ObsSpec):
                self.spec.feeds(body)
            elif "frames" in body:
                return "an action-token policy takes no camera frames; leave them out"
            else:
                self.spec.encode(body)
        except ObsError as e:
            return str(e)
        self._passed = layout
        return None
