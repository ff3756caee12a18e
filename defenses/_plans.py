"""The message kinds every DP push-sum defense sends besides its own."""

from __future__ import annotations

from privbench.engine.messages import MessageKind


def model_message_kinds(note: str) -> tuple[MessageKind, ...]:
    """The push-sum `model` and `weight` kinds, covered by post-processing."""
    return (
        MessageKind("model", covered=True,
                    description=f"P_ji * x_i^{{t+1/2}}, push-sum numerator after the {note} step"),
        MessageKind("weight", covered=True, data_dependent=False,
                    description="P_ji * w_i^t, push-sum weight"),
    )
