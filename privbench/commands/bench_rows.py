"""The rows and section payloads `privbench bench` prints and writes (`--json-out`).

`TypedDict`s: each is written as the JSON object it is (`results.store.write_json`), and the
rows of one section are built by `privbench.commands.bench_measure`, printed and written by
`privbench.commands.bench`.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from privbench.config import JSONObject


class Spread(TypedDict):
    """Seconds of repeated calls (`bench_measure.spread`); all None for a skipped call."""

    median_s: float | None
    q1_s: float | None
    q3_s: float | None
    min_s: float | None
    max_s: float | None
    times_s: list[float] | None


class EngineRow(Spread):
    """One method (or defense) of one DP round of `model` at `nodes` nodes."""

    model: str
    nodes: int
    batch: int
    d: int  # model parameters
    dataset: str
    out_degree: int
    method: str  # a `bench_rounds.METHODS` key or "defense:<name>"
    label: str
    cpu_median_s: float | None  # CPU seconds (this process, all threads), median of the calls
    cpu_times_s: list[float] | None
    skipped: str | None  # why it did not run (its times are then None)


class Ratios(TypedDict):
    """One (model, n)'s ratios (`bench_measure.engine_ratios`; None where a method did not run)."""

    fastest_opacus: str | None  # the Opacus method of least median wall time
    fastest_opacus_over_privbench: float | None
    privbench_over_floor: float | None
    func_per_node_over_privbench: float | None
    fastest_opacus_over_privbench_cpu: float | None  # the same ratios of median CPU times
    privbench_over_floor_cpu: float | None


class EngineRatios(Ratios):
    model: str
    nodes: int


class AttackRow(TypedDict):
    """K Geiping attacks batched vs sequential (`bench_measure.bench_attacks`)."""

    k: int
    steps: int
    batch_size: int
    batched_s: float
    sequential_s: float
    ratio: float  # sequential / batched
    device: str
    repeats: NotRequired[int]  # the medians' count, added by the `attacks` section


class ScaleRow(TypedDict):
    """Seconds per round at `nodes` nodes (`bench_measure.bench_scale`)."""

    model: str
    nodes: int
    batch: int
    d: int
    dataset: str
    out_degree: int
    fused_s: float
    fused_per_node_ms: float
    defense: str | None
    defense_s: float | None
    defense_per_node_ms: float | None
    defense_skipped: str | None
    stack_gib: float
    peak_mib: float


class PlanRow(TypedDict):
    """Seconds to compose one privacy plan at one ε (`bench_measure.bench_plans`)."""

    plan: str
    epsilon: float
    composer: str
    rounds: int
    sample_rate: float
    delta: float
    repeats: int
    cold_s: float
    cold_min_s: float
    cold_max_s: float
    warm_s: float | None  # privbench's composer only
    noise: dict[str, float]


class DistributedRow(TypedDict):
    """Seconds per round of `privbench train` on `ranks` ranks (0: the local backend)."""

    model: str
    nodes: int
    ranks: int
    round_s: float
    speedup: float  # local / this


class AuditBench(TypedDict):
    """The `audit` section: wall time of `privbench attack --preset` and its timings.json."""

    preset: str
    defenses: list[str]
    seconds: float
    timings: JSONObject
    tuned_cells: list[str]
    load_before: list[float]  # 1, 5 and 15-minute load averages when it started
    load_after: list[float]


class EnginePayload(TypedDict):
    rows: list[EngineRow]
    ratios: list[EngineRatios]
    methods: list[str]
    repeats: int


class AttacksPayload(TypedDict):
    rows: list[AttackRow]


class ScalePayload(TypedDict):
    rows: list[ScaleRow]
    defense: str | None


class DistributedPayload(TypedDict):
    rows: list[DistributedRow]
    defense: str
    threads: int
    rounds: int


class PlansPayload(TypedDict):
    rows: list[PlanRow]


# What one section returns (and `--json-out` writes beside the machine's description).
Payload = (EnginePayload | AttacksPayload | AuditBench | ScalePayload | DistributedPayload
           | PlansPayload)
