"""The planner's model as a Vega-Lite spec: parameters bound to sliders, and every number the
planner shows computed by Vega expressions in the page, exactly, at any setting (no lookup table,
no interpolation). :mod:`pipeline.report.planner` fills in the job and the fleet's rate law.

From ``sequence`` rows k = 0, 1, ... to one row:

- **Failure rate at N** (``datum.r``): the expression the settings carry (the fleet's size law).
- **Spare pool** (docs/projection.md, "Hot spares"; :class:`pipeline.projection.SparePool`):
  t(k) = C(N+S, k) beta^k with beta = r m, as ln t(k), a running sum (window transform) of
  ln((N+S-k+1)/k) + ln beta; then B(S) = t(S) / sum_{k<=S} t(k) (Engset), E[W] = m / (S+1) and the
  stall E[T] = m / (S+1) sum_{k>S} t(k) / t(S+1) (joinaggregate sums, each term scaled by t(S) or
  t(S+1), so nothing under- or overflows before it must). The tail sum is the rows past S when
  S + 1 is beyond the binomial's mode (its terms then fall geometrically; the sequence runs
  :data:`SD_PAST_MODE` standard deviations of the largest N + S past the largest S), else
  (1+beta)^{N+S} minus the head, which is then at most about half of it (no cancellation).
- **Wall time**: Daly's sum over whole and partial checkpoint segments with recovery
  R' = detect + p(S) swap + ln(1 + lambda B E[T]) / lambda + restart
  (:func:`pipeline.projection.model.expected_wall_hours`, infinite past exp's range);
  goodput = failure-free / wall ("cannot finish" under 1%), interruptions = lambda T,
  cost = (N + S) x GPUs x price x T.

Without a pool (no repair times) B = 0, no stall, and the replace time is a slider.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import altair as alt

from pipeline.projection.results import MIN_GOODPUT

SD_PAST_MODE = 10  # the tail sum runs this many binomial standard deviations past S + 1
LINE_HEIGHT = 19
WIDTH = 760  # the detail lines are sentences
PARTS = ("failure-free training", "checkpoint writes", "lost work and recovery", "stalls waiting for a spare")
PART_COLORS = ("#4c78a8", "#9ecae9", "#f58518", "#e45756")


@dataclass(frozen=True)
class Control:
    """One slider: its parameter name, label (words and unit), value and range."""

    name: str
    label: str
    value: float
    low: float
    high: float
    step: float

    def param(self) -> dict:
        bind = {
            "input": "range",
            "min": self.low,
            "max": self.high,
            "step": self.step,
            "name": f"{self.label} ",
        }
        return {"name": self.name, "value": self.value, "bind": bind}


def control(name: str, label: str, value: float, step: float, low: float, high: float) -> Control:
    """A slider from about ``low`` to ``high`` whose grid holds ``value`` exactly (its minimum is
    shifted by value mod step), so the configured setting is a position of the slider."""
    value = float(f"{value:.12g}")  # 11.016, not 11.016000000000002 beside the slider (1e-12 relative)
    offset = value - low - step * math.floor((value - low) / step + 1e-9)
    if offset < 1e-9 * step or offset > step * (1 - 1e-9):
        offset = 0.0
    return Control(name, label, value, low + offset, max(high, value), step)


@dataclass(frozen=True)
class PlannerSettings:
    """The configured job as the planner starts from it, and the fleet's rate law."""

    job: str
    mode: str  # the recovery profile planned (the one a spare pool serves)
    gpus_per_instance: int
    work_gpu_hours: float
    checkpoint_write_hours: float
    controls: tuple[Control, ...]
    rate_expr: str  # Vega expression of the per-instance rate at N = datum.N (datum.bucket: N's)
    rate_source_expr: str  # Vega expression of where that rate comes from, in words
    mean_repair_hours: float | None  # the fleet's MTTR, which the repair slider multiplies; None: no pool

    @property
    def pool(self) -> bool:
        return self.mean_repair_hours is not None

    @property
    def sequence_rows(self) -> int:
        high = {c.name: c.high for c in self.controls}
        spares = high.get("spares", 0)
        return int(spares + 2 + math.ceil(SD_PAST_MODE * math.sqrt((high["instances"] + spares) / 4)) + 20)


def number(x: float) -> str:
    """A float in an expression, exactly (the shortest repr that reads back the same)."""
    return repr(float(x))


def quote(text: str) -> str:
    """A string literal for a Vega expression, whatever ``text`` holds (quotes, backslashes, line
    breaks: JSON's escapes, which Vega's expression parser reads as JavaScript's)."""
    return json.dumps(text)


def _calc(**fields: str) -> list[dict]:
    """Calculate transforms in order: field name -> expression."""
    return [{"calculate": expr, "as": name} for name, expr in fields.items()]


def _expm1(x: str) -> str:
    return f"(abs({x}) < 1e-5 ? {x} + {x} * {x} / 2 + {x} * {x} * {x} / 6 : exp({x}) - 1)"


def _log1p(x: str) -> str:
    return f"(abs({x}) < 1e-5 ? {x} - {x} * {x} / 2 + {x} * {x} * {x} / 3 : log(1 + {x}))"


def _daly(recovery: str) -> str:
    """Daly's expected wall time (hours) with ``recovery`` hours per failure (an expression)."""
    return (
        f"datum.lam * ({recovery} + datum.smax) > 700 ? 1 / 0 : "
        f"exp(datum.lam * ({recovery})) * (datum.nfull * datum.e1 + datum.part * datum.e2) / datum.lam"
    )


def _pool(s: PlannerSettings) -> list[dict]:
    """B(S), the wait, the stall and the replace time per failure (see the module docstring)."""
    if not s.pool:
        return [
            {"filter": "datum.k == 0"},
            *_calc(S="0", B="0", wait="0", stall="0", x="0", replace="replace_min / 60"),
        ]
    at = {"op": "max", "field": "ls", "as": "LS"}, {"op": "max", "field": "ls1", "as": "LS1"}
    sums = ({"op": "sum", "field": f, "as": f.upper()} for f in ("h", "h1", "t1"))
    return [
        *_calc(
            S="spares",
            m=f"repair_x * {number(s.mean_repair_hours)}",
            n="datum.N + datum.S",
            beta="datum.r * datum.m",
        ),
        {"filter": "datum.k <= datum.n"},
        *_calc(lr="datum.k == 0 ? 0 : log((datum.n - datum.k + 1) / datum.k) + log(datum.beta)"),
        {"window": [{"op": "sum", "field": "lr", "as": "lt"}], "sort": [{"field": "k"}], "frame": [None, 0]},
        *_calc(ls="datum.k == datum.S ? datum.lt : null", ls1="datum.k == datum.S + 1 ? datum.lt : null"),
        {"joinaggregate": list(at)},
        *_calc(
            h="datum.k <= datum.S ? exp(datum.lt - datum.LS) : 0",
            h1="datum.k <= datum.S ? exp(datum.lt - datum.LS1) : 0",
            t1="datum.k > datum.S ? exp(datum.lt - datum.LS1) : 0",
        ),
        {"joinaggregate": list(sums)},
        {"filter": "datum.k == 0"},
        *_calc(
            B="1 / datum.H",
            mode="floor((datum.n + 1) * datum.beta / (1 + datum.beta))",
            ratio=f"datum.S + 1 <= datum.mode ? exp(datum.n * {_log1p('datum.beta')} - datum.LS1) - datum.H1 "
            ": datum.T1",
            wait="datum.m / (datum.S + 1)",
            stall="datum.wait * datum.ratio",
            y="datum.lam * datum.B * datum.stall",
            x=f"{_log1p('datum.y')} / datum.lam",
            replace="(1 - datum.B) * swap_min / 60 + datum.x",
        ),
    ]


def transforms(s: PlannerSettings) -> list[dict]:
    """From ``sequence`` rows to one row with every number the planner shows."""
    g = s.gpus_per_instance
    head = _calc(
        N="instances",
        bucket="pow(2, round(log(max(instances, 1)) / LN2))",
        r=s.rate_expr,
        lam="datum.N * datum.r",
    )
    segments = _calc(  # Daly's segments: nfull of tau + delta hours, then the rest + delta
        W=f"{number(s.work_gpu_hours)} / (datum.N * {g})",
        tau="checkpoint_h",
        delta=number(s.checkpoint_write_hours),
        nfull="floor(datum.W / datum.tau + 1e-9)",
        rest="datum.W - datum.nfull * datum.tau",
        part="datum.rest > 1e-9 * datum.tau ? 1 : 0",
        s1="datum.tau + datum.delta",
        s2="datum.rest + datum.delta",
        smax="max(datum.nfull > 0 ? datum.s1 : 0, datum.part ? datum.s2 : 0)",
        e1=_expm1("(datum.lam * datum.s1)"),
        e2=_expm1("(datum.lam * datum.s2)"),
    )
    wall = _calc(
        R="detect_min / 60 + datum.replace + restart_min / 60",
        T=_daly("datum.R"),
        T_running=_daly("datum.R - datum.x"),
        goodput="isFinite(datum.T) ? datum.W / datum.T : 0",
        finishes=f"datum.goodput >= {MIN_GOODPUT}",
        days="datum.T / 24",
        interruptions="datum.lam * datum.T",
        cost=f"(datum.N + datum.S) * {g} * price * datum.T",
        writes="(datum.nfull + datum.part) * datum.delta",
    )
    return head + _pool(s) + segments + wall


def _duration(field: str) -> str:
    """A duration for people: minutes below an hour, else hours (3 significant digits)."""
    return f"({field} < 1 ? format({field} * 60, '.3~g') + ' min' : format({field}, ',.3~g') + ' h')"


def _lines(s: PlannerSettings) -> tuple[str, str]:
    """(the verdict, the detail lines as an array): Vega expressions of the one row."""
    verdict = (
        "datum.finishes ? format(datum.days, ',.1f') + ' days, goodput ' + format(datum.goodput, '.1%') + "
        "(price > 0 ? ', cost $' + format(datum.cost, ',.0f') : '') : 'Cannot finish: goodput ' + "
        "format(datum.goodput, '.2%') + ', under 1%'"
    )
    spares = " + ' with ' + datum.S + (datum.S == 1 ? ' hot spare' : ' hot spares')" if s.pool else ""
    lines = [
        f"format(datum.N, ',') + ' instances × {s.gpus_per_instance} GPUs'{spares} + ', checkpoint every ' + "
        f"{_duration('datum.tau')} + ': ' + (datum.finishes ? format(datum.interruptions, ',.0f') + "
        "' expected interruptions, ' : '') + 'cluster MTBF ' + format(1 / datum.lam, ',.2f') + ' h'"
    ]
    how = ""
    if s.pool:
        lines.append(
            "'A failure finds a free spare ' + format(1 - datum.B, '.1%') + ' of the time (swapped in in ' + "
            f"{_duration('swap_min / 60')} + '); otherwise it waits ' + format(datum.wait, ',.1f') + "
            "' h on average for the earliest repair'"
        )
        lines.append(
            "'(mean repair ' + format(datum.m, ',.1f') + ' h) and the job stalls ' + "
            "format(datum.stall, ',.1f') + ' h until ' + format(datum.N, ',') + ' nodes are up'"
        )
        how = " (detection, swap or stall, restart)"
    lines.append(
        f"'Recovery per failure: ' + {_duration('datum.R')} + '{how}; failure-free ' + "
        "format(datum.W / 24, ',.1f') + ' days'"
    )
    lines.append(
        "'Failure rate at this size: ' + format(datum.r * 100, '.4f') + '% per instance-hour (' + "
        f"{s.rate_source_expr} + ')'"
    )
    nodes = "(instances + spares)" if s.pool else "instances"
    lines.append(
        f"price > 0 ? 'Cost: {nodes} × {s.gpus_per_instance} GPUs × $' + format(price, ',.2f') + ' per "
        "GPU-hour × wall time' : 'No price: the cost is left out (set a price per GPU-hour above)'"
    )
    return verdict, "[" + ", ".join(lines) + "]"


def planner_spec(s: PlannerSettings) -> dict:
    """The planner: the sliders, the verdict, the detail lines and a bar of where the wall time
    goes (failure-free work, checkpoint writes, lost work and recovery, stalls)."""
    verdict, details = _lines(s)
    shown = list(PARTS if s.pool else PARTS[:3])
    parts = _calc(
        **{
            PARTS[0]: "datum.W / 24",
            PARTS[1]: "datum.writes / 24",
            PARTS[2]: "(datum.T_running - datum.W - datum.writes) / 24",
            PARTS[3]: "(datum.T - datum.T_running) / 24",
        }
    )
    bar = {
        "x": {"field": "days", "type": "quantitative", "stack": "zero", "title": "days"},
        "color": {
            "field": "part",
            "type": "nominal",
            "title": None,
            "scale": {"domain": shown, "range": list(PART_COLORS[: len(shown)])},
            "legend": {"orient": "bottom", "direction": "horizontal"},
        },
        "order": {"field": "order", "type": "quantitative"},
        "tooltip": [
            {"field": "part", "title": "part"},
            {"field": "days", "type": "quantitative", "format": ",.1f", "title": "days"},
        ],
    }
    text = {"type": "text", "align": "left", "baseline": "middle", "x": 0}
    more = ", more spares" if s.pool else ""
    color = {"condition": {"test": "!datum.finishes", "value": "#b00020"}, "value": "#1d2330"}
    return {
        "$schema": alt.SCHEMA_URL,
        "params": [c.param() for c in s.controls],
        "data": {"sequence": {"start": 0, "stop": s.sequence_rows, "as": "k"}},
        "transform": transforms(s),
        "vconcat": [
            {
                "width": WIDTH,
                "height": 30,
                "transform": _calc(verdict=verdict),
                "mark": {**text, "fontSize": 20, "fontWeight": "bold"},
                "encoding": {"text": {"field": "verdict"}, "color": color},
            },
            {
                "width": WIDTH,
                "height": {"step": LINE_HEIGHT},
                "transform": [
                    *_calc(line=details),
                    {"flatten": ["line"]},
                    {"window": [{"op": "row_number", "as": "row"}]},
                ],
                "mark": {**text, "fontSize": 13},
                "encoding": {
                    "y": {"field": "row", "type": "ordinal", "axis": None},
                    "text": {"field": "line"},
                },
            },
            {
                "width": WIDTH,
                "height": 26,
                "title": {"text": "Where the wall time goes (days)", "anchor": "start", "fontSize": 12},
                "layer": [
                    {
                        "transform": [
                            {"filter": "datum.finishes"},
                            *parts,
                            {"fold": shown, "as": ["part", "days"]},
                            *_calc(order=f"indexof({shown}, datum.part)"),
                        ],
                        "mark": "bar",
                        "encoding": bar,
                    },
                    {
                        "transform": [{"filter": "!datum.finishes"}],
                        "mark": {**text, "fontSize": 12, "y": 13},
                        "encoding": {
                            "text": {
                                "value": f"no bar: the job cannot finish (fewer instances{more} or "
                                "faster recovery)"
                            }
                        },
                    },
                ],
            },
        ],
        "autosize": {"type": "pad", "resize": True},  # longer lines after a slider moves widen it
        "config": {"view": {"stroke": None}},
    }
