"""A layout as text, read from the layout's definition (`specs.layout.LAYOUT_FIELDS`): the compact form tables and
charts use (`layout_text`: `tp8 pp16 dp12 mbs1 zero1 selective interleaved`) and the full line of every field
(`layout_line`), so a new layout field appears in both without a line changed here.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from llmscale.layout.arrays import Layouts
from llmscale.specs.layout import Layout, LayoutField, Show, spec_fields


def _reference(field: LayoutField, layout: Layout) -> Any:
    """The value a field has when the user leaves it out: its default, or — a derived field — what its rule gives
    for the rest of this layout (the rule the array struct applies)."""
    if field.knob.derive is None:
        return field.default
    gpus = layout.tp * layout.cp * layout.pp * (layout.dp or 1)
    left_out = layout.model_copy(update={field.name: None})
    return getattr(Layouts.from_layout(left_out, gpus).row(0), field.name)


def _value(layout: Layout, field: LayoutField) -> Any:
    """The field's value, with a derived field's rule applied where the layout leaves it out."""
    value = getattr(layout, field.name)
    return _reference(field, layout) if value is None else value


def _token(field: LayoutField, value: Any) -> str:
    label = field.knob.label.replace(" ", "-")
    if isinstance(value, bool):
        return label if value else f"no-{label}"
    if isinstance(value, Enum):
        return str(value.value)
    return f"{label}{value}"


def layout_text(layout: Layout) -> str:
    """Compact text: the fields shown ALWAYS, then every other field whose value differs from its default (or
    derived value), e.g. `tp4 pp16 dp256 ep256 etp1 mbs1 zero1 full dualpipe ep-overlap`."""
    tokens = []
    for field in spec_fields(type(layout)):
        value = _value(layout, field)
        if value is None:
            continue
        if field.knob.show is Show.ALWAYS or value != _reference(field, layout):
            tokens.append(_token(field, value))
    return " ".join(tokens)


def layout_line(layout: Layout) -> str:
    """Every field as `label value` (flags on/off), e.g. `tp 8 · pp 8 · dp 24 · … · rank order tp-cp-ep-dp-pp`."""
    parts = []
    for field in spec_fields(type(layout)):
        value = _value(layout, field)
        shown = ("on" if value else "off") if isinstance(value, bool) else getattr(value, "value", value)
        parts.append(f"{field.knob.label} {shown}")
    return " · ".join(parts)


def layout_of(document: dict[str, Any]) -> Layout:
    """A layout written into a JSON document (`model_dump(mode="json")`) as a Layout again."""
    return Layout.model_validate(document)
