"""SYNTHETIC support tickets drawn from the fictional company's house rules (`tfgrpo_dspy.kits.tickets.rules`).

Tickets are drawn rule by rule (the rules taken in turn in a seeded order): the target rule
is chosen first, then facts are drawn until that rule is the first to match, then the text
is rendered. Train and held-out tickets come from different random streams and from disjoint
pools of customer names and store cities; every ticket is signed by its customer, so no
ticket text can appear in both splits whatever the seeds.
"""

from __future__ import annotations

import random
from typing import Literal

import dspy

from tfgrpo_dspy.kits.tickets.rules import (
    HARDWARE,
    HOUSE_RULES,
    ISSUES,
    PLANS,
    REFUND_THRESHOLD,
    REGIONS,
    RULES_BY_NAME,
    SOFTWARE,
    TicketFacts,
    route,
)

Split = Literal["train", "heldout"]

_MAX_ATTEMPTS_PER_TICKET = 500


# -- sampling facts for a target rule ---------------------------------------------------------------
# The issues to propose when aiming at a rule; the rule itself (via `route`) accepts or rejects.
_TARGET_ISSUES: dict[str, tuple[str, ...]] = {
    "chargeback": ("chargeback",),
    "free_plan": tuple(issue for issue in ISSUES if issue != "chargeback"),
    "enterprise_login": ("login",),
    "refund_over_500": ("refund",),
    "refund_up_to_500": ("refund",),
    "eu_data_request": ("data_request",),
    "partner_region_hardware": ("hardware_fault",),
    "hardware_fault": ("hardware_fault",),
    "paid_cancellation": ("cancellation",),
    # Issues no rule names, and the near misses of the rules above (a Starter login, a US data
    # request, a Starter cancellation), which also end in the default queue.
    "default": ("howto", "invoice", "feature_request", "outage", "login", "data_request", "cancellation"),
}
_TARGET_PLANS: dict[str, tuple[str, ...]] = {
    "chargeback": PLANS,
    "free_plan": ("Free",),
    "enterprise_login": ("Enterprise",),
}
_PAID_PLANS = ("Starter", "Pro", "Enterprise")
# Issues whose text names a dollar amount.
_AMOUNT_ISSUES = ("chargeback", "refund", "invoice")


def _amount(rng: random.Random, issue: str) -> int | None:
    if issue not in _AMOUNT_ISSUES:
        return None
    if rng.random() < 0.5:  # half of the amounts near the threshold, where the refund rules split
        return rng.choice((rng.randint(300, REFUND_THRESHOLD), rng.randint(REFUND_THRESHOLD + 1, 750)))
    return rng.choice((rng.randint(15, 299), rng.randint(751, 2400)))


def _propose(rng: random.Random, target: str) -> TicketFacts:
    issue = rng.choice(_TARGET_ISSUES[target])
    plan = rng.choice(_TARGET_PLANS.get(target, _PAID_PLANS))
    region = rng.choice(REGIONS)
    product = rng.choice([p for p in HARDWARE + SOFTWARE if any(_fits(kind, p) for kind, _ in _TEMPLATES[issue])])
    return TicketFacts(plan=plan, region=region, issue=issue, product=product, amount=_amount(rng, issue))


# -- rendering ----------------------------------------------------------------------------------------
# Disjoint name and city pools per split: every ticket is signed and names its store's city.
_NAMES: dict[Split, tuple[str, ...]] = {
    "train": (
        "Maya Chen", "Liam O'Connor", "Sofia Rossi", "Noah Fischer", "Aisha Bello", "Diego Ramos",
        "Priya Nair", "Kenji Sato", "Elena Petrova", "Omar Haddad", "Hannah Berg", "Lucas Moreau",
        "Zara Ahmed", "Mateo Silva", "Chloe Martin", "Ravi Iyer",
    ),
    "heldout": (
        "Grace Kim", "Felix Wagner", "Amara Okafor", "Jonas Lind", "Ines Duarte", "Tariq Aziz",
        "Yuki Tanaka", "Nora Quinn", "Pablo Ortega", "Leila Karimi", "Sam Whitfield", "Mei Lin",
    ),
}
_CITIES: dict[Split, dict[str, tuple[str, ...]]] = {
    "train": {
        "NA": ("Denver", "Toronto", "Austin"),
        "EU": ("Lyon", "Rotterdam", "Porto"),
        "APAC": ("Osaka", "Perth", "Pune"),
        "LATAM": ("Bogotá", "Monterrey", "Córdoba"),
    },
    "heldout": {
        "NA": ("Portland", "Calgary"),
        "EU": ("Leipzig", "Bologna"),
        "APAC": ("Auckland", "Busan"),
        "LATAM": ("Valparaíso", "Curitiba"),
    },
}
_STORES = ("café", "bakery", "bookshop", "bike shop", "salon", "deli", "flower shop", "food truck", "toy store")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October")

# Body templates per issue, 2-3 sentences each, each for products of a kind ("any", "hardware",
# "software"). Only chargeback tickets say "chargeback", only refund and chargeback tickets say
# "refund", only cancellations say "cancel", only hardware faults describe a device failing, so
# the issue is always readable from the words.
_TEMPLATES: dict[str, tuple[tuple[str, str], ...]] = {
    "chargeback": (
        ("any", "A customer disputed a {amount} card payment at our {city} {store} and their bank has opened a "
         "chargeback. What evidence do you need from us?"),
        ("any", "I asked for a refund of {amount} for the {product} three weeks ago and nothing arrived, so I "
         "filed a chargeback with my bank. Please confirm you have received it."),
        ("any", "We got a chargeback notice for {amount} on a sale at our {city} {store}. The customer "
         "definitely received the goods, so how do we contest it?"),
        ("any", "A chargeback of {amount} was just taken from our payout. Can you tell me which sale it belongs "
         "to? It is the second one this month."),
    ),
    "login": (
        ("software", "I can't log in to the {product} since this morning and the password reset email never "
         "arrives. Our {city} {store} can't see today's sales."),
        ("software", "Our manager at the {city} {store} is locked out of the {product} after too many password "
         "attempts. Can you unlock the account?"),
        ("software", "The 2FA code for the {product} never reaches my phone, so I can't sign in. I have tried "
         "three times today."),
        ("software", "I need to reset the password of a staff account on the {product}. The previous manager left "
         "and nobody knows it."),
    ),
    "refund": (
        ("hardware", "Please refund the {amount} we were charged for the {product}; we sent it back unopened "
         "last week. The tracking shows it was delivered to you."),
        ("any", "We were billed {amount} twice this month for the {product}. Can you refund the duplicate "
         "charge?"),
        ("any", "I'd like a refund of {amount} for the {product}, it never did what the sales rep promised. We "
         "stopped using it after a week."),
        ("any", "Our {city} {store} is closed for renovation and we paid {amount} for the {product}, which we no "
         "longer need. Could we get that refunded?"),
    ),
    "data_request": (
        ("any", "Please export all the customer data you hold for our {city} {store}, including the loyalty "
         "members. We are moving to another system."),
        ("any", "I want you to delete all personal data you store about me and my staff. Please confirm when it "
         "is done."),
        ("software", "Could you send us a full export of our transaction data from the {product}? Our "
         "accountant needs it for an audit."),
        ("any", "We are closing the {store} in {city} and need every record of our customers' data erased from "
         "your servers. Who handles that?"),
    ),
    "hardware_fault": (
        ("hardware", "The {product} at our {city} {store} won't power on since the weekend. We already tried "
         "another outlet."),
        ("hardware", "Our {product} keeps rebooting in the middle of a sale and shows error E{code}. It started "
         "after yesterday's update."),
        ("hardware", "The {product} cracked when it fell off the counter. We can still take cash at the {store}, "
         "but that is all."),
        ("hardware", "Since Monday the {product} at the {city} {store} goes dead every hour until we unplug it. "
         "This is costing us sales."),
    ),
    "cancellation": (
        ("any", "We want to cancel our subscription at the end of this billing period. The {city} {store} is "
         "closing."),
        ("any", "Please cancel our plan, we have moved to another provider. Let us know if there is anything to "
         "sign."),
        ("software", "How do I cancel the {product} add-on? We no longer use it at the {store}."),
        ("any", "Our contract renews next month and we would like to cancel before it does. Please confirm the "
         "last billing date."),
    ),
    "howto": (
        ("software", "How do I add a new staff member to the {product}? I couldn't find it in the settings."),
        ("any", "Where can I change the tax rate on receipts from the {product}? Our {city} {store} needs the new "
         "rate from next month."),
        ("any", "Is there a way to get a daily sales summary from the {product}? Our {store} manager asks for it "
         "every evening."),
    ),
    "invoice": (
        ("any", "Could you resend the invoice for {month}? Our accountant can't find it anywhere."),
        ("any", "Invoice INV-{ref} for {amount} lists our old company address. Can you issue a corrected one?"),
        ("any", "The {month} invoice of {amount} shows the wrong VAT number for our {city} {store}. Please fix it "
         "before we file our taxes."),
    ),
    "feature_request": (
        ("any", "It would be great if the {product} could show tips per staff member. Is that on the roadmap?"),
        ("any", "Please consider adding a dark mode to the {product}. Our {store} is dim in the evenings and the "
         "screen is too bright."),
        ("software", "Could the {product} send a low-stock alert by text message? It would save our {city} "
         "{store} a lot of time."),
    ),
    "outage": (
        ("software", "The {product} has been down for all our stores since 9am and we can't see any orders. Is "
         "there an outage?"),
        ("software", "The {product} is not loading for anyone at the {city} {store}, while other websites work "
         "fine. Is something wrong on your side?"),
        ("software", "Is the {product} having an outage? Nothing has synced for two hours at our {store}."),
    ),
}
_OPENINGS = ("", "", "Hi, ", "Hello, ", "Hi team, ")
_CLOSINGS = ("", "", " This is urgent for us.", " Any help is appreciated.", " We have a busy weekend ahead.")
_SIGNOFFS = ("-- {name}", "Thanks, {name}", "{name}, {store} in {city}", "Best, {name}")


def _fits(kind: str, product: str) -> bool:
    return kind == "any" or (kind == "hardware") == (product in HARDWARE)


def _money(amount: int) -> str:
    return f"${amount:,}"


def _render(facts: TicketFacts, rng: random.Random, split: Split) -> str:
    fields = {
        "product": facts.product,
        "amount": _money(facts.amount) if facts.amount is not None else "",
        "city": rng.choice(_CITIES[split][facts.region]),
        "store": rng.choice(_STORES),
        "month": rng.choice(_MONTHS),
        "code": rng.randint(10, 99),
        "ref": rng.randint(1000, 9999),
        "name": rng.choice(_NAMES[split]),
    }
    templates = [text for kind, text in _TEMPLATES[facts.issue] if _fits(kind, facts.product)]
    body = rng.choice(templates).format(**fields)
    opening = rng.choice(_OPENINGS)
    if opening:  # "Hi, the card reader ..." but "Hi, I can't ..."
        body = opening + (body if body.startswith("I ") or body.startswith("I'") else body[0].lower() + body[1:])
    body += rng.choice(_CLOSINGS)
    signoff = rng.choice(_SIGNOFFS).format(**fields)
    return f"Plan: {facts.plan} | Region: {facts.region}\n{body}\n{signoff}"


def generate_tickets(n: int, seed: int = 0, split: Split = "train") -> list[dspy.Example]:
    """``n`` distinct tickets, the house rules taken in turn (as even a mix as ``n`` allows).

    Args:
        n: how many tickets.
        seed: the random seed; the same arguments always give the same tickets.
        split: "train" or "heldout"; the two never share a ticket text (disjoint name pools).

    Returns:
        Examples with ``ticket`` (the input), ``queue`` (the label) and ``rule`` (the name of the
        house rule that decided the queue, for reflection only), inputs set to ``ticket``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    # A string seed keeps the streams of the two splits apart (random hashes it with SHA-512).
    rng = random.Random(f"tickets:{split}:{seed}")
    names = [rule.name for rule in HOUSE_RULES]
    order = rng.sample(names, len(names))
    seen: set[str] = set()
    tickets: list[dspy.Example] = []
    for i in range(n):
        target = order[i % len(order)]
        for _ in range(_MAX_ATTEMPTS_PER_TICKET):
            facts = _propose(rng, target)
            if route(facts).name != target:
                continue
            text = _render(facts, rng, split)
            if text not in seen:
                break
        else:
            raise ValueError(f"could not draw {n} distinct tickets for rule {target!r}; ask for fewer")
        seen.add(text)
        rule = RULES_BY_NAME[target]
        tickets.append(dspy.Example(ticket=text, queue=rule.queue, rule=rule.name).with_inputs("ticket"))
    return tickets
