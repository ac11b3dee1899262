"""The course quota's fields and rules, written once: the console's form, the API's serializer
and schema, the model's ``clean()``, the admin and the ``quota_set`` service are derived from
``QUOTA_SPEC`` or call ``quota_errors``.

Each field has a unit, a range and, for memory, a grid: NPU memory is reserved in 128 MiB units
(``MEMORY_GRANULE_MIB``), and in 1 GiB units on a cluster whose nodes allocate in that step (the
``memory_step_mib`` of ``QuotaContext``). The cross-field rules: a course lends at most what it
is guaranteed; borrowing and lending happen only inside a cohort; a cohort belongs to one
institution; the guarantee fits the cluster's healthy cards, beside what the other courses
already guarantee (unless the institution allows overcommit), and the institution's allotment.
What depends on the database or the cluster arrives as plain data in ``QuotaContext``.

Messages are codes with parameters (as in ``labs.domain.reasons``), marked with
``gettext_noop`` so that ``makemessages`` extracts them; they are put into words when shown.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from labs.domain.units import CARD_INSTANCE_CAP, CORE_PERCENT_MAX, MEMORY_GRANULE_MIB, NODE_INSTANCE_CAP, Scenario


def gettext_noop(message: str) -> str:
    """Marks ``message`` for translation; it is translated where it is shown."""
    return message


# The database's column limits (PostgreSQL integer and bigint): no quota value may pass them.
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
MAX_SESSIONS_PER_STUDENT = 16
MAX_SESSION_MINUTES = 7 * 24 * 60
MAX_EXTENSIONS = 20
MAX_BUDGET = 1_000_000
COHORT_MAX_LENGTH = 64
# Django's slug, or empty (no cohort): what a cohort's name may hold.
COHORT_PATTERN = r"^[-a-zA-Z0-9_]*\Z"


class Unit(StrEnum):
    INSTANCES = "instances"
    CORE_PERCENT = "core_percent"  # % of one card's AI Core, summed over instances
    MIB = "MiB"
    MINUTES = "minutes"
    COUNT = "count"
    CORE_PERCENT_HOURS = "core_percent_hours"
    GIB_HOURS = "GiB_hours"
    MILLICORES = "millicores"
    TEXT = "text"


class Resource(StrEnum):
    """The three resources a guarantee, a borrowing limit and a lending limit are made of."""

    INSTANCES = "instances"
    CORE_PERCENT = "core_percent"
    MEMORY_MIB = "memory_mib"


@dataclass(frozen=True, slots=True)
class QuotaField:
    """One field of a course's quota.

    ``minimum``/``maximum``: the inclusive range of an int field. ``grid_mib``: the value is a
    multiple of it (the cluster's step may be coarser, see ``QuotaContext``). ``optional``: the
    field may be left empty (``None``, or ``""`` for text) and then means ``default`` or, where
    ``default`` is ``None``, no limit; a required field's ``default`` is a new quota's first
    value. ``resource``/``role``: the guarantee's, a borrowing or a lending limit's resource.
    ``label`` and ``help`` are messages to translate where shown.
    """

    name: str
    unit: Unit
    label: str
    minimum: int | None = None
    maximum: int | None = None
    grid_mib: int | None = None
    optional: bool = False
    default: int | str | None = None
    help: str = ""
    resource: Resource | None = None
    role: str | None = None  # "guarantee", "borrow" or "lend"
    max_length: int | None = None
    pattern: str | None = None

    @property
    def top(self) -> int | None:
        """The largest value allowed: ``maximum``, down to the grid."""
        if self.maximum is None or self.grid_mib is None:
            return self.maximum
        return self.maximum // self.grid_mib * self.grid_mib


def _int(name: str, unit: Unit, label: str, minimum: int, maximum: int, **kwargs) -> QuotaField:
    return QuotaField(name, unit, label, minimum, maximum, **kwargs)


_UNIT_RANGE = {Unit.INSTANCES: INT4_MAX, Unit.CORE_PERCENT: INT4_MAX, Unit.MIB: INT8_MAX}
_RESOURCE_UNIT = {Resource.INSTANCES: Unit.INSTANCES, Resource.CORE_PERCENT: Unit.CORE_PERCENT, Resource.MEMORY_MIB: Unit.MIB}


def _resource(name: str, resource: Resource, role: str, label: str) -> QuotaField:
    unit = _RESOURCE_UNIT[resource]
    return QuotaField(
        name,
        unit,
        label,
        0,
        _UNIT_RANGE[unit],
        grid_mib=MEMORY_GRANULE_MIB if unit is Unit.MIB else None,
        optional=role != "guarantee",
        # The console's form starts a new guarantee at 0 instances and 0 % (its memory empty).
        default=0 if role == "guarantee" and unit is not Unit.MIB else None,
        resource=resource,
        role=role,
    )


QUOTA_SPEC: tuple[QuotaField, ...] = (
    _resource("instance_count", Resource.INSTANCES, "guarantee", gettext_noop("Instances")),
    # xgettext:no-python-format
    _resource("core_percent", Resource.CORE_PERCENT, "guarantee", gettext_noop("AI Core (% of one card, summed)")),
    _resource("memory_mib", Resource.MEMORY_MIB, "guarantee", gettext_noop("NPU memory (GiB)")),
    QuotaField(
        "cohort",
        Unit.TEXT,
        gettext_noop("Cohort"),
        optional=True,
        default="",
        help=gettext_noop("Courses in one cohort lend each other idle quota. Empty: no borrowing or lending."),
        max_length=COHORT_MAX_LENGTH,
        pattern=COHORT_PATTERN,
    ),
    _resource("borrow_instances", Resource.INSTANCES, "borrow", gettext_noop("Borrowing limit: instances")),
    _resource("borrow_core_percent", Resource.CORE_PERCENT, "borrow", gettext_noop("Borrowing limit: AI Core (%)")),
    _resource("borrow_memory_mib", Resource.MEMORY_MIB, "borrow", gettext_noop("Borrowing limit: memory (GiB)")),
    _resource("lend_instances", Resource.INSTANCES, "lend", gettext_noop("Lending limit: instances")),
    _resource("lend_core_percent", Resource.CORE_PERCENT, "lend", gettext_noop("Lending limit: AI Core (%)")),
    _resource("lend_memory_mib", Resource.MEMORY_MIB, "lend", gettext_noop("Lending limit: memory (GiB)")),
    _int(
        "sessions_per_student",
        Unit.COUNT,
        gettext_noop("Sessions per student at a time"),
        1,
        MAX_SESSIONS_PER_STUDENT,
        default=1,
    ),
    _int(
        "max_session_minutes",
        Unit.MINUTES,
        gettext_noop("Maximum session length (minutes)"),
        1,
        MAX_SESSION_MINUTES,
        default=180,
    ),
    _int(
        "extensions_allowed",
        Unit.COUNT,
        gettext_noop("Extensions a student may ask for"),
        0,
        MAX_EXTENSIONS,
        optional=True,
        default=0,
        help=gettext_noop("Each lengthens a running session once, from its card. Empty or 0: none."),
    ),
    _int(
        "extension_minutes",
        Unit.MINUTES,
        gettext_noop("Minutes each extension adds"),
        1,
        MAX_SESSION_MINUTES,
        optional=True,
        default=30,
        help=gettext_noop("Empty: 30."),
    ),
    _int(
        "budget_core_percent_hours",
        Unit.CORE_PERCENT_HOURS,
        gettext_noop("Weekly budget per student: AI-Core-% × hours"),
        1,
        MAX_BUDGET,
        optional=True,
        # xgettext:no-python-format
        help=gettext_noop("E.g. 100: a 10 % share for 10 hours a week. Empty: no budget."),
    ),
    _int(
        "budget_gib_hours",
        Unit.GIB_HOURS,
        gettext_noop("Weekly budget per student: GiB × hours"),
        1,
        MAX_BUDGET,
        optional=True,
        help=gettext_noop("E.g. 80: 8 GiB for 10 hours a week. Empty: no budget."),
    ),
    _int(
        "host_cpu_cap_millicores",
        Unit.MILLICORES,
        gettext_noop("Host CPU cap (cores, all sessions)"),
        0,
        INT4_MAX,
        optional=True,
        help=gettext_noop("The servers' CPU all the course's labs may request together. Empty: no cap."),
    ),
    _int(
        "host_memory_cap_mib",
        Unit.MIB,
        gettext_noop("Host memory cap (GiB, all sessions)"),
        0,
        INT8_MAX,
        optional=True,
        help=gettext_noop("The servers' RAM all the course's labs may request together. Empty: no cap."),
    ),
)
QUOTA_FIELDS: tuple[str, ...] = tuple(f.name for f in QUOTA_SPEC)
FIELD: Mapping[str, QuotaField] = {f.name: f for f in QUOTA_SPEC}


def fields_of(role: str) -> tuple[QuotaField, ...]:
    """The guarantee's (``"guarantee"``), borrowing (``"borrow"``) or lending (``"lend"``) fields,
    in the order instances, AI Core, memory."""
    return tuple(f for f in QUOTA_SPEC if f.role == role)


def defaults() -> dict[str, int | str | None]:
    """The value of each field when none is given (a new quota; a field an API client left out)."""
    return {f.name: f.default for f in QUOTA_SPEC}


# --- what the check needs to know from outside ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterCaps:
    """What the cluster's healthy cards hold at most: the largest guarantee it can give.

    ``scenario`` is the most demanding of the course's templates (inference instances take
    more of a card); ``cards`` is only said in the message.
    """

    cards: int
    instances: int
    core_percent: int
    memory_mib: int
    scenario: Scenario = Scenario.DEVELOPMENT


@dataclass(frozen=True, slots=True)
class AllotmentRoom:
    """What the institution may guarantee in total (``limit``), what its other courses hold
    (``others``) and what is left for this course (``left``), per resource; ``None``: no limit."""

    limit: Mapping[Resource, int | None]
    others: Mapping[Resource, int]
    left: Mapping[Resource, int | None]


@dataclass(frozen=True, slots=True)
class Holder:
    """What another live course guarantees, per resource: ``course`` is its code, or empty for the
    courses of other institutions together (an instructor does not see them by name)."""

    course: str
    amounts: Mapping[Resource, int]


@dataclass(frozen=True, slots=True)
class QuotaContext:
    """What a quota is checked against besides its own values. Left out: not checked.

    ``memory_step_mib``: the step every node allocates memory in (the coarsest wins). ``caps``:
    the cluster's. ``held``: what the other live courses (of every institution) guarantee; with
    ``caps``, the guarantee must fit beside them, unless ``overcommit`` (the institution's
    operator allows it: the value is then a priority, not a guarantee). ``allotment``: the
    institution's. ``cohort_taken``: another institution has a course in the cohort named in the
    values.
    """

    memory_step_mib: int = MEMORY_GRANULE_MIB
    caps: ClusterCaps | None = None
    held: tuple[Holder, ...] | None = None
    overcommit: bool = False
    allotment: AllotmentRoom | None = None
    cohort_taken: bool = False


def cluster_left(caps: ClusterCaps, held: tuple[Holder, ...]) -> dict[Resource, int]:
    """What the cluster's healthy cards hold beyond what ``held`` guarantees, per resource (never
    below 0): the largest guarantee that can still be kept."""
    return {r: max(0, cap_of(caps, r) - sum(h.amounts.get(r, 0) for h in held)) for r in Resource}


# --- errors ------------------------------------------------------------------------------------


MESSAGES: dict[str, str] = {
    # Django's own words, so the form, the API and the service say the same; Django's catalogue
    # translates them, so they are not marked for the portal's.
    "min": "Ensure this value is greater than or equal to %(limit_value)s.",
    "max": "Ensure this value is less than or equal to %(limit_value)s.",
    "integer": "Enter a whole number.",
    "required": "This field is required.",
    "slug": "Enter a valid “slug” consisting of letters, numbers, underscores or hyphens.",
    "max_length": gettext_noop("Ensure this value has at most %(limit_value)s characters."),
    "grid": gettext_noop("Memory is reserved in steps of %(step)s: use %(below)s or %(above)s."),
    "cluster.instances": gettext_noop(
        "The cluster's %(cards)s healthy cards hold at most %(limit)s %(kind)s instances "
        "(%(per)s per card, %(per_node)s per node)."
    ),
    "cluster.core_percent": gettext_noop(
        "The cluster's %(cards)s healthy cards have %(limit)s %% of AI Core in all (%(per)s %% per card)."
    ),
    "cluster.memory_mib": gettext_noop("The cluster's %(cards)s healthy cards have %(limit)s of memory in all."),
    "held.instances": gettext_noop(
        "The cluster holds at most %(limit)s %(kind)s instances; other courses guarantee %(held)s of them "
        "(%(holders)s), so at most %(left)s can be guaranteed to this course."
    ),
    "held.core_percent": gettext_noop(
        "The cluster's cards have %(limit)s of AI Core; other courses guarantee %(held)s of it "
        "(%(holders)s), so at most %(left)s can be guaranteed to this course."
    ),
    "held.memory_mib": gettext_noop(
        "The cluster's cards have %(limit)s of memory; other courses guarantee %(held)s of it "
        "(%(holders)s), so at most %(left)s can be guaranteed to this course."
    ),
    "allotment": gettext_noop(
        "Your institution may guarantee %(limit)s in total; its other courses hold %(others)s, "
        "so at most %(left)s is left for this course."
    ),
    "lend_over_guarantee": gettext_noop("A course cannot lend more than it is guaranteed."),
    "cohort_only": gettext_noop("Borrowing and lending happen inside a cohort: name the cohort, or leave this empty."),
    "cohort_taken": gettext_noop("Another institution has a cohort of this name; choose another name."),
}
# Words put into a message, translated with it.
WORDS: dict[str, str] = {
    Scenario.INFERENCE.value: gettext_noop("inference"),
    Scenario.DEVELOPMENT.value: gettext_noop("development"),
    "holder": gettext_noop("%(course)s: %(amount)s"),
    "holders_separator": gettext_noop("; "),
    "other_institutions": gettext_noop("courses of other institutions"),
}


class Amount(NamedTuple):
    """An amount in a message, shown in its unit (memory as GiB, AI Core with %)."""

    value: int
    unit: Unit


class Word(NamedTuple):
    """A word in a message, translated with it (``WORDS``)."""

    key: str


class Holders(NamedTuple):
    """The courses that hold a resource, in a message: each course's code (``""``: the courses of
    other institutions together) and its amount, the largest first."""

    entries: tuple[tuple[str, Amount], ...]

    def render(self, gettext: Callable[[str], str], show: Callable[[Amount], str]) -> str:
        named = (
            gettext(WORDS["holder"]) % {"course": course or gettext(WORDS["other_institutions"]), "amount": show(amount)}
            for course, amount in self.entries
        )
        return gettext(WORDS["holders_separator"]).join(named)


def english_amount(amount: Amount) -> str:
    """An amount as plain English text; pages pass their own, in the reader's number format."""
    if amount.unit is Unit.MIB:
        gib = amount.value / 1024
        return f"{gib:,.3f}".rstrip("0").rstrip(".") + " GiB"
    if amount.unit is Unit.CORE_PERCENT:
        return f"{amount.value} %"
    return str(amount.value)


@dataclass(frozen=True, slots=True)
class QuotaError:
    """What is wrong with one field: a ``MESSAGES`` code and its parameters."""

    field: str
    code: str
    params: Mapping[str, int | str | Amount | Word | Holders] = dataclasses.field(default_factory=dict)

    def render(self, gettext: Callable[[str], str] = gettext_noop, show: Callable[[Amount], str] = english_amount) -> str:
        """The message in the language ``gettext`` translates to, amounts shown by ``show``."""
        params = {name: _param_text(value, gettext, show) for name, value in self.params.items()}
        message = gettext(MESSAGES[self.code])
        return message % params if params else message

    def __str__(self) -> str:
        return self.render()


def _param_text(value: object, gettext: Callable[[str], str], show: Callable[[Amount], str]) -> object:
    if isinstance(value, Amount):
        return show(value)
    if isinstance(value, Word):
        return gettext(WORDS[value.key])
    if isinstance(value, Holders):
        return value.render(gettext, show)
    return value


def _field_errors(spec: QuotaField, value: object, memory_step_mib: int) -> Iterator[QuotaError]:
    """What is wrong with ``value`` alone: its type, range, grid or form."""
    if value is None or (spec.unit is Unit.TEXT and value == ""):
        if not spec.optional:
            yield QuotaError(spec.name, "required")
        return
    if spec.unit is Unit.TEXT:
        if not isinstance(value, str):
            yield QuotaError(spec.name, "slug")
        elif spec.max_length is not None and len(value) > spec.max_length:
            yield QuotaError(spec.name, "max_length", {"limit_value": spec.max_length})
        elif spec.pattern is not None and not re.match(spec.pattern, value):
            yield QuotaError(spec.name, "slug")
        return
    if type(value) is not int:
        yield QuotaError(spec.name, "integer")
        return
    if spec.minimum is not None and value < spec.minimum:
        yield QuotaError(spec.name, "min", {"limit_value": spec.minimum})
    elif spec.top is not None and value > spec.top:
        yield QuotaError(spec.name, "max", {"limit_value": spec.top})
    elif spec.grid_mib is not None:
        step = max(spec.grid_mib, memory_step_mib)
        if value % step:
            yield grid_error(spec.name, value, step)


def grid_error(name: str, memory_mib: int, step_mib: int) -> QuotaError:
    """``memory_mib`` is off the ``step_mib`` grid: the error names the steps below and above it."""
    below = memory_mib // step_mib * step_mib
    return QuotaError(
        name,
        "grid",
        {"step": Amount(step_mib, Unit.MIB), "below": Amount(below, Unit.MIB), "above": Amount(below + step_mib, Unit.MIB)},
    )


def _cluster_error(spec: QuotaField, caps: ClusterCaps) -> QuotaError:
    resource = spec.resource
    if resource is Resource.INSTANCES:
        params: dict = {
            "limit": caps.instances,
            "kind": Word(caps.scenario.value),
            "per": CARD_INSTANCE_CAP[caps.scenario],
            "per_node": NODE_INSTANCE_CAP[caps.scenario],
        }
    elif resource is Resource.CORE_PERCENT:
        params = {"limit": caps.core_percent, "per": CORE_PERCENT_MAX}
    else:
        params = {"limit": Amount(caps.memory_mib, Unit.MIB)}
    return QuotaError(spec.name, f"cluster.{resource}", {"cards": caps.cards, **params})


def _held_error(spec: QuotaField, caps: ClusterCaps, held: tuple[Holder, ...], left: int) -> QuotaError:
    """``spec``'s value does not fit beside the other courses' guarantees: the error names them."""
    resource, unit = spec.resource, spec.unit
    holders = sorted(((h.course, h.amounts.get(resource, 0)) for h in held), key=lambda e: (-e[1], e[0]))  # type: ignore[arg-type]
    entries = tuple((course, Amount(amount, unit)) for course, amount in holders if amount > 0)
    params: dict = {
        "limit": Amount(cap_of(caps, resource), unit),  # type: ignore[arg-type]
        "held": Amount(sum(a.value for _, a in entries), unit),
        "left": Amount(left, unit),
        "holders": Holders(entries),
    }
    if resource is Resource.INSTANCES:
        params["kind"] = Word(caps.scenario.value)
    return QuotaError(spec.name, f"held.{resource}", params)


def cap_of(caps: ClusterCaps, resource: Resource) -> int:
    return {Resource.INSTANCES: caps.instances, Resource.CORE_PERCENT: caps.core_percent}.get(resource, caps.memory_mib)


def quota_errors(values: Mapping[str, object], context: QuotaContext | None = None) -> list[QuotaError]:
    """Everything wrong with ``values`` (a quota's fields by name), rule by rule; ``context``
    left out: the quota's own rules only.

    A field missing from ``values`` is not checked (a form reports its own field errors and
    leaves the field out); a field with an error is not checked again by a later rule. An
    empty list: the quota may be saved.
    """
    unknown = set(values) - set(FIELD)
    if unknown:
        raise ValueError(f"unknown quota fields {sorted(unknown)}")
    context = context or QuotaContext()
    errors: list[QuotaError] = []
    wrong: set[str] = set()

    def add(error: QuotaError) -> None:
        errors.append(error)
        wrong.add(error.field)

    def given(name: str) -> object:
        return None if name in wrong else values.get(name)

    for spec in QUOTA_SPEC:
        if spec.name in values:
            for error in _field_errors(spec, values[spec.name], context.memory_step_mib):
                add(error)
    if values.get("cohort") and "cohort" not in wrong and context.cohort_taken:
        add(QuotaError("cohort", "cohort_taken"))
    guarantee = fields_of("guarantee")
    if context.caps is not None:
        for spec in guarantee:
            value = given(spec.name)
            if isinstance(value, int) and value > cap_of(context.caps, spec.resource):  # type: ignore[arg-type]
                add(_cluster_error(spec, context.caps))
    if context.caps is not None and context.held is not None and not context.overcommit:
        left = cluster_left(context.caps, context.held)
        for spec in guarantee:
            value = given(spec.name)
            if isinstance(value, int) and value > left[spec.resource]:  # type: ignore[index]
                add(_held_error(spec, context.caps, context.held, left[spec.resource]))  # type: ignore[index]
    room = context.allotment
    if room is not None:
        for spec in guarantee:
            value, left = given(spec.name), room.left.get(spec.resource)  # type: ignore[arg-type]
            if isinstance(value, int) and left is not None and value > left:
                unit = spec.unit
                add(
                    QuotaError(
                        spec.name,
                        "allotment",
                        {
                            "limit": Amount(room.limit[spec.resource], unit),  # type: ignore[index,arg-type]
                            "others": Amount(room.others[spec.resource], unit),  # type: ignore[index]
                            "left": Amount(left, unit),
                        },
                    )
                )
    for lend, nominal in zip(fields_of("lend"), guarantee, strict=True):
        value, limit = given(lend.name), given(nominal.name)
        if isinstance(value, int) and isinstance(limit, int) and value > limit:
            add(QuotaError(lend.name, "lend_over_guarantee"))
    if not given("cohort"):
        for spec in fields_of("borrow") + fields_of("lend"):
            if given(spec.name) not in (None, 0):
                add(QuotaError(spec.name, "cohort_only"))
    return errors


def errors_by_field(errors: list[QuotaError]) -> dict[str, list[QuotaError]]:
    """``errors`` grouped by field, in order."""
    grouped: dict[str, list[QuotaError]] = {}
    for error in errors:
        grouped.setdefault(error.field, []).append(error)
    return grouped
