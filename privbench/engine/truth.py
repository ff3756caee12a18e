"""What the attacks are graded against: which samples each node drew in each round."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from torch import Tensor

from privbench.engine.messages import RecordPolicy, load_tensors, tensor_metadata


class GroundTruth:
    """The senders' true batches per round: for grading attacks, never given to an attacker.

    Stored per round: slots (n, B) positions into each node's members and mask (n, B).
    """

    def __init__(self, policy: RecordPolicy) -> None:
        self.policy = policy
        self.batches: dict[int, tuple[Tensor, Tensor]] = {}
        self.split_digest: str | None = None  # SHA-256 of the member/non-member split

    def record(self, t: int, slots: Tensor, mask: Tensor) -> None:
        """Keep round t's batches (when the policy records round t)."""
        if self.policy.enabled and (self.policy.rounds is None or t in self.policy.rounds):
            self.batches[t] = (slots.detach().cpu(), mask.detach().cpu())

    def save(self, folder: str | Path) -> None:
        """Write `ground_truth.safetensors` into `folder`."""
        from safetensors.torch import save_file

        tensors = {}
        for t, (slots, mask) in self.batches.items():
            tensors[f"{t}.slots"], tensors[f"{t}.mask"] = slots.contiguous(), mask.contiguous()
        Path(folder).mkdir(parents=True, exist_ok=True)
        meta = {"split_sha256": self.split_digest} if self.split_digest else None
        save_file(tensors, str(Path(folder) / "ground_truth.safetensors"), metadata=meta)

    @staticmethod
    def merge(parts: Iterable[GroundTruth]) -> GroundTruth:
        """The ranks' ground truths as one: slots are the same on every rank (batches are drawn
        for the whole network), a sample is real where the rank owning its node marked it."""
        parts = list(parts)
        out = GroundTruth(parts[0].policy)
        out.split_digest = parts[0].split_digest
        for t, (slots, mask) in parts[0].batches.items():
            for other in parts[1:]:
                mask = mask | other.batches[t][1]
            out.batches[t] = (slots, mask)
        return out

    @staticmethod
    def load(folder: str | Path) -> GroundTruth:
        """Read `ground_truth.safetensors`."""
        path = Path(folder) / "ground_truth.safetensors"
        tensors = load_tensors(path)
        gt = GroundTruth(RecordPolicy())
        gt.split_digest = tensor_metadata(path).get("split_sha256")
        for key in tensors:
            t, what = key.split(".")
            if what == "slots":
                gt.batches[int(t)] = (tensors[key], tensors[f"{t}.mask"])
        return gt
