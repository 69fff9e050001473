"""The word-problem families: one template each, with one trap a small model tends to fall for.

A trap is a distractor number, a unit conversion, "how many more", a discount followed by a markup, ...
Each family draws its names, items and numbers from the random stream it is given, and computes its answer
from the sampled integers; numbers are drawn so that every division is exact. `.generator` draws the problems
of a split from these families.
"""

from __future__ import annotations

import random
from collections.abc import Callable

Problem = tuple[str, int]  # (question text, exact answer)

_PEOPLE = (
    ("Maya", "she"),
    ("Liam", "he"),
    ("Sofia", "she"),
    ("Noah", "he"),
    ("Aisha", "she"),
    ("Diego", "he"),
    ("Priya", "she"),
    ("Kenji", "he"),
    ("Elena", "she"),
    ("Omar", "he"),
    ("Hannah", "she"),
    ("Lucas", "he"),
    ("Zara", "she"),
    ("Mateo", "he"),
    ("Chloe", "she"),
    ("Ravi", "he"),
    ("Grace", "she"),
    ("Felix", "he"),
    ("Amara", "she"),
    ("Jonas", "he"),
)
_RELATIVES = ("cousin", "neighbor", "brother", "sister", "classmate", "friend")
_SMALL_ITEMS = ("crayons", "stickers", "marbles", "beads", "stamps", "buttons", "seashells", "cards")
_BAKED = ("muffins", "cookies", "bagels", "cupcakes", "rolls", "donuts")
_GOODS = ("jacket", "lamp", "backpack", "chair", "bicycle helmet", "coffee maker", "guitar", "tent")
_EVENTS = ("concert", "museum", "zoo", "theater", "aquarium", "science fair")
_HOBBIES = ("piano", "drawing", "chess", "guitar", "swimming", "reading")
_STRIPS = (("rope", "bracelet"), ("ribbon", "bow"), ("wire", "hook"), ("string", "tag"))
_SUPPLIES = ("notebooks", "pencils", "folders", "erasers", "markers")
_LIQUIDS = ("water", "oil", "juice")
_POSSESSIVE = {"she": "her", "he": "his"}
_OBJECTIVE = {"she": "her", "he": "him"}


def _person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(_PEOPLE)


def _distinct_people(rng: random.Random, k: int) -> list[str]:
    return [name for name, _ in rng.sample(_PEOPLE, k)]


def _distractor(rng: random.Random) -> Problem:
    """Numbers about someone else (age, the relative's own stash) must be ignored."""
    name, pronoun = _person(rng)
    item = rng.choice(_SMALL_ITEMS)
    relative = rng.choice(_RELATIVES)
    age, boxes, per_box = rng.randint(8, 15), rng.randint(3, 9), rng.randint(6, 24)
    given = rng.randint(5, boxes * per_box - 5)
    relative_has = rng.randint(10, 60)
    question = (
        f"{name} is {age} years old. {pronoun.capitalize()} buys {boxes} boxes of {item} "
        f"with {per_box} {item} in each box. {pronoun.capitalize()} gives {given} {item} to "
        f"{_POSSESSIVE[pronoun]} {relative}, who already had {relative_has} {item}. "
        f"How many {item} does {name} have now?"
    )
    return question, boxes * per_box - given


def _minutes_hours(rng: random.Random) -> Problem:
    """Minutes per day over weeks, asked in hours: two conversions (weeks->days, min->h)."""
    name, _ = _person(rng)
    hobby = rng.choice(_HOBBIES)
    while True:
        minutes, weeks = rng.choice((15, 20, 25, 30, 35, 40, 45, 50)), rng.randint(2, 6)
        if (minutes * 7 * weeks) % 60 == 0:
            break
    question = (
        f"{name} practices {hobby} for {minutes} minutes every day. "
        f"How many hours does {name} spend on {hobby} in {weeks} weeks?"
    )
    return question, minutes * 7 * weeks // 60


def _cm_m(rng: random.Random) -> Problem:
    """A length in meters, a cut in centimeters, pieces in centimeters."""
    name, pronoun = _person(rng)
    strip, thing = rng.choice(_STRIPS)
    while True:
        meters, cut_cm, piece_cm = (
            rng.randint(2, 9),
            rng.choice((20, 30, 40, 50, 60, 80)),
            rng.choice((10, 20, 25, 40, 50)),
        )
        rest = meters * 100 - cut_cm
        if rest > 0 and rest % piece_cm == 0:
            break
    question = (
        f"{name} has a {strip} that is {meters} meters long. {pronoun.capitalize()} cuts off "
        f"{cut_cm} centimeters to make a {thing}, then cuts the rest into pieces that are "
        f"{piece_cm} centimeters long each. How many pieces does {name} get?"
    )
    return question, rest // piece_cm


def _dozens(rng: random.Random) -> Problem:
    """Dozens must become twelves before adding loose items and subtracting sales."""
    item = rng.choice(_BAKED)
    dozens, extra = rng.randint(3, 9), rng.randint(4, 11)
    sold = rng.randint(10, dozens * 12 + extra - 3)
    question = (
        f"A bakery bakes {dozens} dozen {item} in the morning and another {extra} {item} in the "
        f"afternoon. It sells {sold} {item}. How many {item} are left?"
    )
    return question, dozens * 12 + extra - sold


def _more_fewer(rng: random.Random) -> Problem:
    """Asked for a difference, not a total; the chain goes through a third person."""
    first, second, third = _distinct_people(rng, 3)
    item = rng.choice(_SMALL_ITEMS)
    base, times = rng.randint(6, 25), rng.randint(2, 4)
    fewer = rng.randint(2, base * (times - 1) - 1)
    question = (
        f"{first} has {base} {item}. {second} has {times} times as many {item} as {first}, "
        f"and {third} has {fewer} fewer {item} than {second}. "
        f"How many more {item} does {third} have than {first}?"
    )
    return question, base * times - fewer - base


def _percent_off_on(rng: random.Random) -> Problem:
    """A discount then a markup on the *reduced* price: they do not cancel."""
    good = rng.choice(_GOODS)
    while True:
        price = rng.randrange(20, 401, 4)
        off, on = rng.choice((10, 20, 25, 40, 50)), rng.choice((10, 20, 25, 50))
        if (price * (100 - off) * (100 + on)) % 10_000 == 0:
            break
    question = (
        f"A {good} costs ${price}. During a sale its price is reduced by {off}%. After the sale, "
        f"the store raises the sale price by {on}%. What is the final price of the {good} in dollars?"
    )
    return question, price * (100 - off) * (100 + on) // 10_000


def _per_item_total(rng: random.Random) -> Problem:
    """Per-person prices for the buyer *and* friends, plus one fee for the whole order."""
    name, pronoun = _person(rng)
    event = rng.choice(_EVENTS)
    ticket, friends, fee = rng.randint(6, 30), rng.randint(2, 6), rng.randint(3, 12)
    question = (
        f"Tickets to the {event} cost ${ticket} per person. {name} buys tickets for "
        f"{_OBJECTIVE[pronoun]}self and {friends} friends, and pays a ${fee} booking fee "
        f"for the whole order. How many dollars does {name} pay in total?"
    )
    return question, ticket * (friends + 1) + fee


def _each_of(rng: random.Random) -> Problem:
    """Nested "each of" counts, then whole packs."""
    supply = rng.choice(_SUPPLIES)
    while True:
        classes, students = rng.randint(3, 8), rng.randint(18, 30)
        per_student, pack = rng.randint(2, 5), rng.choice((5, 6, 8, 10, 12))
        if (classes * students * per_student) % pack == 0:
            break
    question = (
        f"A school has {classes} classes. Each of the classes has {students} students, and each of "
        f"the students needs {per_student} {supply}. The {supply} come in packs of {pack}. "
        f"How many packs must the school buy?"
    )
    return question, classes * students * per_student // pack


def _rates(rng: random.Random) -> Problem:
    """A fill rate against a drain rate: the net rate is the difference."""
    liquid = rng.choice(_LIQUIDS)
    while True:
        fill, leak = rng.randint(6, 20), rng.randint(1, 5)
        minutes = rng.randint(8, 40)
        if fill > leak:
            break
    volume = (fill - leak) * minutes
    question = (
        f"An empty tank holds {volume} liters of {liquid}. A pipe fills it at {fill} liters per "
        f"minute, but a leak drains {leak} liters per minute at the same time. "
        f"How many minutes does it take to fill the tank?"
    )
    return question, minutes


FAMILIES: dict[str, Callable[[random.Random], Problem]] = {
    "distractor": _distractor,
    "minutes_hours": _minutes_hours,
    "cm_m": _cm_m,
    "dozens": _dozens,
    "more_fewer": _more_fewer,
    "percent_off_on": _percent_off_on,
    "per_item_total": _per_item_total,
    "each_of": _each_of,
    "rates": _rates,
}
